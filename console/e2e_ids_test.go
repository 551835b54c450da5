package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

// hiddenSamples are characters that draw as nothing or turn the text
// around them: each page must show them as marked escapes.
var hiddenSamples = []rune{0x202E, 0x3164, 0x115F, 0x2800, 0x034F, 0x200B, 0xFE0F, 0x00AD}

// TestE2EHiddenCharacters: subjects whose values hold direction overrides
// and invisible letters, denied by a service (recorded) and reset through
// the console, are shown with those characters marked (\u202E …) on every
// page, in headless Chromium: the overview's most denied subjects, the
// subject pages, the reset confirmation and the audit log. No page's
// visible text holds one of them raw.
func TestE2EHiddenCharacters(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	push := pols[0]
	mb := memory.New(nil)
	rec, err := fleet.NewRecorder(mb, &fleet.Options{FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	service := sdk.New(mb, sdk.WithObserver(rec.Observe))
	srv, err := New(Config{Limiter: sdk.New(mb), Fleet: fleetOf(mb, nil), Policies: pols, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, srv)

	var subjects []sdk.Subject
	for i, r := range hiddenSamples {
		s := sdk.Subject{"user": fmt.Sprintf("user%cexe.txt", r), "content": fmt.Sprintf("c%d%c", i, r)}
		subjects = append(subjects, s)
		for range 3 { // the third is denied by content-59s
			if _, err := service.Allow(context.Background(), push, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An audit entry for each subject (authentication is off: "local").
	f := &fixture{srv: srv}
	for _, s := range subjects {
		res := f.do(t, req{method: http.MethodPost, path: "/api/v1/reset", header: map[string]string{"Content-Type": jsonCT},
			body: fmt.Sprintf(`{"policy":"push","subject":{"user":%q,"content":%q},"rules":["content-59s","content-59m"]}`, s["user"], s["content"])})
		if res.StatusCode != http.StatusOK {
			t.Fatalf("POST /api/v1/reset = %d %s", res.StatusCode, readBody(t, res))
		}
	}

	pages := []string{"/", "/audit", "/audit?policy=push&user=" + subjects[0]["user"]}
	for _, s := range subjects {
		pages = append(pages,
			"/subject?"+subjectQuery("push", sdk.Subject{"user": s["user"]}),
			"/subject?"+subjectQuery("push", s),
			"/reset?"+subjectQuery("push", s))
	}
	ctx := startBrowser(t, 1280, 900)
	for _, path := range pages {
		run(t, ctx, "open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		if strings.HasPrefix(path, "/subject") {
			waitContains(t, ctx, "#live", "as of")
		}
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range hiddenSamples {
			if strings.ContainsRune(text, r) {
				t.Errorf("%s shows U+%04X raw in its text", path, r)
			}
		}
		marks, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('mark.esc')].map(m => m.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if len(marks) == 0 {
			t.Errorf("%s marks no character", path)
		}
	}
	// The overview lists every subject, each character marked.
	run(t, ctx, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("fleet")))
	top, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('.fleet-policy[data-policy="push"] .fleet-top').innerText`))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range hiddenSamples {
		if want := fmt.Sprintf(`user=user\u%04Xexe.txt`, r); !strings.Contains(top, want) {
			t.Errorf("most denied subjects = %q, want %q among them", top, want)
		}
	}
}
