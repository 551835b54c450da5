package serve

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	corev3 "github.com/freqcap/freqcap/gen/envoy/config/core/v3"
	rlsv3 "github.com/freqcap/freqcap/gen/envoy/service/ratelimit/v3"
	"github.com/freqcap/freqcap/gen/envoy/service/ratelimit/v3/ratelimitv3connect"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/ratelimitheaders"
	"github.com/freqcap/freqcap/sdk"
)

// envoyService speaks Envoy's rate-limit service API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over the
// same policies, callers and handlers' bounds as FreqcapService:
//
//   - domain names the policy (the caller needs take on it for the
//     descriptors that consume, peek for those that peek);
//   - each descriptor is one attempt, decided as TakeBatch decides it
//     (atomic, all-or-nothing, on its own): its entries are the subject,
//     key → dimension, value → value; a key the policy lacks, a key given
//     twice, a missing or empty dimension or a bad hits_addend refuse the
//     whole request before any of it is decided (invalid_argument); on
//     Redis the descriptors go through the backend's coalescer
//     (redis.Options.Coalesce): they share a script, in order, with
//     the concurrent calls;
//   - the cost is the descriptor's hits_addend when set, else the
//     request's, else 1; a descriptor hits_addend of 0 peeks (over limit
//     when one more unit would be denied; nothing consumed); a
//     descriptor's limit override is ignored: the policy decides;
//   - overall_code is OVER_LIMIT when any descriptor is denied; each
//     status gives the rule the RateLimit header reports
//     (ratelimitheaders.Governing): its name, limit and unit
//     (current_limit), remaining units (limit_remaining) and the time
//     until it resets or, denied, until a retry passes
//     (duration_until_reset: quiet hours included);
//   - an attempt's zone, class, priority and identity are not carried
//     (every entry is a dimension): a descriptor decides as an attempt
//     without them, at priority 0, in quiet hours of the policy's zone;
//   - response_headers_to_add are the IETF RateLimit, RateLimit-Policy
//     and, when denied, Retry-After headers of the most restrictive
//     descriptor (the denied one with the longest wait, else the allowed
//     one with the fewest units left), which Envoy adds to its answer;
//   - a fail-open policy whose backend fails answers OK (degraded), a
//     fail-closed one unavailable: Envoy's failure_mode_deny decides.
type envoyService struct{ svc *service }

var _ ratelimitv3connect.RateLimitServiceHandler = (*envoyService)(nil)

// descriptorAttempt is one descriptor's attempt; peek when its hits_addend
// is 0.
type descriptorAttempt struct {
	a    sdk.Attempt
	peek bool
}

func (e *envoyService) ShouldRateLimit(ctx context.Context, req *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
	m := req.Msg
	// Each descriptor needs its own operation's grant: take to consume,
	// peek to peek (as Take and Peek do).
	var p *sdk.Policy
	var set *policySet
	for _, op := range envoyOps(m) {
		var err error
		if p, set, err = e.svc.policy(ctx, op, m.GetDomain()); err != nil {
			return nil, err
		}
	}
	atts, err := e.attempts(p, m)
	if err != nil {
		return nil, err
	}
	decisions, err := e.decide(ctx, p, atts)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(e.response(set, p, decisions)), nil
}

// attempts returns the attempts of m's descriptors under p, or the
// error that refuses the whole request before any of it is decided.
func (e *envoyService) attempts(p *sdk.Policy, m *rlsv3.RateLimitRequest) ([]descriptorAttempt, error) {
	ds := m.GetDescriptors()
	if len(ds) == 0 {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "a rate-limit request needs at least one descriptor")
	}
	if len(ds) > e.svc.s.cfg.MaxBatch {
		return nil, invalid(freqcapv1.Reason_REASON_TOO_LARGE, "%d descriptors: a request holds at most %d", len(ds), e.svc.s.cfg.MaxBatch)
	}
	atts := make([]descriptorAttempt, len(ds))
	for i, d := range ds {
		subj := make(sdk.Subject, len(d.GetEntries()))
		for _, en := range d.GetEntries() {
			if _, dup := subj[en.GetKey()]; dup {
				return nil, invalid(freqcapv1.Reason_REASON_INVALID_SUBJECT, "descriptor %d gives %q twice", i, en.GetKey())
			}
			subj[en.GetKey()] = en.GetValue()
		}
		if cerr := checkSubject(p, subj); cerr != nil {
			return nil, cerr
		}
		cost := int64(m.GetHitsAddend())
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt64 {
				return nil, invalid(freqcapv1.Reason_REASON_INVALID_COST, "descriptor %d: hits_addend %d is too large", i, h.GetValue())
			}
			cost = int64(h.GetValue())
			atts[i].peek = cost == 0
		}
		atts[i].a = sdk.Attempt{Subject: subj, Cost: cost}
		if err := e.svc.s.cfg.Limiter.Check(p, atts[i].a); err != nil {
			return nil, e.svc.failed("take", p, err)
		}
	}
	return atts, nil
}

