package console

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

// TestE2EFleet: the campaign example, run as a separate process against a
// real redis-server, records its decisions; the console beside it, on the
// same server, charts them on the overview in headless Chromium, and its
// most denied recipient links to that recipient's subject page. The
// screenshot of the overview is written to $FREQCAP_FLEET_SCREENSHOT (or
// the test's temporary directory).
func TestE2EFleet(t *testing.T) {
	chrome := chromiumPath()
	if chrome == "" {
		if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
			t.Fatal("chromium not found and FREQCAP_REQUIRE_SERVERS=1")
		}
		t.Skip("SKIPPING the fleet browser test: chromium not found (apt-get install chromium, or set FREQCAP_CHROMIUM)")
	}
	addr := redistest.NewServer(t).Addr()

	// The other process: the campaign example, 300 recipients, deciding
	// under the console's key prefix.
	bin := filepath.Join(t.TempDir(), "campaign")
	build := exec.Command("go", "build", "-o", bin, "./examples/campaign")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/campaign: %v\n%s", err, out)
	}
	c := goredis.NewClient(redis.NewClientOptions(addr).Simple())
	t.Cleanup(func() { c.Close() })
	for attempt := 1; ; attempt++ {
		out, err := exec.Command(bin, "-redis", addr, "-recipients", "300", "-prefix", keyname.DefaultPrefix).CombinedOutput()
		if err == nil && strings.Contains(string(out), "(300 by content-59s)") {
			break
		}
		if attempt == 3 {
			t.Fatalf("campaign: %v\n%s", err, out)
		}
		// On a loaded machine a batch can outlast the example client's
		// 500 ms read timeout: start again on an empty server.
		t.Logf("campaign attempt %d: %v\n%s", attempt, err, out)
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// The console, on the same server, authentication off.
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{
		Limiter:  sdk.New(redis.New(c, nil)),
		Fleet:    fleetOf(redis.New(c, nil), nil),
		Policies: pols,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)

	ctx := startBrowser(t, 1280, 900)

	// The campaign: 300 allowed twice (msg-1, msg-2; the retry is a
	// replay and not counted), 300 denied twice (msg-3 and its cached
	// retry).
	run(t, ctx, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("fleet")))
	push := `#fleet .fleet-policy[data-policy="push"]`
	waitText(t, ctx, push+" .fleet-allowed", "600")
	waitText(t, ctx, push+" .fleet-denied", "600")
	waitContains(t, ctx, push+` .fleet-rules tr[data-rule="content-59s"]`, "600")
	waitContains(t, ctx, push+" .fleet-top li:first-child", "denied")
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#fleet svg polyline').length`))
	if err != nil || n < 2*(2+4) {
		t.Errorf("%d chart lines (%v), want 2 charts and 4 sparklines of 2 lines each", n, err)
	}
	if w, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#fleet .fleet-warning').length`)); err != nil || w != 0 {
		t.Errorf("%d policy warnings (%v), want none: the campaign runs the seed policy", w, err)
	}
	path := os.Getenv("FREQCAP_FLEET_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "fleet.png")
	} else if !filepath.IsAbs(path) {
		path = filepath.Join("..", path)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("overview screenshot: %s (%d bytes)", path, len(png))

	// The most denied recipient's link opens its subject page, with the
	// campaign's counts (the campaign decided under the console's prefix).
	run(t, ctx, "follow the top denied subject",
		chromedp.Click(chromedp.CSS(push+" .fleet-top li:first-child a")),
		chromedp.WaitVisible(chromedp.ID("rules")),
	)
	waitText(t, ctx, ruleCell("recv-1m", "used"), "2")
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil || !strings.Contains(loc, "/subject?") || !strings.Contains(loc, "user=user-") {
		t.Errorf("top denied link went to %q (%v), want a recipient's subject page", loc, err)
	}
}
