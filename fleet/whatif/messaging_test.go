package whatif_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/fleet/whatif"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// pushPolicy is a policy with messaging caps: recv-day, 5 a day (keeping
// 2 for priority 1 when headroom), quiet hours in UTC for the 2 hours
// from the minute of now (when quiet), classes otp (exempt from every
// rule, counted, passes quiet hours) and alert (passes quiet hours), and
// extra rules.
func pushPolicy(t *testing.T, now time.Time, quiet, headroom bool, classes []sdk.Class, extra ...sdk.Rule) *sdk.Policy {
	t.Helper()
	day := sdk.SlidingLog("recv-day", 5, 24*time.Hour).By("user")
	if headroom {
		day = day.WithHeadroom(2, 1)
	}
	opts := []sdk.PolicyOption{sdk.WithClass(classes...)}
	if quiet {
		from := now.UTC().Sub(now.UTC().Truncate(24 * time.Hour)).Truncate(time.Minute)
		opts = append(opts, sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: from, To: (from + 2*time.Hour) % (24 * time.Hour)}))
	}
	p, err := sdk.NewPolicy("push", append([]sdk.Rule{day}, extra...), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	otp   = sdk.Class{Name: "otp", AllRules: true, Counted: true, QuietHours: true}
	alert = sdk.Class{Name: "alert", QuietHours: true}
)