// response is the answer to decisions: each descriptor's status, the
// overall code, and the headers of the most restrictive descriptor.
func (e *envoyService) response(set *policySet, p *sdk.Policy, decisions []sdk.Decision) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(decisions))}
	gov := -1 // the most restrictive descriptor
	for i, d := range decisions {
		out.Statuses[i] = descriptorStatus(p, d)
		if !d.Allowed {
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if gov < 0 || moreRestrictive(d, decisions[gov]) {
			gov = i
		}
	}
	h := http.Header{}
	e.svc.setHeaders(h, set, p, decisions[gov])
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
		if v := h.Get(k); v != "" {
			out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: strings.ToLower(k), Value: v})
		}
	}
	return out
}

// envoyOps are the operations m's descriptors do: take for those that
// consume (every one when there are none, so that the grant is checked
// first), peek for those whose hits_addend is 0.
func envoyOps(m *rlsv3.RateLimitRequest) []Op {
	var take, peek bool
	for _, d := range m.GetDescriptors() {
		if h := d.GetHitsAddend(); h != nil && h.GetValue() == 0 {
			peek = true
		} else {
			take = true
		}
	}
	if peek && !take {
		return []Op{OpPeek}
	}
	if peek {
		return []Op{OpTake, OpPeek}
	}
	return []Op{OpTake}
}

// decide takes (TakeBatch; Take for one) the consuming attempts and peeks the others,
// returning the decisions in input order, or the call's error for the
// first attempt that could not be decided.
func (e *envoyService) decide(ctx context.Context, p *sdk.Policy, atts []descriptorAttempt) ([]sdk.Decision, error) {
	out := make([]sdk.Decision, len(atts))
	for _, peek := range []bool{false, true} {
		var as []sdk.Attempt
		var idx []int
		for i, a := range atts {
			if a.peek == peek {
				as = append(as, a.a)
				idx = append(idx, i)
			}
		}
		if len(as) == 0 {
			continue
		}
		lim := e.svc.s.cfg.Limiter
		f, op, one := lim.TakeBatch, "take", lim.Take
		if peek {
			f, op, one = lim.PeekBatch, "peek", lim.Peek
		}
		if len(as) == 1 { // one descriptor (the common request): the single call's path, cheaper than a batch of one
			d, err := one(ctx, p, as[0])
			if err != nil {
				return nil, e.svc.failed(op, p, err)
			}
			out[idx[0]] = d
			continue
		}
		for j, r := range f(ctx, p, as) {
			if r.Err != nil {
				return nil, e.svc.failed(op, p, r.Err)
			}
			out[idx[j]] = r.Decision
		}
	}
	return out, nil
}

// moreRestrictive reports whether a says more than b about the request: a
// denial over an allowance, the longer wait among denials, the fewer
// units left among allowances.
func moreRestrictive(a, b sdk.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	ga, gb := ratelimitheaders.Governing(a), ratelimitheaders.Governing(b)
	switch {
	case ga < 0:
		return false
	case gb < 0:
		return true
	case !a.Allowed:
		return a.RetryAfter > b.RetryAfter
	}
	return a.Rules[ga].Remaining < b.Rules[gb].Remaining
}

// descriptorStatus is d's status: its code and the rule the RateLimit
// header reports.
func descriptorStatus(p *sdk.Policy, d sdk.Decision) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if !d.Allowed {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	g := ratelimitheaders.Governing(d)
	if g < 0 {
		return st // degraded: no rule states
	}
	rd := d.Rules[g]
	var window time.Duration
	for _, r := range p.Rules() {
		if r.Name == rd.Rule {
			window = ratelimitheaders.QuotaWindow(r)
		}
	}
	t := rd.ResetAfter
	if !d.Allowed {
		// Until a retry can pass: the rule's wait, or the decision's when
		// it waits longer (quiet hours, which no rule denies).
		t = max(rd.RetryAfter, d.RetryAfter)
	}
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: rd.Rule, RequestsPerUnit: clampUint32(rd.Limit), Unit: envoyUnit(window)}
	st.LimitRemaining = clampUint32(rd.Remaining)
	st.DurationUntilReset = durationpb.New(t)
	return st
}

// envoyUnit is Envoy's unit for a rule whose limit refills over window:
// the one it equals, else UNKNOWN (Envoy's units are whole periods).
func envoyUnit(window time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch window {
	case time.Second:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case 7 * 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

func clampUint32(n int64) uint32 {
	return uint32(max(0, min(n, math.MaxUint32)))
}

// envoyHandler is the handler of the Envoy API, with opts.
func envoyHandler(svc *service, opts ...connect.HandlerOption) (string, http.Handler) {
	return ratelimitv3connect.NewRateLimitServiceHandler(&envoyService{svc: svc}, opts...)
}
