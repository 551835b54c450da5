package sdk_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestRuleIDEpoch(t *testing.T) {
	r := sdk.SlidingWindow("recv", 5, time.Hour).By("user")
	base := mustPolicy(t, "p", r).RuleIDs()[0]
	r0 := r
	r0.Epoch = 0
	if got := mustPolicy(t, "p", r0).RuleIDs()[0]; got != base {
		t.Errorf("RuleIDs() with Epoch 0 = %q, want %q (unchanged)", got, base)
	}
	r7 := r
	r7.Epoch = 7
	id7 := mustPolicy(t, "p", r7).RuleIDs()[0]
	if id7 == base {
		t.Errorf("RuleIDs() with Epoch 7 = %q, want an id other than Epoch 0's", id7)
	}
	r8 := r
	r8.Epoch = 8
	if got := mustPolicy(t, "p", r8).RuleIDs()[0]; got == id7 {
		t.Errorf("RuleIDs() with Epoch 8 = %q, want an id other than Epoch 7's", got)
	}
	if got := mustPolicy(t, "p", r.AsShadow()).RuleIDs()[0]; got != base {
		t.Errorf("RuleIDs() of a shadow rule = %q, want %q (Shadow is not identity)", got, base)
	}
	bad := r
	bad.Epoch = -1
	if _, err := sdk.NewPolicy("p", []sdk.Rule{bad}); !errors.Is(err, sdk.ErrInvalidRule) {
		t.Errorf("NewPolicy(epoch -1) = %v, want ErrInvalidRule", err)
	}
}

func TestWithChangeValidation(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rule := sdk.SlidingWindow("recv", 5, time.Hour).By("user")
	rule.Epoch = 2
	tests := []struct {
		name    string
		rule    string
		from    sdk.Rule
		wantErr string // "" : accepted
	}{
		{"window change", "recv", sdk.SlidingWindow("recv", 5, 2*time.Hour).By("user"), ""},
		{"algorithm change", "recv", sdk.FixedWindow("recv", 9, time.Hour).By("user"), ""},
		{"shadow from", "recv", sdk.FixedWindow("recv", 9, time.Hour).By("user").AsShadow(), ""},
		{"epoch only", "recv", func() sdk.Rule { r := rule; r.Epoch = 1; return r }(), ""},
		{"name filled in", "recv", sdk.FixedWindow("", 9, time.Hour).By("user"), ""},
		{"no changes", "recv", sdk.Rule{}, "-"},
		{"unknown rule", "nope", sdk.FixedWindow("nope", 9, time.Hour).By("user"), "no such rule"},
		{"invalid from", "recv", sdk.FixedWindow("recv", 0, time.Hour).By("user"), "limit must be > 0"},
		{"other dimensions", "recv", sdk.FixedWindow("recv", 9, time.Hour).By("user", "content"), "other dimensions"},
		{"limit only", "recv", func() sdk.Rule { r := rule; r.Limit = 50; return r }(), "not a change"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opt := sdk.WithChange(tc.rule, sdk.Change{From: tc.from, At: at, Version: 2})
			if tc.wantErr == "-" { // no change at all
				opt, tc.wantErr = sdk.WithChange(tc.rule), ""
			}
			_, err := sdk.NewPolicy("p", []sdk.Rule{rule}, opt)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("NewPolicy(WithChange(%s)) = %v, want nil", tc.name, err)
				}
				return
			}
			if !errors.Is(err, sdk.ErrInvalidPolicy) && !errors.Is(err, sdk.ErrInvalidRule) {
				t.Fatalf("NewPolicy(WithChange(%s)) = %v, want ErrInvalidPolicy or ErrInvalidRule", tc.name, err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewPolicy(WithChange(%s)) = %v, want it to say %q", tc.name, err, tc.wantErr)
			}
		})
	}
}

