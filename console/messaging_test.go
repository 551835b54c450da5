package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// msgsPolicy is policy "msgs" of the messaging tests: quiet hours
// 00:30–03:00 in Berlin, a calendar day of 3 per user in Berlin keeping
// 1 for priority ≥ 1, and a class otp exempt from every rule, counted,
// that may send in quiet hours.
func msgsPolicy(t *testing.T) *sdk.Policy {
	t.Helper()
	berlin, err := sdk.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatalf("no zone database: %v", err)
	}
	p, err := sdk.NewPolicy("msgs", []sdk.Rule{sdk.Daily("daily", 3, berlin).By("user").WithHeadroom(1, 1)},
		sdk.WithQuietHours(berlin, sdk.QuietPeriod{From: 30 * time.Minute, To: 3 * time.Hour}),
		sdk.WithClass(sdk.Class{Name: "otp", AllRules: true, Counted: true, QuietHours: true}), sdk.WithPerson("user"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The subject page explains a policy's messaging caps: its quiet hours
// (on now, until when), its classes, a rule's headroom, and trail entries
// of quiet-hours denials and of exempt sends.
func TestSubjectMessaging(t *testing.T) {
	// t0 is 01:00 in Berlin: inside 00:30–03:00.
	p := msgsPolicy(t)
	f := newFixtureCfg(t, nil, nil, nil, func(c *Config, _ driver.Backend, _ *sdk.Limiter) { c.Policies = append(c.Policies, p) })
	s := sdk.Subject{"user": "u1"}
	ctx := context.Background()
	if _, err := f.lim.Admin().Link(ctx, "phone:+4930", "u1", "alice", "test"); err != nil {
		t.Fatal(err)
	}
	if d, err := f.lim.Take(ctx, p, sdk.Attempt{Subject: s}); err != nil || d.Allowed || d.Quiet.IsZero() {
		t.Fatalf("Take in quiet hours = %+v, %v, want denied for quiet hours", d, err)
	}
	for i := range 4 {
		if d, err := f.lim.Take(ctx, p, sdk.Attempt{Subject: s, Class: "otp", Identity: "phone:+4930"}); err != nil || !d.Allowed {
			t.Fatalf("Take otp #%d = %+v, %v, want allowed", i+1, d, err)
		}
	}
	res := f.do(t, req{path: "/subject?" + subjectQuery("msgs", s)})
	body := readBody(t, res)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET subject = %d\n%s", res.StatusCode, body)
	}
	for _, want := range []string{
		`id="quiet-hours">Quiet hours in the recipient's zone (default Europe/Berlin; an attempt's zone, or the person's stored one, wins): 00:30–03:00 every day.`,
		`id="quiet-now">Quiet hours are on now in Europe/Berlin, until Thu 03:00 local`,
		`<li>otp: exempt from every rule, counted; may send in quiet hours</li>`,
		`<span class="tag headroom">keeps 1 for priority ≥ 1</span>`,
		`<strong class="bad quiet-mark">quiet hours</strong><div class="muted">until 2026-01-01 02:00:00Z</div>`,
		`<span class="tag exempt">exempt</span><div class="muted">would have denied; class otp passed it</div>`,
		`class <code>otp</code>`,
		`to <code>phone:+4930</code>`,
		`<span class="muted exempt-retry">none: exempt</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("subject page lacks %q:\n%s", want, body)
		}
	}
	res = f.do(t, req{path: "/api/v1/inspect?" + subjectQuery("msgs", s)})
	body = readBody(t, res)
	for _, want := range []string{`"quiet":true`, `"exempt":true,"class":"otp","identity":"phone:+4930"`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /api/v1/inspect lacks %s:\n%s", want, body)
		}
	}
}

// The fleet view sums up the hour's messaging caps per policy.
func TestMessagingStats(t *testing.T) {
	st := fleet.Stats{QuietDenied: 7, Classes: []fleet.ClassStats{{Class: "otp", Exempted: 3, QuietPassed: 2}},
		Rules: []fleet.RuleStats{{Rule: "daily", Exempted: 3, Headroom: 5}, {Rule: "recv-1m"}}}
	got := strings.Join(messagingStats(st), "; ")
	want := "7 denied for quiet hours; class otp: 3 passed a rule it is exempt from, 2 sent in quiet hours; rule daily: 3 would-be denials exempted, 5 denials for headroom"
	if got != want {
		t.Errorf("messagingStats = %q, want %q", got, want)
	}
	if got := messagingStats(fleet.Stats{Rules: []fleet.RuleStats{{Rule: "a"}}}); got != nil {
		t.Errorf("messagingStats(none) = %q, want nil", got)
	}
}
