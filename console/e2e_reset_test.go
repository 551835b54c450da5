package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestE2EPairReset drives the reset of one content in headless Chromium
// for a user at recv-24h 50/50: the trail row's "reset…" for that content
// offers to reset content-59s and content-59m only, says the user's rules
// keep their counters, and shows the wider reset apart with what it adds
// (recv-1m and recv-24h, for every content). Confirmed, it resets the
// pair's rules alone: the user stays blocked by recv-24h for every
// content, and the audit log names the two rules.
func TestE2EPairReset(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	push := pols[0]
	// A fake clock from now (the browser drops cookies that expired by
	// its own clock), moved by the test only.
	clk := fakeclock.New(time.Now().Truncate(time.Second))
	lim := sdk.New(memory.New(&memory.Options{Clock: clk}), sdk.WithClock(clk))
	audit := NewAuditLog(nil, 0)
	srv, err := New(Config{
		Limiter:     lim,
		Policies:    pols,
		Audit:       audit,
		Credentials: testCredentials(),
		Now:         clk.Now,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Refresh:     200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)

	// 50 messages over the morning, two of each content, ten every two
	// minutes;
	// the last two are the parcel notice. A third parcel notice is denied
	// (recv-24h and content-59s), and so is a login code (recv-24h).
	user := "18829340001"
	parcel := sdk.Subject{"user": user, "content": sdk.Fingerprint("Your parcel is out for delivery")}
	send := func(s sdk.Subject) sdk.Decision {
		t.Helper()
		d, err := lim.Allow(context.Background(), push, s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := range 48 {
		if i%10 == 0 {
			clk.Advance(2 * time.Minute)
		}
		if d := send(sdk.Subject{"user": user, "content": sdk.Fingerprint(fmt.Sprintf("news %d", i/2))}); !d.Allowed {
			t.Fatalf("message %d denied by %v", i, d.Denied)
		}
	}
	clk.Advance(2 * time.Minute)
	send(parcel)
	send(parcel)
	clk.Advance(10 * time.Second)
	if d := send(parcel); d.Allowed {
		t.Fatal("the third parcel notice was allowed, want denied")
	}
	if d := send(sdk.Subject{"user": user, "content": sdk.Fingerprint("Your login code is 482913")}); d.Allowed {
		t.Fatal("the 51st message was allowed, want denied by recv-24h")
	}

	ctx := startBrowser(t, 1280, 900)
	page := base + "/subject?" + subjectQuery("push", sdk.Subject{"user": user})
	run(t, ctx, "admin signs in",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules")),
	)
	waitText(t, ctx, ruleCell("recv-24h", "used"), "50")
	waitContains(t, ctx, "#verdict", "denied by recv-24h")

	// The parcel's content-59s row of the trail, and its reset link.
	fp := parcel["content"]
	row := `[...document.querySelectorAll('#trail tbody tr')].find(r => r.querySelector('td.rule').textContent.trim() === 'content-59s' && r.querySelector('td.values').textContent.includes(` + strconv.Quote(fp) + `))`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!!(`+row+`)`, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("no content-59s trail row for the parcel: %v\n%s", err, pageText(ctx))
	}
	// A click in the page itself: the live refresh may replace the node
	// between a DevTools query and its click.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`((`+row+`).querySelector('a.reset-pair').click(), true)`)); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "confirmation", chromedp.WaitVisible(chromedp.ID("confirm-reset")))
	waitText(t, ctx, "#reset-rules", "content-59s, content-59m")
	waitContains(t, ctx, "#reset-kept", "recv-1m, recv-24h keep their counters")
	waitText(t, ctx, "#confirm-reset", "Yes, reset content-59s, content-59m")
	waitText(t, ctx, "#wider-rules", "recv-1m, recv-24h, content-59s, content-59m")
	waitContains(t, ctx, "#reset-wider .wider-note", "recv-1m and recv-24h are keyed by user only, not by content: resetting them lifts their limits for every content of this user")
	screenshot(t, ctx, "reset-pair-confirm.png")

	run(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm-reset")), chromedp.WaitVisible(chromedp.ID("notice")))
	waitContains(t, ctx, "#notice", "Reset content-59s, content-59m for these values")
	waitText(t, ctx, ruleCell("content-59s", "used"), "0")
	waitText(t, ctx, ruleCell("content-59m", "used"), "0")
	waitText(t, ctx, ruleCell("recv-24h", "used"), "50")
	waitContains(t, ctx, "#verdict", "denied by recv-24h")
	waitContains(t, ctx, "#audit tbody tr:first-child", "content-59s, content-59m")
	e := audit.Entries()
	if len(e) != 1 || e[0].Subject["content"] != fp || len(e[0].Rules) != 2 || e[0].Rules[0] != "content-59s" || e[0].Rules[1] != "content-59m" {
		t.Fatalf("audit = %+v, want one reset of content-59s, content-59m for the parcel", e)
	}
	d, err := lim.Peek(context.Background(), push, sdk.Attempt{Subject: parcel})
	if err != nil || d.Allowed || len(d.Denied) != 1 || d.Denied[0] != "recv-24h" {
		t.Errorf("Peek(parcel) after the pair's reset = %+v, %v; want denied by recv-24h alone", d, err)
	}
}
