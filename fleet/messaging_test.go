package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// messagingPolicy is a push policy with every messaging cap: 5 a day
// keeping 2 for priority 1, a shadow trial of 1 a day, quiet hours in UTC
// from the minute of now for 2 hours, classes otp (exempt from every
// rule, counted, passes quiet hours) and alert (passes quiet hours).
func messagingPolicy(t testing.TB, now time.Time) *sdk.Policy {
	t.Helper()
	from := now.UTC().Sub(now.UTC().Truncate(24 * time.Hour)).Truncate(time.Minute)
	p, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingLog("recv-day", 5, 24*time.Hour).By("user").WithHeadroom(2, 1),
		sdk.SlidingLog("trial", 1, 24*time.Hour).By("user").AsShadow(),
	},
		sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: from, To: (from + 2*time.Hour) % (24 * time.Hour)}),
		sdk.WithClass(sdk.Class{Name: "otp", AllRules: true, Counted: true, QuietHours: true}, sdk.Class{Name: "alert", QuietHours: true}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// messagingAttempts makes, in quiet hours, one user's attempts: a plain
// one (denied: quiet hours), 3 alerts at priority 0 (allowed), a 4th
// (denied: headroom), 2 alerts at priority 1 (allowed: 5 of 5), 2 OTPs
// (allowed: exempt, counted; the first in Tokyo's zone, outside its quiet
// hours). It returns the attempts made.
func messagingAttempts(t *testing.T, lim *sdk.Limiter, p *sdk.Policy, c *fakeclock.Clock, user string) []sdk.Attempt {
	t.Helper()
	s := sdk.Subject{"user": user}
	tokyo, err := sdk.LoadZone("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	as := []sdk.Attempt{{Subject: s, Zone: time.UTC}}
	for range 4 {
		as = append(as, sdk.Attempt{Subject: s, Class: "alert"})
	}
	as = append(as, sdk.Attempt{Subject: s, Class: "alert", Priority: 1}, sdk.Attempt{Subject: s, Class: "alert", Priority: 1, Zone: time.UTC},
		sdk.Attempt{Subject: s, Class: "otp", Priority: 9, Zone: tokyo}, sdk.Attempt{Subject: s, Class: "otp"})
	want := []bool{false, true, true, true, false, true, true, true, true}
	for i, a := range as {
		d, err := lim.Take(context.Background(), p, a)
		if err != nil {
			t.Fatalf("Take(%d) = %v", i, err)
		}
		if d.Allowed != want[i] {
			t.Fatalf("Take(%d: class %q, priority %d) = %+v, want allowed %v", i, a.Class, a.Priority, d, want[i])
		}
		c.Advance(time.Millisecond)
	}
	return as
}

// TestRecorderMessaging: the Recorder counts the decisions quiet hours
// denied, per message class the decisions its exemptions decided (rules
// it is exempt from that would have denied, quiet hours it passes), per
// rule its would-be denials a class is exempt from (not denials) and its
// denials for headroom; a class never exempts a shadow rule. Decided on
// memory, recorded to every storage.
func TestRecorderMessaging(t *testing.T) {
	for _, sg := range storages {
		t.Run(sg.name, func(t *testing.T) {
			ctx := context.Background()
			c := fakeclock.New(time.Now())
			b := sg.new(t, c)
			c.Set(time.Now().Truncate(time.Millisecond))
			p := messagingPolicy(t, c.Now())
			prefix := fmt.Sprintf("msg-%s-%d", sg.name, time.Now().UnixNano())
			rec, err := fleet.NewRecorder(b, &fleet.Options{Prefix: prefix, Now: sg.now(c), FlushEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			lim := sdk.New(memory.New(&memory.Options{Clock: c}), sdk.WithClock(c), sdk.WithObserver(rec.Observe))
			messagingAttempts(t, lim, p, c, "u1")
			messagingAttempts(t, lim, p, c, "u2")
			flush(t, rec)
			rd, err := fleet.NewReader(b, &fleet.Options{Prefix: prefix, Now: sg.now(c)})
			if err != nil {
				t.Fatal(err)
			}
			st, err := rd.Stats(ctx, p, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if st.Allowed != 14 || st.Denied != 4 || st.QuietDenied != 2 {
				t.Errorf("Stats = %d allowed, %d denied, %d for quiet hours; want 14, 4, 2", st.Allowed, st.Denied, st.QuietDenied)
			}
			wantClasses := []fleet.ClassStats{{Class: "otp", Exempted: 4, QuietPassed: 2}, {Class: "alert", QuietPassed: 10}}
			if !slices.Equal(st.Classes, wantClasses) {
				t.Errorf("Stats.Classes = %+v, want %+v", st.Classes, wantClasses)
			}
			day, trial := st.Rules[0], st.Rules[1]
			if day.Denied != 2 || day.Headroom != 2 || day.Exempted != 4 {
				t.Errorf("recv-day = %d denied (%d for headroom), %d exempted; want 2 (2), 4", day.Denied, day.Headroom, day.Exempted)
			}
			// The shadow trial (1 a day) would deny each user's attempts
			// after the first it admits (it counts only those: 6 allowed,
			// OTPs included, and the one headroom denied; not the one
			// quiet hours denied, before).
			if trial.ShadowDenied != 14 || trial.ShadowAllowed != 12 || trial.Exempted != 0 || trial.Denied != 0 {
				t.Errorf("trial = %d shadow-denied (%d allowed), %d exempted, %d denied; want 14 (12), 0, 0", trial.ShadowDenied, trial.ShadowAllowed, trial.Exempted, trial.Denied)
			}
		})
	}
}

// TestAnnouncementMessaging: announcements carry the messaging settings
// and each rule's headroom, read back as written; Diff names each
// difference, and none between a policy and itself.
func TestAnnouncementMessaging(t *testing.T) {
	ctx := context.Background()
	c := fakeclock.New(time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: c})
	p := messagingPolicy(t, c.Now())
	rec, err := fleet.NewRecorder(b, &fleet.Options{Now: c.Now, FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec.Announce(p)
	flush(t, rec)
	rd, err := fleet.NewReader(b, &fleet.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	as, err := rd.Announced(ctx, time.Hour)
	if err != nil || len(as) != 1 {
		t.Fatalf("Announced = %+v, %v; want push", as, err)
	}
	a := as[0]
	if a.QuietHours != `{zone: UTC, periods: [{from: "22:00", to: "00:00"}]}` || !slices.Equal(a.Classes, []string{"{name: otp, exempt: all, counted: true, quiet_hours: true}", "{name: alert, quiet_hours: true}"}) ||
		a.Rules[0].Headroom != "[{priority: 1, keep: 2}]" || a.Rules[1].Headroom != "" || a.Person != "" {
		t.Errorf("Announced = %+v, want push's quiet hours, classes and recv-day's headroom", a)
	}
	if d := a.Diff(fleet.AnnouncementOf(p)); d != nil {
		t.Errorf("Diff(same policy) = %q, want none", d)
	}
	other, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingLog("recv-day", 5, 24*time.Hour).By("user").WithHeadroom(3, 1),
		sdk.SlidingLog("trial", 1, 24*time.Hour).By("user").AsShadow(),
	}, sdk.WithPerson("user"), sdk.WithClass(sdk.Class{Name: "otp", AllRules: true, QuietHours: true}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"person none here, user there",
		`quiet hours {zone: UTC, periods: [{from: "22:00", to: "00:00"}]} here, none there`,
		"classes [{name: otp, exempt: all, counted: true, quiet_hours: true}, {name: alert, quiet_hours: true}] here, [{name: otp, exempt: all, quiet_hours: true}] there",
		"rule recv-day has headroom [{priority: 1, keep: 2}] here, [{priority: 1, keep: 3}] there",
	}
	if d := a.Diff(fleet.AnnouncementOf(other)); !slices.Equal(d, want) {
		t.Errorf("Diff = %q, want %q", d, want)
	}
}

// TestRecorderClassesConcurrent: class counts taken while other
// goroutines record and flush are each counted once (run with -race).
func TestRecorderClassesConcurrent(t *testing.T) {
	c := fakeclock.New(time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: c})
	p := messagingPolicy(t, c.Now())
	rec, err := fleet.NewRecorder(b, &fleet.Options{Now: c.Now, FlushEvery: -1, Sample: -1})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rec.Observe(sdk.Event{Policy: "push", PolicyRef: p, Op: "take", Shard: fmt.Sprint("u", w, "-", i%7), Cost: 1,
					Decision: sdk.Decision{Allowed: true, At: c.Now(), Class: "otp", Exempted: []string{"recv-day"},
						Rules: []sdk.RuleDecision{{Rule: "recv-day", Allowed: false, Exempt: driver.ExemptCounted}, {Rule: "trial", Allowed: true, Shadow: true}}}})
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			if err := rec.Flush(context.Background()); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	<-done
	flush(t, rec)
	rd, err := fleet.NewReader(b, &fleet.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rd.Stats(context.Background(), p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := []fleet.ClassStats{{Class: "otp", Exempted: workers * each}}; !slices.Equal(st.Classes, want) || st.Rules[0].Exempted != workers*each || st.Rules[0].Denied != 0 {
		t.Errorf("Stats = classes %+v, recv-day %d exempted, %d denied; want %+v, %d, 0", st.Classes, st.Rules[0].Exempted, st.Rules[0].Denied, want, workers*each)
	}
}
