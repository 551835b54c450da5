package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/middleware"
	"github.com/freqcap/freqcap/sdk"
)

// fakeTaker answers every Take with a set decision and error, and counts
// the calls: the flow of Decide, not a limiter's behaviour.
type fakeTaker struct {
	d     sdk.Decision
	err   error
	calls int
}

func (f *fakeTaker) Take(context.Context, *sdk.Policy, sdk.Attempt) (sdk.Decision, error) {
	f.calls++
	return f.d, f.err
}

func policies(t *testing.T) (closed, open *sdk.Policy) {
	t.Helper()
	rules := []sdk.Rule{sdk.FixedWindow("per-minute", 2, time.Minute).By("client")}
	closed, err := sdk.NewPolicy("api", rules)
	if err != nil {
		t.Fatal(err)
	}
	open, err = sdk.NewPolicy("api", rules, sdk.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	return closed, open
}

func TestDecide(t *testing.T) {
	closed, open := policies(t)
	down := errors.New("dial tcp 10.0.0.7:6379: connection refused")
	allowed := sdk.Decision{Allowed: true, Policy: "api"}
	denied := sdk.Decision{Policy: "api", Denied: []string{"per-minute"}, RetryAfter: time.Second}
	degraded := sdk.Decision{Allowed: true, Policy: "api", Degraded: true, Err: down}
	tests := []struct {
		name      string
		p         *sdk.Policy
		f         middleware.Failure
		keyErr    error
		d         sdk.Decision
		err       error
		want      middleware.Outcome
		wantErr   error // errors.Is the verdict's Err
		wantTakes int
	}{
		{name: "allowed", p: closed, d: allowed, want: middleware.Allow, wantTakes: 1},
		{name: "denied", p: closed, d: denied, want: middleware.Deny, wantTakes: 1},
		{name: "key error takes nothing", p: closed, keyErr: errors.New("no api key"), want: middleware.BadKey, wantTakes: 0},
		{name: "skip takes nothing", p: closed, keyErr: fmt.Errorf("health check: %w", middleware.ErrSkip), want: middleware.Pass, wantErr: middleware.ErrSkip},
		{name: "invalid subject", p: closed, err: fmt.Errorf("sdk: take: %w: dimension %q missing", sdk.ErrInvalidSubject, "client"), want: middleware.BadKey, wantErr: sdk.ErrInvalidSubject, wantTakes: 1},
		{name: "invalid cost", p: closed, err: fmt.Errorf("sdk: take: %w", sdk.ErrInvalidCost), want: middleware.BadKey, wantErr: sdk.ErrInvalidCost, wantTakes: 1},
		{name: "invalid idempotency key", p: open, err: fmt.Errorf("client: take: %w", sdk.ErrInvalidIdempotencyKey), want: middleware.BadKey, wantErr: sdk.ErrInvalidIdempotencyKey, wantTakes: 1},
		{name: "invalid zone", p: open, err: fmt.Errorf("sdk: take: %w", sdk.ErrInvalidZone), want: middleware.BadKey, wantErr: sdk.ErrInvalidZone, wantTakes: 1},
		{name: "invalid class", p: open, err: fmt.Errorf("client: take: %w", sdk.ErrInvalidClass), want: middleware.BadKey, wantErr: sdk.ErrInvalidClass, wantTakes: 1},
		{name: "invalid priority", p: closed, err: fmt.Errorf("sdk: take: %w", sdk.ErrInvalidPriority), want: middleware.BadKey, wantErr: sdk.ErrInvalidPriority, wantTakes: 1},
		{name: "error, fail-closed policy", p: closed, err: down, want: middleware.Unavailable, wantErr: down, wantTakes: 1},
		{name: "error, fail-open policy", p: open, err: down, want: middleware.Pass, wantErr: down, wantTakes: 1},
		{name: "error, FailOpen over a fail-closed policy", p: closed, f: middleware.FailOpen, err: down, want: middleware.Pass, wantErr: down, wantTakes: 1},
		{name: "error, FailClosed over a fail-open policy", p: open, f: middleware.FailClosed, err: down, want: middleware.Unavailable, wantErr: down, wantTakes: 1},
		{name: "degraded, as the policy says", p: open, d: degraded, want: middleware.Pass, wantErr: down, wantTakes: 1},
		{name: "degraded, FailOpen", p: open, f: middleware.FailOpen, d: degraded, want: middleware.Pass, wantErr: down, wantTakes: 1},
		{name: "degraded, FailClosed", p: open, f: middleware.FailClosed, d: degraded, want: middleware.Unavailable, wantErr: down, wantTakes: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeTaker{d: tc.d, err: tc.err}
			v := middleware.Decide(context.Background(), ft, tc.p, tc.f, sdk.Attempt{Subject: sdk.Subject{"client": "c1"}}, tc.keyErr)
			if v.Outcome != tc.want {
				t.Errorf("Decide(…).Outcome = %v, want %v", v.Outcome, tc.want)
			}
			if tc.wantErr != nil && !errors.Is(v.Err, tc.wantErr) {
				t.Errorf("Decide(…).Err = %v, want one wrapping %v", v.Err, tc.wantErr)
			}
			if tc.wantErr == nil && v.Outcome != middleware.BadKey && v.Err != nil {
				t.Errorf("Decide(…).Err = %v, want nil", v.Err)
			}
			if ft.calls != tc.wantTakes {
				t.Errorf("Take called %d times, want %d", ft.calls, tc.wantTakes)
			}
		})
	}
}