// TestEstimateMessaging: sampled attempts keep their class, priority and
// zone, so the current version's replay decides them exactly as they
// were decided (quiet hours in the attempt's zone, headroom by priority,
// exemptions by class), and a proposed version without quiet hours or
// headroom, or with a shadow rule (which no class is exempt from), or
// without a class, is estimated with its reasons.
func TestEstimateMessaging(t *testing.T) {
	for _, sg := range storages {
		t.Run(sg.name, func(t *testing.T) {
			ctx := context.Background()
			c := fakeclock.New(time.Now())
			b := sg.new(t, c)
			c.Set(time.Now().Truncate(time.Millisecond).Add(-time.Minute))
			cur := pushPolicy(t, c.Now(), true, true, []sdk.Class{otp, alert})
			prefix := fmt.Sprintf("wim-%s-%d", sg.name, time.Now().UnixNano())
			rec, err := fleet.NewRecorder(b, &fleet.Options{Prefix: prefix, Now: c.Now, FlushEvery: -1, Sample: 1})
			if err != nil {
				t.Fatal(err)
			}
			lim := sdk.New(memory.New(&memory.Options{Clock: c}), sdk.WithClock(c), sdk.WithObserver(rec.Observe))
			tokyo, err := sdk.LoadZone("Asia/Tokyo")
			if err != nil {
				t.Fatal(err)
			}
			// Per user, in UTC's quiet hours: a plain attempt (denied for
			// them), one in Tokyo's zone (outside its quiet hours:
			// allowed), 3 alerts at priority 0 (2 allowed, the 3rd denied
			// by the 2 kept for priority 1), 2 at priority 1 (allowed),
			// 2 OTPs (exempt: allowed past the limit).
			for _, u := range []string{"u1", "u2"} {
				s := sdk.Subject{"user": u}
				as := []sdk.Attempt{{Subject: s}, {Subject: s, Zone: tokyo},
					{Subject: s, Class: "alert"}, {Subject: s, Class: "alert"}, {Subject: s, Class: "alert"},
					{Subject: s, Class: "alert", Priority: 1}, {Subject: s, Class: "alert", Priority: 1},
					{Subject: s, Class: "otp", Priority: 9}, {Subject: s, Class: "otp", Zone: tokyo}}
				want := []bool{false, true, true, true, false, true, true, true, true}
				for i, a := range as {
					d, err := lim.Take(ctx, cur, a)
					if err != nil || d.Allowed != want[i] {
						t.Fatalf("%s: Take(%d) = %+v, %v; want allowed %v", u, i, d, err, want[i])
					}
					c.Advance(time.Millisecond)
				}
			}
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			rd, err := fleet.NewReader(b, &fleet.Options{Prefix: prefix, Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := rd.Traffic(ctx, "push", time.Hour)
			if err != nil || len(tr.Attempts) != 18 {
				t.Fatalf("Traffic = %d attempts, %v; want 18", len(tr.Attempts), err)
			}
			if a := tr.Attempts[7]; a.Class != "otp" || a.Priority != 9 || a.Zone != "" || tr.Attempts[8].Zone != "Asia/Tokyo" || tr.Attempts[1].Zone != "Asia/Tokyo" {
				t.Errorf("Traffic attempts 7, 8 = %+v, %+v; want otp at priority 9, then otp in Asia/Tokyo", a, tr.Attempts[8])
			}

			trial := sdk.SlidingLog("trial", 1, 24*time.Hour).By("user").AsShadow()
			open := pushPolicy(t, c.Now(), false, false, []sdk.Class{otp, alert}, trial)
			rep, err := whatif.Estimate(ctx, rd, []*sdk.Policy{cur}, []*sdk.Policy{open}, time.Hour)
			if err != nil {
				t.Fatalf("Estimate = %v", err)
			}
			pr, w := rep.Policies[0], rep.Policies[0].Windows[0]
			if pr.Replayed != 18 || pr.UnreplayableCurrent != 0 || pr.UnreplayableProposed != 0 {
				t.Errorf("Estimate = %d replayed, %d and %d unreplayable; want 18, 0, 0", pr.Replayed, pr.UnreplayableCurrent, pr.UnreplayableProposed)
			}
			// The current version, replayed, decides as it did.
			if w.Recorded.Denied.Value != 4 || w.Current.Denied.Value != 4 || w.Current.Quiet.Value != 2 || w.Current.Exempted.Value != 4 {
				t.Errorf("current: recorded %v denied, replayed %v (%v for quiet hours), %v exempted; want 4, 4 (2), 4", w.Recorded.Denied, w.Current.Denied, w.Current.Quiet, w.Current.Exempted)
			}
			if r := w.Current.Rules[0]; r.Denied.Value != 2 || r.Headroom.Value != 2 {
				t.Errorf("current recv-day = %v denied (%v for headroom), want 2 (2)", r.Denied, r.Headroom)
			}
			// Without quiet hours or headroom: the plain attempt and the
			// 3rd alert go; the limit then denies both priority-1 alerts;
			// the OTPs pass. The shadow trial would deny all but the first
			// of each user, the OTPs included.
			if w.Proposed.Denied.Value != 4 || w.Proposed.Quiet.Value != 0 || w.Proposed.Exempted.Value != 4 {
				t.Errorf("proposed: %v denied (%v for quiet hours), %v exempted; want 4 (0), 4", w.Proposed.Denied, w.Proposed.Quiet, w.Proposed.Exempted)
			}
			if r := w.Proposed.Rules; r[0].Denied.Value != 4 || r[0].Headroom.Value != 0 || !r[1].Shadow || r[1].Denied.Value != 16 {
				t.Errorf("proposed rules = %+v; want recv-day 4 denied (0 for headroom), trial (shadow) 16", r)
			}
			s := rep.String()
			for _, want := range []string{
				"current: denies 4 attempts, 2 people\n      quiet hours deny 2 attempts\n      classes let 4 attempts past a rule that would deny\n      recv-day denies 2 attempts, 2 people (2 for headroom)\n",
				"proposed: denies 4 attempts, 2 people (added: 0 attempts)\n      classes let 4 attempts past a rule that would deny\n      recv-day denies 4 attempts, 2 people\n      trial would deny (shadow) 16 attempts, 2 people\n",
			} {
				if !strings.Contains(s, want) {
					t.Errorf("String() lacks %q:\n%s", want, s)
				}
			}

			// A proposed version without the otp class cannot decide the
			// OTPs (an error there): they are left out, and noted.
			rep, err = whatif.Estimate(ctx, rd, []*sdk.Policy{cur}, []*sdk.Policy{pushPolicy(t, c.Now(), true, true, []sdk.Class{alert})}, time.Hour)
			if err != nil {
				t.Fatalf("Estimate = %v", err)
			}
			if pr := rep.Policies[0]; pr.UnreplayableProposed != 4 || pr.UnreplayableCurrent != 0 || !strings.Contains(rep.String(), "a message class it does not declare") {
				t.Errorf("Estimate without otp = %d, %d unreplayable; want 0, 4, noted:\n%s", pr.UnreplayableCurrent, pr.UnreplayableProposed, rep.String())
			}
		})
	}
}
