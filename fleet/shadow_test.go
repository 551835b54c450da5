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
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/driver/stats"
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
			for i, k := range []driver.OverrideKind{driver.Exempt, driver.Exempt, driver.Block, driver.Limit, driver.Limit, driver.Limit} {
				e := shadowEvent(p, c.Now(), "o", k != driver.Block, true)
				e.Decision.Override = driver.Override{ID: int64(i + 1), Kind: k}
				if i == 0 { // the exempt admits what cap would deny: no denial of cap
					e.Decision.Rules[0].Allowed = false
				}
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

			check := func(window time.Duration, attempts, allowed, people, capDenied, capPeople int64) {
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
				if len(sh.Enforced) != 1 || sh.Enforced[0].Rule != "cap" || sh.Enforced[0].Attempts != capDenied || sh.Enforced[0].People != capPeople {
					t.Errorf("Shadow(%v) enforced = %+v, want cap: %d attempts, %d people", window, sh.Enforced, capDenied, capPeople)
				}
			}
			// cap denied u0..u9 once each, v1 (its former self) and o
			// (the block's decision reports cap denying).
			check(time.Hour, 40, 30, 15, 12, 12)
			check(24*time.Hour, 40, 30, 15, 12, 12)

			// Two hours later: nothing in the last hour, all in 24 h.
			c.Advance(2 * time.Hour)
			recs[0].Observe(shadowEvent(p, c.Now(), "u0", true, false))
			recs[0].Observe(shadowEvent(p, c.Now(), "late", true, false))
			if err := recs[0].Flush(ctx); err != nil {
				t.Fatal(err)
			}
			check(time.Hour, 2, 2, 2, 0, 0)
			check(24*time.Hour, 42, 32, 16, 12, 12)

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
			if len(sh.Enforced) != 2 || sh.Enforced[0].People != 12 || sh.Enforced[1].Rule != "trial" || sh.Enforced[1].People != 0 {
				t.Errorf("Shadow(enforced policy) enforced = %+v, want cap (12 people), trial (0)", sh.Enforced)
			}
		})
	}
}

