package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/fleet/store"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// shadowPolicy enforces 50 per day per user and tries 40 per day in
// shadow, under a name of its own (tests share Redis servers).
func shadowPolicy(t *testing.T, name string) *sdk.Policy {
	t.Helper()
	p, err := sdk.NewPolicy(name, []sdk.Rule{
		sdk.FixedWindow("cap", 50, 24*time.Hour).By("user"),
		sdk.FixedWindow("trial", 40, 24*time.Hour).By("user").AsShadow(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// shadowEvent is a take under shadowPolicy: the decision allowed or not,
// the shadow rule "trial" admitting or not, the enforced "cap" denying
// when the decision does.
func shadowEvent(p *sdk.Policy, at time.Time, user string, allowed, trialAllows bool) sdk.Event {
	d := sdk.Decision{Allowed: allowed, Policy: p.Name(), At: at, Rules: []sdk.RuleDecision{
		{Rule: "cap", Allowed: allowed, Limit: 50, Remaining: 10},
		{Rule: "trial", Allowed: trialAllows, Shadow: true, Limit: 40},
	}}
	if !allowed {
		d.Denied = []string{"cap"}
	}
	if !trialAllows {
		d.ShadowDenied = []string{"trial"}
	}
	return sdk.Event{Policy: p.Name(), PolicyRef: p, Op: "take", Shard: user, Decision: d}
}

// TestRecorderShadow: two processes record what a shadow rule would have
// denied; a reader gets the attempts (and those allowed) over 1 h and
// 24 h and the distinct people across both processes; a shadow denial is
// not a denial of the rule; a rule's former self denies as the rule; the
// decisions overrides decided are counted by kind.
func TestRecorderShadow(t *testing.T) {
	for _, sg := range storages {
		t.Run(sg.name, func(t *testing.T) {
			ctx := context.Background()
			c := fakeclock.New(time.Now())
			b := sg.new(t, c)
			base := time.Now().Truncate(time.Minute)
			c.Set(base)
			prefix := fmt.Sprintf("sh-%s-%d", sg.name, time.Now().UnixNano())
			p := shadowPolicy(t, "shadowed")
			recs := make([]*fleet.Recorder, 2)
			for i := range recs {
				r, err := fleet.NewRecorder(b, &fleet.Options{Prefix: prefix, Now: c.Now, FlushEvery: -1})
				if err != nil {
					t.Fatal(err)
				}
				recs[i] = r
			}
			// Process 0: users u0..u9, 3 attempts each that "trial"
			// would deny: 2 allowed, 1 denied by "cap".
			for i := range 10 {
				u := fmt.Sprint("u", i)
				recs[0].Observe(shadowEvent(p, c.Now(), u, true, false))
				recs[0].Observe(shadowEvent(p, c.Now(), u, true, false))
				recs[0].Observe(shadowEvent(p, c.Now(), u, false, false))
				recs[0].Observe(shadowEvent(p, c.Now(), u, true, true)) // trial admits
			}
			// Process 1: u5..u14 once each (u5..u9 already counted).
			for i := 5; i < 15; i++ {
				recs[1].Observe(shadowEvent(p, c.Now(), fmt.Sprint("u", i), true, false))
			}
			// A decision under a change: "cap"'s former self denies.
			changed := shadowEvent(p, c.Now(), "v1", false, true)
			changed.Decision.Rules = append([]sdk.RuleDecision{{Rule: "cap", Allowed: false, Before: 3}}, changed.Decision.Rules...)
			changed.Decision.Rules[1].Allowed = true
			recs[1].Observe(changed)
			// Overrides: 2 exempt, 1 block, 3 limit.
			for i, k := range []sdk.OverrideKind{sdk.OverrideExempt, sdk.OverrideExempt, sdk.OverrideBlock, sdk.OverrideLimit, sdk.OverrideLimit, sdk.OverrideLimit} {
				e := shadowEvent(p, c.Now(), "o", k != sdk.OverrideBlock, true)
				e.Decision.Override = sdk.Override{ID: int64(i + 1), Kind: k}
				recs[1].Observe(e)
			}
			for _, r := range recs {
				if err := r.Flush(ctx); err != nil {
					t.Fatalf("Flush = %v", err)
				}
			}

			reader, err := fleet.NewReader(b, &fleet.Options{Prefix: prefix, Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			st, err := reader.Stats(ctx, p, time.Hour)
			if err != nil {
				t.Fatalf("Stats = %v", err)
			}
			// Decisions: 40 + 10 + 1 + 6 = 57; denied: 10 (cap) + 1
			// (former cap) + 1 (block).
			if st.Allowed != 45 || st.Denied != 12 {
				t.Errorf("Stats = %d allowed, %d denied, want 45, 12", st.Allowed, st.Denied)
			}
			if want := (fleet.OverrideCounts{Exempt: 2, Block: 1, Limit: 3}); st.Overrides != want {
				t.Errorf("Stats overrides = %+v, want %+v", st.Overrides, want)
			}
			rules := map[string]fleet.RuleStats{}
			for _, r := range st.Rules {
				rules[r.Rule] = r
			}
			if g := rules["cap"]; g.Denied != 12 || g.ShadowDenied != 0 {
				t.Errorf("cap = %d denied, %d shadow-denied, want 12, 0", g.Denied, g.ShadowDenied)
			}
			if g := rules["trial"]; g.Denied != 0 || g.ShadowDenied != 40 || g.ShadowAllowed != 30 || g.Allowed != 17 {
				t.Errorf("trial = %d denied, %d shadow-denied (%d allowed), %d allowed; want 0, 40 (30), 17", g.Denied, g.ShadowDenied, g.ShadowAllowed, g.Allowed)
			}
			if last := st.Series[len(st.Series)-1]; last.ShadowDenied != 40 {
				t.Errorf("last point shadow-denied = %d, want 40", last.ShadowDenied)
			}

			check := func(window time.Duration, attempts, allowed, people int64) {
				t.Helper()
				sh, err := reader.Shadow(ctx, p, window)
				if err != nil {
					t.Fatalf("Shadow(%v) = %v", window, err)
				}
				if len(sh.Rules) != 1 {
					t.Fatalf("Shadow(%v) rules = %+v, want trial only", window, sh.Rules)
				}
				g := sh.Rules[0]
				if g.Rule != "trial" || !g.Shadow || g.Attempts != attempts || g.Allowed != allowed || g.People != people {
					t.Errorf("Shadow(%v) = %+v, want trial (shadow): %d attempts, %d allowed, %d people", window, g, attempts, allowed, people)
				}
				if g.PeopleFrom.After(sh.To.Add(-window)) {
					t.Errorf("Shadow(%v) people from %v, want at or before %v", window, g.PeopleFrom, sh.To.Add(-window))
				}
			}
			check(time.Hour, 40, 30, 15)
			check(24*time.Hour, 40, 30, 15)

			// Two hours later: nothing in the last hour, all in 24 h.
			c.Advance(2 * time.Hour)
			recs[0].Observe(shadowEvent(p, c.Now(), "u0", true, false))
			recs[0].Observe(shadowEvent(p, c.Now(), "late", true, false))
			if err := recs[0].Flush(ctx); err != nil {
				t.Fatal(err)
			}
			check(time.Hour, 2, 2, 2)
			check(24*time.Hour, 42, 32, 16)

			// The rule enforced again: its shadow denials of the window
			// are still listed, as a former shadow rule.
			enforced, err := sdk.NewPolicy("shadowed", []sdk.Rule{
				sdk.FixedWindow("cap", 50, 24*time.Hour).By("user"),
				sdk.FixedWindow("trial", 40, 24*time.Hour).By("user"),
			})
			if err != nil {
				t.Fatal(err)
			}
			sh, err := reader.Shadow(ctx, enforced, 24*time.Hour)
			if err != nil || len(sh.Rules) != 1 || sh.Rules[0].Shadow || sh.Rules[0].Attempts != 42 {
				t.Errorf("Shadow(enforced policy) = %+v, %v; want trial, not shadow now, 42 attempts", sh.Rules, err)
			}
		})
	}
}

// TestRecorderPolicyVersion: announcements carry the version the process
// runs and shadow rules; a new version is announced at the next flush;
// announcements written before versions read as version 0.
func TestRecorderPolicyVersion(t *testing.T) {
	for _, sg := range storages {
		t.Run(sg.name, func(t *testing.T) {
			ctx := context.Background()
			c := fakeclock.New(time.Now())
			b := sg.new(t, c)
			c.Set(time.Now())
			prefix := fmt.Sprintf("ver-%s-%d", sg.name, time.Now().UnixNano())
			p := shadowPolicy(t, "versioned")
			rec, err := fleet.NewRecorder(b, &fleet.Options{Prefix: prefix, Now: c.Now, FlushEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			rec.SetPolicyVersion(7)
			rec.Announce(p)
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			reader, err := fleet.NewReader(b, &fleet.Options{Prefix: prefix, Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			as, err := reader.Announced(ctx, time.Hour)
			if err != nil || len(as) != 1 || as[0].Version != 7 || !as[0].Rules[1].Shadow || as[0].Rules[0].Shadow {
				t.Fatalf("Announced = %+v, %v; want versioned at 7 with trial shadow", as, err)
			}
			// Version 8 within the minute: announced at once.
			c.Advance(time.Second)
			rec.SetPolicyVersion(8)
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			// An announcement of the former format (no version, no
			// shadow), as a Recorder of an earlier release wrote it.
			old, _ := json.Marshal(map[string]any{"policy": "legacy", "shard_by": []string{"user"},
				"rules": []map[string]any{{"name": "r", "id": "abc", "algorithm": "fixed_window", "limit": 3, "window": "1m0s"}}})
			day := c.Now().UTC().Truncate(24 * time.Hour)
			key := prefix + ":stats:{policies}:" + fmt.Sprint(day.Unix())
			if err := b.(store.Counters).FlushStats(ctx, store.Batch{Hashes: []store.Hash{{Key: key, Set: []store.Field{{Name: string(old), Value: c.Now().UnixMilli()}}, ExpireAt: day.Add(48 * time.Hour)}}}); err != nil {
				t.Fatal(err)
			}
			as, err = reader.Announced(ctx, time.Hour)
			if err != nil || len(as) != 3 {
				t.Fatalf("Announced = %+v, %v; want 3", as, err)
			}
			if as[0].Policy != "legacy" || as[0].Version != 0 || as[0].Rules[0].Shadow {
				t.Errorf("legacy announcement = %+v, want version 0, not shadow", as[0])
			}
			if as[1].Version != 8 || as[2].Version != 7 {
				t.Errorf("versions newest first = %d, %d, want 8, 7", as[1].Version, as[2].Version)
			}
			if got := rec.PolicyVersion(); got != 8 {
				t.Errorf("PolicyVersion() = %d, want 8", got)
			}
			// Shadow or enforced is a difference; the version is not.
			enforced, err := sdk.NewPolicy("versioned", []sdk.Rule{
				sdk.FixedWindow("cap", 50, 24*time.Hour).By("user"),
				sdk.FixedWindow("trial", 40, 24*time.Hour).By("user"),
			})
			if err != nil {
				t.Fatal(err)
			}
			if d := fleet.AnnouncementOf(enforced).Diff(as[1]); len(d) != 1 || !strings.Contains(d[0], "trial is enforced here, shadow there") {
				t.Errorf("Diff(enforced, shadow) = %q, want trial's mode", d)
			}
			if d := as[1].Diff(as[2]); d != nil {
				t.Errorf("Diff(v8, v7 of the same rules) = %q, want none", d)
			}
		})
	}
}

// TestRecorderShadowLimiter: a Limiter (memory backend) running a shadow
// rule and per-person overrides records through its observer; a reader
// of each storage gets what the shadow rule would have denied (attempts,
// people) and the decisions the overrides decided.
func TestRecorderShadowLimiter(t *testing.T) {
	for _, sg := range storages {
		t.Run(sg.name, func(t *testing.T) {
			ctx := context.Background()
			c := fakeclock.New(time.Now())
			st := sg.new(t, c)
			c.Set(time.Now())
			prefix := fmt.Sprintf("shl-%s-%d", sg.name, time.Now().UnixNano())
			p, err := sdk.NewPolicy("tried", []sdk.Rule{
				sdk.FixedWindow("cap", 5, 24*time.Hour).By("user"),
				sdk.FixedWindow("trial", 3, 24*time.Hour).By("user").AsShadow(),
			}, sdk.WithOverrides())
			if err != nil {
				t.Fatal(err)
			}
			rec, err := fleet.NewRecorder(st, &fleet.Options{Prefix: prefix, Now: c.Now, FlushEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			lim := sdk.New(memory.New(&memory.Options{Clock: c}), sdk.WithClock(c), sdk.WithObserver(rec.Observe))
			if _, err := lim.SetOverride(ctx, p, sdk.Subject{"user": "vip"}, sdk.Override{Kind: sdk.OverrideExempt, Reason: "test"}); err != nil {
				t.Fatalf("SetOverride = %v", err)
			}
			if _, err := lim.SetOverride(ctx, p, sdk.Subject{"user": "abuser"}, sdk.Override{Kind: sdk.OverrideBlock, Reason: "test"}); err != nil {
				t.Fatalf("SetOverride = %v", err)
			}
			// u0..u3: 6 attempts each: 5 allowed, 1 denied by cap; trial
			// would deny attempts 4 to 6 (3 each, 2 of them allowed).
			for i := range 4 {
				for range 6 {
					if _, err := lim.Allow(ctx, p, sdk.Subject{"user": fmt.Sprint("u", i)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, u := range []string{"vip", "vip", "abuser"} {
				if _, err := lim.Allow(ctx, p, sdk.Subject{"user": u}); err != nil {
					t.Fatal(err)
				}
			}
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			reader, err := fleet.NewReader(st, &fleet.Options{Prefix: prefix, Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			sh, err := reader.Shadow(ctx, p, time.Hour)
			if err != nil {
				t.Fatalf("Shadow = %v", err)
			}
			if len(sh.Rules) != 1 || sh.Rules[0].Rule != "trial" || sh.Rules[0].Attempts != 12 || sh.Rules[0].Allowed != 8 || sh.Rules[0].People != 4 {
				t.Errorf("Shadow = %+v, want trial: 12 attempts, 8 allowed, 4 people", sh.Rules)
			}
			stats, err := reader.Stats(ctx, p, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if stats.Overrides.Exempt != 2 || stats.Overrides.Block != 1 {
				t.Errorf("Stats overrides = %+v, want 2 exempt, 1 block", stats.Overrides)
			}
			if stats.Denied != 5 { // 4 by cap, 1 by the block
				t.Errorf("Stats denied = %d, want 5", stats.Denied)
			}
		})
	}
}
