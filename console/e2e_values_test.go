package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
)

// TestE2EValues drives the subject page's values in headless Chromium: a
// person of an ad policy met 45 campaigns and the latest twice, so its
// hourly cap is spent; the page lists the 45, the latest first with its
// spent counter, pages to the older ones, and opens a campaign's own
// lookup; at a phone's width the list fits the screen. It writes
// values-subject.png and values-phone.png ($FREQCAP_SCREENSHOT_DIR, else
// the test's temporary directory).
func TestE2EValues(t *testing.T) {
	p, err := sdk.NewPolicy("ad", []sdk.Rule{
		sdk.FixedWindow("user-day", 1000, 24*time.Hour).By("user"),
		sdk.FixedWindow("camp-day", 3, 24*time.Hour).By("user", "campaign"),
		sdk.SlidingLog("camp-hour", 2, time.Hour).By("user", "campaign"),
	})
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(memory.New(nil))
	srv, err := New(Config{
		Limiter:  lim,
		Policies: []*sdk.Policy{p},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Refresh:  time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)
	user := "18829340001"
	show := func(c string) {
		t.Helper()
		if _, err := lim.Allow(context.Background(), p, sdk.Subject{"user": user, "campaign": c}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 45 {
		show(fmt.Sprintf("spring-%02d", i))
	}
	show("spring-07")
	page := base + "/subject?" + subjectQuery("ad", sdk.Subject{"user": user})
	sec := `section.values[data-set="campaign"] `
	row := func(n int) string { return fmt.Sprintf(sec+"tbody tr:nth-child(%d) ", n) }

	ctx := startBrowser(t, 1280, 900)
	run(t, ctx, "subject page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("values-campaign")))
	waitText(t, ctx, sec+".values-total", "45 live values")
	waitText(t, ctx, row(1)+".pair", "campaign=spring-07")
	waitText(t, ctx, row(1)+`.vrule[data-rule="camp-hour"] .vused`, "2")
	waitContains(t, ctx, row(1)+`.vrule[data-rule="camp-hour"]`, "retry in")
	waitText(t, ctx, row(2)+".pair", "campaign=spring-44")
	waitText(t, ctx, row(2)+`.vrule[data-rule="camp-day"] .vremaining`, "2")
	if n := evalInt(t, ctx, `document.querySelectorAll('`+sec+`tbody tr').length`); n != subjectValuesLimit {
		t.Errorf("first page: %d rows, want %d", n, subjectValuesLimit)
	}
	screenshot(t, ctx, "values-subject.png")

	follow(t, ctx, "older", sec+".values-next", chromedp.WaitVisible(chromedp.CSS(sec+".values-prev")))
	waitText(t, ctx, row(1)+".pair", "campaign=spring-25")
	follow(t, ctx, "newer", sec+".values-prev", chromedp.WaitNotPresent(chromedp.CSS(sec+".values-prev")))
	waitText(t, ctx, row(1)+".pair", "campaign=spring-07")

	follow(t, ctx, "look up the latest campaign", row(1)+".look", chromedp.WaitVisible(chromedp.ID("rules")))
	waitText(t, ctx, ruleCell("camp-hour", "used"), "2")
	waitContains(t, ctx, "#subject-shown", "spring-07")

	phone := startBrowser(t, 390, 844)
	run(t, phone, "subject page on a phone", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("values-campaign")))
	if w, vw := evalInt(t, phone, `document.documentElement.scrollWidth`), evalInt(t, phone, `window.innerWidth`); w > vw {
		t.Errorf("at %d px the subject page with its values is %d px wide", vw, w)
	}
	screenshot(t, phone, "values-phone.png")
}
