package console

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 entries"}, {1, "1 entry"}, {2, "2 entries"}} {
		if got := views.Count(tc.n, "entry", "entries"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// onePlural finds a count of one with a plural noun: "(1 entries)".
var onePlural = regexp.MustCompile(`\b1 (entries|denials|rules|cells|errors|matching entries|units|values|subjects)\b`)

// TestPlurals: where the pages count one thing, they say it in the
// singular: one trail entry, a trail of one denial, one audit entry, a
// rule of one cell, an announced policy of one rule, one error.
func TestPlurals(t *testing.T) {
	clk := fakeclock.New(t0)
	one, err := sdk.NewPolicy("one", []sdk.Rule{sdk.SlidingWindow("s", 1, time.Minute).WithSubWindows(1).By("user")}, sdk.WithTrail(2, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	mb := memory.New(&memory.Options{Clock: clk})
	lim := sdk.New(mb, sdk.WithClock(clk))
	srv, err := New(Config{Limiter: lim, Fleet: fleetOf(mb, nil), Policies: []*sdk.Policy{one}, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := fleet.NewRecorder(mb, &fleet.Options{Now: clk.Now, FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	rec.Announce(one)
	service := sdk.New(mb, sdk.WithClock(clk), sdk.WithObserver(rec.Observe))
	for range 2 { // one allowed, one denied: one trail entry
		if _, err := service.Allow(context.Background(), one, sdk.Subject{"user": "u1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv}
	if res, body := f.api(t, "POST", "/api/v1/reset", "", `{"policy":"one","subject":{"user":"u2"}}`); res.StatusCode != 200 {
		t.Fatalf("reset = %d %s", res.StatusCode, body)
	}
	pages := map[string][]string{
		"/subject?policy=one&user=u1": {"The trail keeps the newest 2 denials, for 1h after the last one.", "(1 entry)", "exact log (limit at most 100)"},
		"/audit":                      {"1 matching entry."},
		"/":                           {"one (1 rule, last seen"},
		"/policies":                   {"exact log (limit at most 100)", `<td class="strategy" data-label="Strategy">log-runs</td>`},
	}
	for path, wants := range pages {
		body := readBody(t, f.do(t, req{path: path}))
		if m := onePlural.FindString(body); m != "" {
			t.Errorf("%s says %q", path, m)
		}
		for _, want := range wants {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %q:\n%s", path, want, body)
			}
		}
	}
	if got := trailNote(sdk.Inspection{TrailMax: 1, TrailTTL: time.Hour}); !strings.HasPrefix(got, "The trail keeps the newest 1 denial, for 1h") {
		t.Errorf("trailNote(a trail of one) = %q", got)
	}
}
