package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

// chromiumPath finds the browser for the end-to-end test: $FREQCAP_CHROMIUM,
// /usr/bin/chromium, or chromium / chromium-browser / google-chrome on PATH.
func chromiumPath() string {
	if p := os.Getenv("FREQCAP_CHROMIUM"); p != "" {
		if p, err := exec.LookPath(p); err == nil {
			return p
		}
		return ""
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestE2EBrowser drives the console in headless Chromium: an admin looks a
// subject up, watches its counters rise as the service calls Allow, sees
// the denial and its rule, and resets the subject after confirming; a
// viewer can do none of the resetting. (TestE2EContentBlock writes the
// README's screenshot.)
func TestE2EBrowser(t *testing.T) {
	chrome := chromiumPath()
	if chrome == "" {
		if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
			t.Fatal("chromium not found and FREQCAP_REQUIRE_SERVERS=1: install it (apt-get install chromium) or set FREQCAP_CHROMIUM")
		}
		t.Skip("SKIPPING the browser end-to-end test: chromium not found (apt-get install chromium, or set FREQCAP_CHROMIUM)")
	}

	// The console, on a memory backend with the real clock.
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]*sdk.Policy{}
	for _, p := range pols {
		policies[p.Name()] = p
	}
	m := NewMetrics(nil)
	lim := sdk.New(memory.New(nil), sdk.WithObserver(m.Observe))
	audit := NewAuditLog(nil, 0)
	srv, err := New(Config{
		Limiter:     lim,
		Policies:    pols,
		Metrics:     m,
		Audit:       audit,
		Credentials: testCredentials(),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Refresh:     200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)

	ctx := startBrowser(t, 1280, 900)

	user := "18829340001"
	subject := sdk.Subject{"user": user, "content": sdk.Fingerprint("Your parcel is out for delivery")}
	page := base + "/subject?" + subjectQuery("push", subject)
	allow := func(n int) {
		t.Helper()
		for range n {
			if _, err := lim.Allow(context.Background(), policies["push"], subject); err != nil {
				t.Fatalf("Allow() error: %v", err)
			}
		}
	}

	// 1. An admin signs in and lands on the subject page.
	run(t, ctx, "admin signs in",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules")),
	)
	waitText(t, ctx, ruleCell("recv-1m", "used"), "0")
	waitText(t, ctx, "#who", "alice (admin, session)")

	// 2. The service sends; the counters rise without a reload.
	allow(1)
	waitText(t, ctx, ruleCell("recv-1m", "used"), "1")
	allow(1)
	waitText(t, ctx, ruleCell("recv-1m", "used"), "2")
	waitText(t, ctx, ruleCell("content-59s", "remaining"), "0")

	// 3. The third identical message is denied by content-59s: the verdict
	// and the denial trail name the rule and its counts.
	allow(1)
	waitText(t, ctx, "#trail tbody tr:first-child td.rule", "content-59s")
	waitText(t, ctx, "#trail tbody tr:first-child td:nth-child(3)", "2 / 2")
	waitContains(t, ctx, "#verdict", "denied by content-59s")
	waitText(t, ctx, ruleCell("recv-1m", "used"), "2") // a denial consumes nothing

	// 4. Reset, after confirming: the wider of the two resets the page
	// offers for a user and a content (TestE2EPairReset has the other),
	// which says it counts every content.
	run(t, ctx, "admin opens the reset confirmation",
		chromedp.Click(chromedp.ID("reset")),
		chromedp.WaitVisible(chromedp.ID("confirm-reset-all")),
	)
	waitText(t, ctx, "#reset-rules", "content-59s, content-59m")
	waitText(t, ctx, "#wider-rules", "recv-1m, recv-24h, content-59s, content-59m")
	waitContains(t, ctx, "#reset-wider .wider-note", "for every content of this user")
	run(t, ctx, "admin confirms the wider reset",
		chromedp.Click(chromedp.ID("confirm-reset-all")),
		chromedp.WaitVisible(chromedp.ID("notice")),
	)
	for _, rule := range []string{"recv-1m", "recv-24h", "content-59s", "content-59m"} {
		waitText(t, ctx, ruleCell(rule, "used"), "0")
	}
	waitContains(t, ctx, "#audit tbody tr:first-child", "alice (admin, session)")
	waitContains(t, ctx, "#audit tbody tr:first-child", "user="+user)
	waitText(t, ctx, "#trail tbody tr:first-child td.rule", "content-59s") // the trail is kept
	if e := audit.Entries(); len(e) != 1 || e[0].Subject["user"] != user || e[0].Role != "admin" {
		t.Fatalf("audit log = %+v, want one reset of %s by an admin", e, user)
	}

	// Traffic after the reset: counters and a fresh denial.
	allow(3)
	waitText(t, ctx, ruleCell("recv-1m", "used"), "2")
	waitText(t, ctx, "#trail tbody tr:first-child td.rule", "content-59s")
	waitContains(t, ctx, "#verdict", "denied by content-59s")

	// 5. A viewer, in a separate browser context (its own cookies), sees
	// the counters but cannot reset.
	vctx, cancelViewer := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	defer cancelViewer()
	vctx, cancelV := context.WithTimeout(vctx, 60*time.Second)
	defer cancelV()
	run(t, vctx, "viewer signs in",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), viewerToken),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rules")),
	)
	waitText(t, vctx, "#who", "victor (viewer, session)")
	waitText(t, vctx, ruleCell("recv-1m", "used"), "2")
	waitVisibleNoReset(t, vctx)
	// Posting the reset form directly, with a valid CSRF token, is refused.
	status := evalInt(t, vctx, `(async () => {
		const body = new URLSearchParams({
			_csrf: document.querySelector('input[name=_csrf]').value,
			policy: 'push', user: `+strconv.Quote(user)+`, confirm: 'yes'});
		const r = await fetch('/reset', {method: 'POST', body, redirect: 'manual'});
		return r.status;
	})()`)
	if status != 403 {
		t.Errorf("viewer POST /reset = %d, want 403", status)
	}
	// Opening the confirmation page is refused too.
	run(t, vctx, "viewer opens the reset page",
		chromedp.Navigate(base+"/reset?"+subjectQuery("push", subject)),
		chromedp.WaitVisible(chromedp.ID("error")),
	)
	waitContains(t, vctx, "h1", "403")
	waitContains(t, vctx, "#error", "needs the admin role")
	if e := audit.Entries(); len(e) != 1 {
		t.Errorf("audit log has %d entries after the viewer's attempts, want 1", len(e))
	}
	ins, err := lim.Admin().Inspect(context.Background(), policies["push"], subject)
	if err != nil || ins.Rules[0].Used != 2 {
		t.Errorf("after the viewer's attempts recv-1m = %+v, %v; want used 2", ins.Rules, err)
	}
}