// TestVerdictHeadersAndMessage: only decisions get headers; messages name
// the policy and rules, never the subject nor the limiter's error.
func TestVerdictHeadersAndMessage(t *testing.T) {
	closed, _ := policies(t)
	down := errors.New("dial tcp 10.0.0.7:6379: connection refused")
	rd := sdk.RuleDecision{Rule: "per-minute", Limit: 2, Used: 2, Remaining: 0, ResetAfter: 30 * time.Second, RetryAfter: 30 * time.Second}
	deny := sdk.Decision{Policy: "api", Denied: []string{"per-minute"}, RetryAfter: 29500 * time.Millisecond, Rules: []sdk.RuleDecision{rd}}
	tooHigh := rd
	tooHigh.CostTooHigh, tooHigh.RetryAfter = true, 0
	tests := []struct {
		name    string
		v       middleware.Verdict
		header  http.Header
		message string
	}{
		{
			name: "deny",
			v:    middleware.Verdict{Outcome: middleware.Deny, Decision: deny},
			header: http.Header{
				"Ratelimit":        {`"per-minute";r=0;t=30`},
				"Ratelimit-Policy": {`"per-minute";q=2;w=60`},
				"Retry-After":      {"30"},
			},
			message: `rate limited by policy "api" (per-minute): retry in 30s`,
		},
		{
			name: "cost too high",
			v: middleware.Verdict{Outcome: middleware.Deny, Decision: sdk.Decision{
				Policy: "api", Denied: []string{"per-minute"}, CostTooHigh: true, Rules: []sdk.RuleDecision{tooHigh},
			}},
			header: http.Header{
				"Ratelimit":        {`"per-minute";r=0;t=0`},
				"Ratelimit-Policy": {`"per-minute";q=2;w=60`},
			},
			message: `rate limited by policy "api" (per-minute): the request costs more than a rule's limit and can never be allowed; do not retry it`,
		},
		{
			name:    "bad key",
			v:       middleware.Verdict{Outcome: middleware.BadKey, Err: errors.New("key c1 not found")},
			header:  http.Header{},
			message: "rate limit: the request does not name a valid subject or cost",
		},
		{
			name:    "unavailable",
			v:       middleware.Verdict{Outcome: middleware.Unavailable, Err: down},
			header:  http.Header{},
			message: "rate limit: could not decide (the limiter is unavailable)",
		},
		{
			name:    "degraded pass",
			v:       middleware.Verdict{Outcome: middleware.Pass, Decision: sdk.Decision{Allowed: true, Degraded: true, Err: down}, Err: down},
			header:  http.Header{},
			message: "not decided; let through",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			tc.v.SetHeaders(h, closed)
			if fmt.Sprint(h) != fmt.Sprint(tc.header) {
				t.Errorf("SetHeaders = %v, want %v", h, tc.header)
			}
			if got := tc.v.Message(); got != tc.message {
				t.Errorf("Message() = %q, want %q", got, tc.message)
			}
			if m := tc.v.Message(); strings.Contains(m, "c1") || strings.Contains(m, "10.0.0.7") {
				t.Errorf("Message() = %q names the subject or the server", m)
			}
		})
	}
}
