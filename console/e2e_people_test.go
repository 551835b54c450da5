package console

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestE2EPeople drives the person page in headless Chromium: an admin
// links a device token to person 77 from the person's page; the person
// lookup finds 77 from the token; the token is unlinked from its row
// with a reason. Both changes are in the person's audit, by the admin's
// name, and in the console's audit log.
func TestE2EPeople(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
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
	ctx := startBrowser(t, 1280, 900)
	signIn(t, ctx, base+"/person?id=77", adminToken, "#person-card")
	waitContains(t, ctx, "#person-self", "is a person of its own")

	run(t, ctx, "link a token",
		chromedp.Click(`#person-edit summary`),
		chromedp.WaitVisible(chromedp.ID("link-identity")),
		chromedp.SendKeys(chromedp.ID("link-identity"), "dev-9f1c"),
		chromedp.SendKeys(chromedp.ID("link-reason"), "same device"),
		chromedp.Click(chromedp.ID("link-submit")),
		chromedp.WaitVisible(chromedp.ID("person-notice")),
	)
	waitContains(t, ctx, `#identity-list tr[data-identity="dev-9f1c"]`, "same device")
	waitContains(t, ctx, "#person-audit tbody tr:first-child", "link dev-9f1c")

	run(t, ctx, "find the person from the token",
		chromedp.SetValue(chromedp.ID("person-id"), "dev-9f1c"),
		chromedp.Click(chromedp.ID("person-lookup-submit")),
		chromedp.WaitVisible(chromedp.ID("person-linked")),
	)
	waitContains(t, ctx, "#person-linked", "dev-9f1c is an identity of person 77")
	screenshot(t, ctx, "person-linked.png")

	run(t, ctx, "unlink it",
		chromedp.SendKeys(`#identity-list tr[data-identity="dev-9f1c"] input[name="reason"]`, "device sold"),
		chromedp.Click(`#identity-list tr[data-identity="dev-9f1c"] button`),
		chromedp.WaitVisible(chromedp.ID("person-notice")),
	)
	waitContains(t, ctx, "#person-notice", "unlinked")
	waitContains(t, ctx, "#person-self", "dev-9f1c is a person of its own")
	run(t, ctx, "the person's page", chromedp.Navigate(base+"/person?id=77"), chromedp.WaitVisible(chromedp.ID("person-audit")))
	waitContains(t, ctx, "#person-audit tbody tr:first-child", "unlink dev-9f1c")
	waitContains(t, ctx, "#no-identities", "No identity is linked")
	if _, err := lim.Admin().LinkOf(context.Background(), "dev-9f1c"); !errors.Is(err, driver.ErrLinkNotFound) {
		t.Errorf("LinkOf(dev-9f1c) after the unlink = %v, want ErrLinkNotFound", err)
	}
	e := audit.Entries()
	if len(e) != 2 || e[1].Action != "person-link" || e[0].Action != "person-unlink" || e[0].Name != "alice" || e[0].Reason != "device sold" {
		t.Fatalf("audit = %+v, want alice's unlink after her link (newest first)", e)
	}
}