// TestChangePredecessors checks which predecessors a decision carries,
// in which order, and that they drop out after their reach.
func TestChangePredecessors(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := fakeclock.New(at)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	v1 := sdk.FixedWindow("recv", 5, 24*time.Hour).By("user")
	v2 := sdk.SlidingLog("recv", 5, time.Hour).By("user")
	v2.Epoch = 2
	v3 := sdk.SlidingWindow("recv", 5, time.Hour).By("user")
	v3.Epoch = 3
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("other", 100, time.Hour).By("user"), v3},
		// given oldest first: NewPolicy keeps them newest first
		sdk.WithChange("recv", sdk.Change{From: v1, At: at, Version: 2}, sdk.Change{From: v2, At: at.Add(time.Minute), Version: 3}))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	s := sdk.Subject{"user": "u1"}
	befores := func() []int64 {
		t.Helper()
		d, err := lim.Allow(context.Background(), p, s)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, r := range d.Rules {
			out = append(out, r.Before)
		}
		return out
	}
	if got, want := befores(), []int64{0, 2, 3, 0}; !slices.Equal(got, want) {
		t.Errorf("Allow() Rules[].Before = %v, want %v", got, want)
	}
	kl := lim.Admin().KeyLayout(p, s)
	var keyed []int64
	for _, set := range kl.Sets {
		for _, r := range set.Rules {
			keyed = append(keyed, r.Before)
		}
	}
	if want := []int64{0, 2, 3, 0}; !slices.Equal(keyed, want) {
		t.Errorf("KeyLayout() rules' Before = %v, want %v", keyed, want)
	}
	// v2 (a 1h log changed at +1m) reaches until +61m; v1 (24h) until +24h.
	clock.Set(at.Add(61 * time.Minute))
	if got, want := befores(), []int64{0, 2, 0}; !slices.Equal(got, want) {
		t.Errorf("Allow() at +61m: Rules[].Before = %v, want %v", got, want)
	}
	clock.Set(at.Add(24 * time.Hour))
	if got, want := befores(), []int64{0, 0}; !slices.Equal(got, want) {
		t.Errorf("Allow() at +24h: Rules[].Before = %v, want %v", got, want)
	}
}

// TestChangeReset: Reset and ResetRules forget a rule's predecessors too.
func TestChangeReset(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := fakeclock.New(at)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	old := sdk.FixedWindow("recv", 5, time.Hour).By("user")
	s := sdk.Subject{"user": "u1"}
	oldP := mustPolicy(t, "p", old)
	for range 5 {
		if _, err := lim.Allow(ctx, oldP, s); err != nil {
			t.Fatal(err)
		}
	}
	now := sdk.SlidingWindow("recv", 5, time.Hour).By("user")
	now.Epoch = 2
	p, err := sdk.NewPolicy("p", []sdk.Rule{now}, sdk.WithChange("recv", sdk.Change{From: old, At: at, Version: 2}))
	if err != nil {
		t.Fatal(err)
	}
	for _, reset := range []struct {
		name string
		do   func() error
	}{
		{"Reset", func() error { return lim.Admin().Reset(ctx, p, s) }},
		{"ResetRules", func() error { return lim.Admin().ResetRules(ctx, p, s, "recv") }},
	} {
		if d, err := lim.Peek(ctx, p, sdk.Attempt{Subject: s}); err != nil || d.Allowed || d.Rules[0].Used != 5 {
			t.Fatalf("Peek before %s = %+v, %v, want denied by the predecessor at 5", reset.name, d, err)
		}
		if err := reset.do(); err != nil {
			t.Fatalf("%s = %v", reset.name, err)
		}
		d, err := lim.Peek(ctx, p, sdk.Attempt{Subject: s})
		if err != nil || !d.Allowed || d.Rules[0].Used != 0 || d.Rules[0].Before != 2 {
			t.Errorf("Peek after %s = allowed %t, rules %+v, %v, want the predecessor forgotten (0)", reset.name, d.Allowed, d.Rules, err)
		}
		for range 5 {
			if _, err := lim.Allow(ctx, oldP, s); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A change without a version would be reported as the rule itself
// (RuleDecision.Before 0): NewPolicy refuses it.
func TestWithChangeNeedsVersion(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rule := sdk.SlidingWindow("recv", 5, time.Hour).By("user")
	from := sdk.SlidingWindow("recv", 5, 2*time.Hour).By("user")
	for _, v := range []int64{0, -1} {
		_, err := sdk.NewPolicy("p", []sdk.Rule{rule}, sdk.WithChange("recv", sdk.Change{From: from, At: at, Version: v}))
		if !errors.Is(err, sdk.ErrInvalidPolicy) || !strings.Contains(err.Error(), "no version") {
			t.Errorf("NewPolicy(change version %d) = %v, want ErrInvalidPolicy saying no version", v, err)
		}
	}
	if _, err := sdk.NewPolicy("p", []sdk.Rule{rule}, sdk.WithChange("recv", sdk.Change{From: from, At: at, Version: 1})); err != nil {
		t.Errorf("NewPolicy(change version 1) = %v, want nil", err)
	}
}
