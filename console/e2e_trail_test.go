package console

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

// TestE2EContentBlock drives the subject page in headless Chromium for a
// user blocked by a content-keyed rule, looked up by the user alone: the
// verdict names the content and the rule, the trail shows the content
// (identical denials grouped), the fingerprint helper finds the message
// by its text, and the pair's reset, confirmed, unblocks it and is
// audited. With FREQCAP_SCREENSHOT=path it writes a screenshot of the
// page there (docs/console.png).
func TestE2EContentBlock(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	push := pols[0]
	lim := sdk.New(memory.New(nil))
	audit := NewAuditLog(nil, 0)
	srv, err := New(Config{
		Limiter:     lim,
		Policies:    pols,
		Audit:       audit,
		Credentials: testCredentials(),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Refresh:     200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)

	// The service's traffic: a parcel notice sent 7 times (5 denied by
	// content-59s), a login code twice (allowed).
	user := "18829340001"
	parcelText := "Your parcel is out for delivery"
	parcel := sdk.Subject{"user": user, "content": sdk.Fingerprint(parcelText)}
	code := sdk.Subject{"user": user, "content": sdk.Fingerprint("Your login code is 482913")}
	send := func(s sdk.Subject, n int) {
		t.Helper()
		for range n {
			if _, err := lim.Allow(context.Background(), push, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(code, 2)
	send(parcel, 7)

	ctx := startBrowser(t, 1280, 900)
	page := base + "/subject?" + subjectQuery("push", sdk.Subject{"user": user})
	run(t, ctx, "admin signs in",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules")),
	)

	// The verdict: blocked for that content, by content-59s; the rules it
	// could not check are named.
	fp := parcel["content"]
	waitContains(t, ctx, "#verdict", "Blocked for some values of content")
	waitContains(t, ctx, "#blocked li:first-child", "Blocked for content="+fp+" by content-59s until ")
	waitContains(t, ctx, "#blocked li:first-child", "checked now")
	waitContains(t, ctx, "#verdict-scope", "content-59s, content-59m need content")
	if n := evalInt(t, ctx, `document.querySelectorAll('#blocked li').length`); n != 1 {
		t.Errorf("verdict lists %d blocks, want 1 (the login code is not blocked)", n)
	}
	// The trail: one row for the five identical denials, with the content.
	waitText(t, ctx, "#trail tbody tr:first-child td.rule", "content-59s")
	waitContains(t, ctx, "#trail tbody tr:first-child td.values", "content="+fp)
	waitContains(t, ctx, "#trail tbody tr:first-child td.when .count", "× 5 identical, since")
	if n := evalInt(t, ctx, `document.querySelectorAll('#trail tbody tr').length`); n != 1 {
		t.Errorf("trail has %d rows, want 1 group", n)
	}
	waitContains(t, ctx, "#trail-note", "It holds every denial since")

	// The fingerprint helper: the message's text gives its value.
	run(t, ctx, "fingerprint helper",
		chromedp.Click(chromedp.CSS("#fp-helper summary")),
		chromedp.WaitVisible(chromedp.ID("fp-text")),
		chromedp.SendKeys(chromedp.ID("fp-text"), parcelText),
	)
	if path := os.Getenv("FREQCAP_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join("..", path) // relative to the repository root
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s (%d bytes)", path, len(png))
	}
	run(t, ctx, "fingerprint submit", chromedp.Click(chromedp.ID("fp-submit")), chromedp.WaitVisible(chromedp.ID("fp-result")))
	waitContains(t, ctx, "#fp-result", "content = "+fp+" is sdk.Fingerprint of the text you entered")
	waitContains(t, ctx, "#verdict", "denied by content-59s")
	screenshot(t, ctx, "subject-pair.png")

	// Back to the user's page; reset the pair from the verdict's link.
	run(t, ctx, "user page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("blocked")))
	// A click in the page itself: the live refresh may replace the node
	// between a DevTools query and its click.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.querySelector('#blocked li:first-child a.reset-pair').click(), true)`)); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "confirmation", chromedp.WaitVisible(chromedp.ID("confirm-reset")))
	waitContains(t, ctx, "main", "content = "+fp)
	run(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm-reset")), chromedp.WaitVisible(chromedp.ID("notice")))
	waitText(t, ctx, ruleCell("content-59s", "used"), "0")
	e := audit.Entries()
	if len(e) != 1 || e[0].Subject["content"] != fp || e[0].Subject["user"] != user || e[0].Name != "alice" {
		t.Fatalf("audit = %+v, want alice's reset of (%s, %s)", e, user, fp)
	}
	run(t, ctx, "user page after the reset", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("verdict")))
	waitContains(t, ctx, "#verdict", "A request now would pass recv-1m, recv-24h")
	waitContains(t, ctx, "#verdict-scope", "no block by them still in force")
	screenshot(t, ctx, "subject-after-pair-reset.png")
	if n := evalInt(t, ctx, `document.querySelectorAll('#blocked').length`); n != 0 {
		t.Errorf("after the pair's reset the verdict still lists %d blocks", n)
	}
	d, err := lim.Peek(context.Background(), push, sdk.Attempt{Subject: parcel})
	if err != nil || !d.Allowed {
		t.Errorf("Peek(parcel) after the reset = %+v, %v, want allowed", d, err)
	}
}
