package console

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestE2EMessaging opens, in headless Chromium at a desktop's and a
// phone's width, the subject page of a person under a policy with
// messaging caps (quiet hours 00:30–03:00 in Berlin, a daily cap of 3
// that keeps 1 for priority ≥ 1, a counted exempt class otp): a
// promotion denied for headroom, one denied for quiet hours, and an otp
// sent in them past the cap. The page explains each; the person's page,
// found from the phone number, fits the screen too. It writes
// messaging-subject.png, messaging-phone.png and person-messaging-*.png
// ($FREQCAP_SCREENSHOT_DIR).
func TestE2EMessaging(t *testing.T) {
	p := msgsPolicy(t)
	// 00:10 in Berlin: before the quiet hours.
	clk := fakeclock.New(time.Date(2026, 3, 10, 23, 10, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clk}), sdk.WithClock(clk))
	ctx := context.Background()
	s := sdk.Subject{"user": "u1"}
	if _, err := lim.Admin().Link(ctx, "phone:+4930", "u1", "alice", "test"); err != nil {
		t.Fatal(err)
	}
	take := func(a sdk.Attempt, allowed bool) sdk.Decision {
		t.Helper()
		a.Subject = s
		d, err := lim.Take(ctx, p, a)
		if err != nil || d.Allowed != allowed {
			t.Fatalf("Take(%+v) = %+v, %v, want allowed %v", a, d, err, allowed)
		}
		return d
	}
	take(sdk.Attempt{}, true)
	take(sdk.Attempt{}, true)
	if d := take(sdk.Attempt{}, false); !d.Headroom {
		t.Fatalf("the third promotion was denied, but not for headroom: %+v", d)
	}
	take(sdk.Attempt{Priority: 1, Identity: "phone:+4930"}, true)
	clk.Advance(30 * time.Minute) // 00:40: quiet hours
	if d := take(sdk.Attempt{Priority: 1}, false); d.Quiet.IsZero() {
		t.Fatalf("an alert in quiet hours was denied, but not for them: %+v", d)
	}
	take(sdk.Attempt{Class: "otp", Identity: "phone:+4930"}, true)

	srv, err := New(Config{
		Limiter:     lim,
		Policies:    []*sdk.Policy{p},
		Credentials: testCredentials(),
		Now:         clk.Now,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Refresh:     time.Hour,
		// The session outlives the browser's real clock (the Limiter's is
		// in March 2026).
		SessionTTL: 10 * 365 * 24 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)
	url := base + "/subject?" + subjectQuery("msgs", s)
	for _, w := range []struct {
		name          string
		width, height int
	}{{"messaging-subject.png", 1280, 900}, {"messaging-phone.png", 390, 844}} {
		bctx := startBrowser(t, w.width, w.height)
		signIn(t, bctx, url, adminToken, "#trail")
		waitContains(t, bctx, "#quiet-now", "Quiet hours are on now in Europe/Berlin, until Wed 03:00 local")
		waitContains(t, bctx, "#trail tbody tr:nth-child(1)", "would have denied; class otp passed it")
		waitContains(t, bctx, "#trail tbody tr:nth-child(2)", "quiet hours")
		waitContains(t, bctx, "#trail tbody tr:nth-child(3)", "within the limit, but its last unit is kept for priority ≥ 1")
		waitContains(t, bctx, `#rules tr[data-rule="daily"]`, "keeps 1 for priority ≥ 1")
		waitContains(t, bctx, `#identity-list tr[data-identity="phone:+4930"]`, "alice")
		if sw := evalInt(t, bctx, `document.scrollingElement.scrollWidth`); sw > w.width {
			t.Errorf("%s: the page scrolls sideways (%d px wide in %d)", w.name, sw, w.width)
		}
		if w.width < 500 {
			// Every table of the page stacks its cells: none is wider
			// than the screen (each scrolls inside its card otherwise).
			if n := evalInt(t, bctx, `[...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().right > window.innerWidth + 1).length`); n > 0 {
				t.Errorf("%s: %d tables wider than the screen", w.name, n)
			}
		}
		screenshot(t, bctx, w.name)
		// The person's own page: found from the identity, its identities and
		// audit within the screen too.
		run(t, bctx, "the person's page", chromedp.Navigate(base+"/person?id=phone:%2B4930"), chromedp.WaitVisible(chromedp.ID("person-audit")))
		waitContains(t, bctx, "#person-linked", "phone:+4930 is an identity of person u1")
		if n := evalInt(t, bctx, `[...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().right > window.innerWidth + 1).length`); n > 0 {
			t.Errorf("person page at %d px: %d tables wider than the screen", w.width, n)
		}
		screenshot(t, bctx, "person-"+w.name)
	}
}