// ruleCell selects a cell (used, limit, remaining) of a rule's row.
func ruleCell(rule, cell string) string {
	return fmt.Sprintf(`#rules tr[data-rule=%q] td.%s`, rule, cell)
}

func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v\npage: %s", what, err, pageText(ctx))
	}
}

// follow opens the link sel as a click on it would (its href), with
// chromedp.Navigate, which returns once the new page has loaded, then runs
// steps. A chromedp.Click that navigates can race chromedp's node tree:
// when the next page has an element matching the next selector too, the
// query may find it in the old document and the action fail with "Could not
// find node with given id" (seen in CI on the values pages).
func follow(t *testing.T, ctx context.Context, what, sel string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {}).href || ""`, strconv.Quote(sel))))
	if err != nil || href == "" {
		t.Fatalf("%s: no link %s (%v)\npage: %s", what, sel, err, pageText(ctx))
	}
	run(t, ctx, what, append([]chromedp.Action[chromedp.Void]{chromedp.Navigate(href)}, steps...)...)
}

// waitText polls the DOM (on every mutation) until the element sel has
// exactly the text want, or fails at the deadline.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	waitDOM(t, ctx, sel, want, "===")
}

// waitContains is waitText for a substring (whitespace collapsed).
func waitContains(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	waitDOM(t, ctx, sel, want, "includes")
}

func waitDOM(t *testing.T, ctx context.Context, sel, want, how string) {
	t.Helper()
	get := fmt.Sprintf(`((document.querySelector(%s) || {}).textContent || "").replace(/\s+/g, " ").trim()`, strconv.Quote(sel))
	cond := get + " === " + strconv.Quote(want)
	if how == "includes" {
		cond = get + ".includes(" + strconv.Quote(want) + ")"
	}
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](get))
		if errors.Is(err, chromedp.ErrPollingTimeout) {
			err = errors.New("timed out")
		}
		t.Fatalf("waiting for %s to %s %q: %v; it is %q", sel, how, want, err, got)
	}
}

// waitVisibleNoReset checks that the page offers no reset.
func waitVisibleNoReset(t *testing.T, ctx context.Context) {
	t.Helper()
	waitContains(t, ctx, "#reset-denied", "needs the admin role")
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#reset, #confirm-reset').length`))
	if err != nil || n != 0 {
		t.Errorf("viewer page has %d reset controls (%v), want 0", n, err)
	}
}

func evalInt(t *testing.T, ctx context.Context, expr string) int {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluating: %v", err)
	}
	return v
}

// pageText returns the current URL and text of the page, for failures.
func pageText(ctx context.Context) string {
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	txt, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if len(txt) > 2000 {
		txt = txt[:2000]
	}
	return loc + "\n" + strings.TrimSpace(txt)
}
