// Package sdk caps how often something may happen: at most N sends to one
// user per minute, at most 3 impressions of a campaign per user per
// natural day, 30 API calls per minute with bursts of 15.
//
// A [Rule] is one cap (algorithm, limit, window, the dimensions it is
// keyed by); a [Policy] is a set of rules checked together,
// all-or-nothing: a request denied by any rule consumes nothing from the
// others. A [Subject] gives the dimension values of one request (user,
// content, campaign…). A [Limiter] asks a backend (the embedded
// in-memory one, or Redis) for each decision, in one atomic step.
//
//	push, err := sdk.NewPolicy("push", []sdk.Rule{
//		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
//		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
//	})
//	lim := sdk.New(memory.New(nil)) // or redis.New(client, nil)
//	d, err := lim.Allow(ctx, push, sdk.Subject{"user": id, "content": sdk.Fingerprint(body)})
//	if err == nil && !d.Allowed {
//		// d.Denied names the rules; d.RetryAfter says when to retry.
//	}
//
// # Requests
//
// Every operation takes one [Attempt]: a subject, a cost (0 means 1) and
// an optional idempotency key. [Limiter.Allow] is the shorthand for a
// cost-1 attempt. [Limiter.Take] consumes, [Limiter.Peek] only asks,
// [Limiter.Wait] delays instead of denying, [Limiter.Reserve] consumes now
// and commits or cancels later ([Reservation]). [Limiter.TakeBatch] and
// [Limiter.PeekBatch] decide many attempts in few round trips. An
// attempt's IdempotencyKey makes a retry after a timeout return the first
// decision instead of consuming twice; a policy's [WithHotDenyCache] answers
// recently denied subjects without a backend call.
//
// # Administration
//
// The Limiter decides; what an operator does besides is its [Admin]'s
// ([Limiter.Admin], sharing the Limiter's backend, options and hot-deny
// cache): [Admin.Inspect] explains a subject's state and recent denials
// ([Denial]); [Admin.Reset] forgets it, [Admin.ResetRules] only some of
// its rules; [Admin.SetOverride], [Admin.DeleteOverride] and
// [Admin.Overrides] manage per-person exceptions; [Admin.Describe],
// [Admin.KeyLayout] and [Admin.HotDenyStats] say how the backend decides,
// which key holds what, and how the hot-deny cache fares.
//
//	adm := lim.Admin()
//	in, err := adm.Inspect(ctx, push, sdk.Subject{"user": id})
//
// Package sdk/policyfile loads policies from YAML; package sdk/policystore
// keeps them as versions in the backend for every limiter to follow.
// Package sdk/driver
// owns the values the sdk shares with backends: the algorithms and
// calendar units of a [Rule] (driver.FixedWindow, driver.Day…), the
// number bounds (driver.MaxLimit and its siblings), an override
// (driver.Override, driver.Exempt, driver.Block, driver.Limit), a
// backend's description, and the Backend and Clock interfaces [New] and
// [WithClock] take.
//
// # Changing rules, trying them, and exceptions
//
// A rule marked Shadow ([Rule.AsShadow]) is evaluated, counted and
// recorded but never denies ([Decision].ShadowDenied says what it would
// have denied): try a stricter cap beside the enforced one. A rule whose
// identity changes (algorithm, window, cells, calendar, zone: its Epoch),
// or whose state would change its meaning under the same keys (a GCRA
// rate: [SameState]), starts under new keys; [WithChange] records what it was, so that the
// former rule keeps enforcing until its state proves nothing more
// ([RuleDecision].Before) and the new one starts from the units it
// counted: a change never uncaps anyone. A policy built [WithOverrides]
// reads per-person overrides in the same step ([Admin.SetOverride]:
// exempt, block until a time, other limits for named rules;
// [Decision].Override names the one that applied). Package sdk/policystore
// derives changes from the versions of a policy store.
//
// # Decisions and errors
//
// A denial is a [Decision] with Allowed false, not an error: it says, per
// rule ([RuleDecision]), used, limit, remaining, when the window resets
// and when to retry, and which rules denied. An error means no decision
// was made: invalid input, or a backend failure under a fail-closed
// policy (a fail-open policy, [WithFailOpen], answers Allowed with Degraded
// set instead). Errors name the operation ("sdk: peek: …") and wrap the
// package's sentinels ([ErrInvalidRule], [ErrInvalidPolicy],
// [ErrInvalidSubject], [ErrInvalidCost], [ErrInvalidIdempotencyKey],
// [ErrCostTooHigh], [ErrWaitTooLong], [ErrReservationNotFound],
// [ErrInvalidOverride], [ErrOverrideNotFound]), matched
// with errors.Is; an operation the backend cannot do wraps
// errors.ErrUnsupported. Subject values never appear in errors.
//
// Numbers are bounded so that no backend overflows an int64 or rounds a
// double for their size: Limit, Burst+1 and a cost at most driver.MaxLimit,
// Window at most driver.MaxWindow, a GCRA rule's emission interval at least
// driver.MinInterval and its tolerance at most driver.MaxTolerance. [NewPolicy]
// and the calls refuse anything beyond with an error that
// names the field and the bound.
//
// # Concurrency
//
// A Limiter is safe for concurrent use; create one per backend and share
// it. Policies and rules are immutable values once built. A decision is
// one atomic step in the backend (the memory backend, or a script on
// Redis), so any number of processes may share one Redis deployment:
// nothing is lost or counted twice between them. The exception is the
// Redis backend's bare mode (servers without scripting, see
// docs/MODULES.md): other clients may briefly see units a denied request
// consumed and then gave back, a GCRA rule on redis-cell's CL.THROTTLE
// keeps the units of a request another such rule refused (under-admission,
// never over-admission), and such a decision says so
// ([Decision].NonAtomic).
//
// # Time
//
// Decisions use the backend's clock: a Redis server's own, or, for the
// memory backend, the clock it was given (memory.Options.Clock). A
// calendar rule ([Daily], [Hourly], [Weekly], [Monthly]) counts in the
// local hours, days, ISO weeks or months of its zone, or of the
// recipient's when the attempt carries one ([Attempt].Zone, which wins),
// following the local clock across DST changes. On Redis it also needs the
// clients' clocks roughly right: the client sends the window boundaries
// around its own time and the script picks the one around the server's,
// so a client clock off by more than redis.Options.CalendarSpan units
// (default 1: an hour, a day, a week or a month) makes the decision fail
// with an error. The Limiter
// reads the backend's clock for what it times itself (degraded
// decisions, Wait's deadline check and sleeps, the hot-deny cache),
// unless [WithClock] sets another (a driver.Clock).
// A *fakeclock.Clock (package sdk/fakeclock) given to the memory
// backend makes a test deterministic: time moves only when the test moves
// it, and Wait advances it instead of sleeping.
package sdk
