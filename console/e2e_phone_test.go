package console

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

// startBrowser starts headless Chromium (TESTING.md's flags) with a
// window of w×h CSS pixels, or skips the test when there is none.
func startBrowser(t *testing.T, w, h int) context.Context {
	t.Helper()
	chrome := chromiumPath()
	if chrome == "" {
		if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
			t.Fatal("chromium not found and FREQCAP_REQUIRE_SERVERS=1")
		}
		t.Skip("SKIPPING a browser test: chromium not found (apt-get install chromium, or set FREQCAP_CHROMIUM)")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(w, h),
	)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium %s: %v", chrome, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(w), int64(h))); err != nil {
		t.Fatalf("viewport: %v", err)
	}
	return ctx
}

// serveConsole serves srv on a free loopback port until the test ends and
// returns its base URL.
func serveConsole(t *testing.T, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// screenshot writes a full-page screenshot to $FREQCAP_SCREENSHOT_DIR/name
// (default: the test's temporary directory) and logs where.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("FREQCAP_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// TestE2EPhone drives the console at a phone's width (390 CSS px): no
// page is wider than the screen, and the subject page's "Storage keys"
// disclosure keeps its open (and closed) state across live refreshes.
func TestE2EPhone(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(memory.New(nil))
	srv, err := New(Config{
		Limiter:  lim,
		Policies: pols,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Refresh:  150 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)

	subject := sdk.Subject{"user": "18829340001", "content": sdk.Fingerprint("Your parcel is out for delivery")}
	for range 3 {
		if _, err := lim.Allow(context.Background(), pols[0], subject); err != nil {
			t.Fatal(err)
		}
	}
	if err := lim.Admin().Reset(context.Background(), pols[0], sdk.Subject{"user": "18829340002"}); err != nil {
		t.Fatal(err)
	}
	page := base + "/subject?" + subjectQuery("push", subject)

	ctx := startBrowser(t, 390, 844)
	for _, path := range []string{"/subject?" + subjectQuery("push", subject), "/", "/policies", "/audit", "/reset?" + subjectQuery("push", subject)} {
		run(t, ctx, "open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		w := evalInt(t, ctx, `document.documentElement.scrollWidth`)
		if vw := evalInt(t, ctx, `window.innerWidth`); vw != 390 || w > vw {
			t.Errorf("%s at %d px: the page is %d px wide", path, vw, w)
		}
	}

	// The disclosure: open it, and it stays open through refreshes (each
	// refresh replaces the element, so the old one is detached).
	run(t, ctx, "subject page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("rules")))
	waitRefreshed := func(what string) {
		t.Helper()
		for i := range 3 {
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(window.__old = document.querySelector('#storage-keys'), true)`)); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!window.__old.isConnected && !!document.querySelector('#storage-keys')`,
				chromedp.WithPollingTimeout(10*time.Second))); err != nil {
				t.Fatalf("%s: refresh %d did not happen: %v", what, i+1, err)
			}
		}
	}
	// A click in the page itself: the live refresh may replace the node
	// between a DevTools query and its click.
	toggle := func() {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.querySelector('#storage-keys summary').click(), true)`)); err != nil {
			t.Fatalf("clicking Storage keys: %v", err)
		}
	}
	toggle()
	waitRefreshed("open")
	if open := evalInt(t, ctx, `document.querySelector('#storage-keys').open ? 1 : 0`); open != 1 {
		t.Errorf("Storage keys closed itself on a live refresh")
	}
	waitContains(t, ctx, "#storage-keys ul", "fc:{18829340001}:push:recv-1m.")
	screenshot(t, ctx, "phone-subject.png")
	toggle()
	waitRefreshed("closed")
	if open := evalInt(t, ctx, `document.querySelector('#storage-keys').open ? 1 : 0`); open != 0 {
		t.Errorf("Storage keys opened itself on a live refresh")
	}
	run(t, ctx, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("main")))
	screenshot(t, ctx, "phone-overview.png")
}

// TestE2EPhoneTables: at a phone's width (390 CSS px) the subject page's
// counters and denial trail show their key cells — a denying rule's
// "retry in", each denial's "what was blocked", "retry after" and links —
// on the screen, not in a sideways scroller: the rows reflow into stacked
// cells, each with its column's name. The overview's tables, the audit
// log and the policies page fit as well.
func TestE2EPhoneTables(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(memory.New(nil))
	srv, err := New(Config{
		Limiter:  lim,
		Policies: pols,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Refresh:  150 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)
	user := "18829340001"
	parcel := sdk.Subject{"user": user, "content": sdk.Fingerprint("Your parcel is out for delivery")}
	code := sdk.Subject{"user": user, "content": sdk.Fingerprint("Your login code is 482913")}
	for _, s := range []sdk.Subject{parcel, parcel, parcel, code, code, code, code} {
		if _, err := lim.Allow(context.Background(), pols[0], s); err != nil {
			t.Fatal(err)
		}
	}

	ctx := startBrowser(t, 390, 844)
	// inView fails unless every element sel matches lies within the
	// viewport's width, with nothing scrolled sideways.
	inView := func(page, sel string, atLeast int) {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
			const out = [];
			document.querySelectorAll(`+strconv.Quote(sel)+`).forEach(el => {
				const r = el.getBoundingClientRect();
				out.push(r.width > 0 && r.left >= 0 && r.right <= window.innerWidth + 0.5 ? "in" :
					"out: " + Math.round(r.left) + ".." + Math.round(r.right) + " of " + window.innerWidth + ": " + el.textContent.trim().slice(0, 40));
			});
			return out;
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < atLeast {
			t.Errorf("%s: %d elements %s, want at least %d", page, len(got), sel, atLeast)
		}
		for _, g := range got {
			if g != "in" {
				t.Errorf("%s: %s is off-screen (%s)", page, sel, g)
			}
		}
	}
	for _, s := range []sdk.Subject{parcel, {"user": user}} {
		page := "/subject?" + subjectQuery("push", s)
		run(t, ctx, "open "+page, chromedp.Navigate(base+page), chromedp.WaitVisible(chromedp.ID("rules")))
		if s["content"] != "" {
			inView(page, "#rules tr.denying td.reset .retry", 1)
			inView(page, "#rules td.remaining", 4)
		} else {
			inView(page, "#rules td.remaining", 2)
		}
		inView(page, "#rules td.reset", 1)
		inView(page, "#trail td.values", 2)
		inView(page, "#trail td.retry-after", 2)
		inView(page, "#trail td.actions a", 2)
		inView(page, "#trail td.rule", 2)
		w := evalInt(t, ctx, `document.documentElement.scrollWidth`)
		if w > 390 {
			t.Errorf("%s is %d px wide at 390 px", page, w)
		}
		// Each stacked cell says what it is.
		if label, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#trail td.values'), '::before').content`)); err != nil || !strings.Contains(label, "What was blocked") {
			t.Errorf("%s: the trail's values cell is labelled %q (%v), want \"What was blocked\"", page, label, err)
		}
		name := "phone-subject-pair.png"
		if s["content"] == "" {
			name = "phone-subject-user.png"
		}
		screenshot(t, ctx, name)
	}
}