// TestRecorderPolicyVersion: announcements carry the version the process
// runs and shadow rules; a new version is announced at the next flush
// with the policies announced for it (the newest build of a policy with
// the same rules: its limits), not with those of the former version;
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
			dropped := shadowPolicy(t, "dropped") // in version 7 only
			rec.SetPolicyVersion(7)
			rec.Announce(p, dropped)
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			reader, err := fleet.NewReader(b, &fleet.Options{Prefix: prefix, Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			as, err := reader.Announced(ctx, time.Hour)
			if err != nil || len(as) != 2 || as[1].Policy != "versioned" || as[1].Version != 7 || !as[1].Rules[1].Shadow || as[1].Rules[0].Shadow {
				t.Fatalf("Announced = %+v, %v; want dropped and versioned at 7 with trial shadow", as, err)
			}
			// Version 8 within the minute: announced at once, with cap
			// at 45 and without "dropped".
			c.Advance(time.Second)
			rec.SetPolicyVersion(8)
			p45, err := sdk.NewPolicy("versioned", []sdk.Rule{
				sdk.FixedWindow("cap", 45, 24*time.Hour).By("user"),
				sdk.FixedWindow("trial", 40, 24*time.Hour).By("user").AsShadow(),
			})
			if err != nil {
				t.Fatal(err)
			}
			rec.Announce(p45)
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			// Two minutes on, only version 8's set is announced again.
			c.Advance(2 * time.Minute)
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			as, err = reader.Announced(ctx, time.Minute)
			if err != nil || len(as) != 1 || as[0].Policy != "versioned" || as[0].Version != 8 || as[0].Rules[0].Limit != 45 {
				t.Fatalf("Announced(last minute) = %+v, %v; want versioned at 8, cap 45, only", as, err)
			}
			// An announcement of the former format (no version, no
			// shadow), as a Recorder of an earlier release wrote it.
			old, _ := json.Marshal(map[string]any{"policy": "legacy", "shard_by": []string{"user"},
				"rules": []map[string]any{{"name": "r", "id": "abc", "algorithm": "fixed_window", "limit": 3, "window": "1m0s"}}})
			day := c.Now().UTC().Truncate(24 * time.Hour)
			key := prefix + ":stats:{policies}:" + fmt.Sprint(day.Unix())
			if err := b.(stats.Counters).FlushStats(ctx, stats.Batch{Hashes: []stats.Hash{{Key: key, Set: []stats.Field{{Name: string(old), Value: c.Now().UnixMilli()}}, ExpireAt: day.Add(48 * time.Hour)}}}); err != nil {
				t.Fatal(err)
			}
			as, err = reader.Announced(ctx, time.Hour)
			if err != nil || len(as) != 4 {
				t.Fatalf("Announced = %+v, %v; want 4", as, err)
			}
			if as[0].Policy != "dropped" || as[0].Version != 7 {
				t.Errorf("first announcement = %+v, want dropped at 7", as[0])
			}
			as = as[1:]
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
			// Against version 7 (cap 50, trial shadow).
			if d := fleet.AnnouncementOf(enforced).Diff(as[2]); len(d) != 1 || !strings.Contains(d[0], "trial is enforced here, shadow there") {
				t.Errorf("Diff(enforced, shadow) = %q, want trial's mode", d)
			}
			if d := as[1].Diff(as[2]); len(d) != 1 || !strings.Contains(d[0], "cap has limit 45") {
				t.Errorf("Diff(v8, v7) = %q, want cap's limit only (versions are no difference)", d)
			}
			// A decision under a policy of the former set makes it run
			// again: announced with version 8.
			rec.Observe(shadowEvent(dropped, c.Now(), "u", true, true))
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			as, err = reader.Announced(ctx, time.Minute)
			if err != nil || len(as) != 3 || as[0].Policy != "dropped" || as[0].Version != 8 || as[2].Version != 8 {
				t.Errorf("Announced(last minute) after a decision = %+v, %v; want dropped at 8, legacy, versioned at 8", as, err)
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
			if _, err := lim.Admin().SetOverride(ctx, p, sdk.Subject{"user": "vip"}, driver.Override{Kind: driver.Exempt, Reason: "test"}); err != nil {
				t.Fatalf("SetOverride = %v", err)
			}
			if _, err := lim.Admin().SetOverride(ctx, p, sdk.Subject{"user": "abuser"}, driver.Override{Kind: driver.Block, Reason: "test"}); err != nil {
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
			if len(sh.Enforced) != 1 || sh.Enforced[0].Attempts != 4 || sh.Enforced[0].People != 4 {
				t.Errorf("Shadow enforced = %+v, want cap: 4 attempts, 4 people", sh.Enforced)
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

// TestRecorderService: processes that name themselves are told apart in
// the announcements, each with the version it runs; a name with a space
// is refused.
func TestRecorderService(t *testing.T) {
	ctx := context.Background()
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: c})
	p := shadowPolicy(t, "served")
	for i, svc := range []string{"push-api/host-1", "push-api/host-2"} {
		rec, err := fleet.NewRecorder(b, &fleet.Options{Now: c.Now, FlushEvery: -1, Service: svc})
		if err != nil {
			t.Fatalf("NewRecorder(service %q) = %v", svc, err)
		}
		rec.SetPolicyVersion(int64(7 + i))
		rec.Announce(p)
		if err := rec.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	reader, err := fleet.NewReader(b, &fleet.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	as, err := reader.Announced(ctx, time.Minute)
	if err != nil || len(as) != 2 {
		t.Fatalf("Announced = %+v, %v; want 2", as, err)
	}
	got := map[string]int64{}
	for _, a := range as {
		got[a.Service] = a.Version
	}
	if got["push-api/host-1"] != 7 || got["push-api/host-2"] != 8 {
		t.Errorf("Announced services = %v, want host-1 at 7, host-2 at 8", got)
	}
	for _, bad := range []string{"push api", strings.Repeat("x", fleet.MaxServiceLen+1), "caf\u00e9"} {
		if _, err := fleet.NewRecorder(b, &fleet.Options{FlushEvery: -1, Service: bad}); err == nil {
			t.Errorf("NewRecorder(service %q) = nil error, want one", bad)
		}
	}
}
