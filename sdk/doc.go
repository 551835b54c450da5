// Package sdk caps how often something may happen: at most N sends to one
// user per minute, at most 3 impressions of a campaign per user per
// natural day, 30 API calls per minute with bursts of 15.
//
// A Rule is one cap (algorithm, limit, window, the dimensions it is keyed
// by); a Policy is a set of rules checked together, all-or-nothing: a
// request denied by any rule consumes nothing from the others. A Subject
// gives the dimension values of one request (user, content, campaign...).
// A Limiter asks a backend (package sdk/driver; e.g. backends/memory or
// backends/redis) for each decision, in one atomic step.
//
//	push, err := sdk.NewPolicy("push", []sdk.Rule{
//		sdk.Sliding("recv-1m", 15, time.Minute).By("user"),
//		sdk.Sliding("content-59s", 2, 59*time.Second).By("user", "content"),
//	})
//	lim := sdk.New(backend)
//	d, err := lim.Allow(ctx, push, sdk.Subject{"user": id, "content": sdk.Fingerprint(body)})
//	if err == nil && !d.Allowed {
//		// d.Denied names the rules; d.RetryAfter says when to retry.
//	}
//
// For campaigns, AllowBatch decides many subjects in few round trips;
// an Attempt's IdempotencyKey makes a retry after a timeout return the
// first decision instead of consuming twice; a policy's HotDenyCache
// answers recently denied subjects without a backend call.
//
// Policies can also be loaded from YAML (LoadPolicies). Limiter.Inspect
// explains a subject's state and recent denials; Limiter.Keys shows where
// it is stored. The storage key scheme and the exact arithmetic of every
// algorithm are in docs/DESIGN.md.
//
// Numbers are bounded so that no backend overflows an int64 or rounds a
// double for their size: Limit, Burst+1 and a cost at most MaxLimit,
// Window at most MaxWindow, a GCRA rule's emission interval at least
// MinInterval and its tolerance at most MaxTolerance. NewPolicy,
// LoadPolicies and the calls refuse anything beyond.
//
// Errors wrap the package's sentinels (ErrInvalidRule, ErrInvalidPolicy,
// ErrInvalidSubject, ErrInvalidCost, ...), matched with errors.Is; subject
// values never appear in them. A denial is a Decision, not an error.
package sdk
