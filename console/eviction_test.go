package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestOverviewEviction: on a real 3 MB server, the overview gives every
// master's maxmemory, maxmemory-policy and evicted_keys; an evicting
// policy is a banner atop the page, and the fleet chart draws the keys
// evicted beside the decisions the recorder counted. Under noeviction
// there is no banner.
func TestOverviewEviction(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.NewServer(t)
			srv.Memory(t, "3mb", policy)
			c := goredis.NewClient(testserver.Patient(redis.NewClientOptions(srv.Addr())).Simple())
			t.Cleanup(func() { c.Close() })
			b := redis.New(c, nil)
			ctx := context.Background()
			clock := fakeclock.New(time.Now())
			rec, err := fleet.NewRecorder(b, &fleet.Options{FlushEvery: -1, Now: clock.Now, Sample: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Close()
			p, err := sdk.NewPolicy("evict", []sdk.Rule{sdk.FixedWindow("day", 1, 24*time.Hour).By("user")})
			if err != nil {
				t.Fatal(err)
			}
			lim := sdk.New(b, sdk.WithObserver(rec.Observe))
			fill := func(from, to int) {
				for i := from; i < to; i += 128 {
					as := make([]sdk.Attempt, 0, 128)
					for j := i; j < min(i+128, to); j++ {
						as = append(as, sdk.Attempt{Subject: sdk.Subject{"user": fmt.Sprint("u", j)}})
					}
					lim.TakeBatch(ctx, p, as) // under noeviction the last ones fail (OOM)
				}
			}
			// A 3 MB server holds about 9 900 of these subjects; the
			// first sample once evictions began (see fleet's
			// TestEvictionsOnRedis), the second after more.
			fill(0, 11_000)
			if policy != "noeviction" {
				// The first sample on a later tick of the LRU clock
				// than the subjects (same tick: as likely to go).
				srv.NextLRUTick(t)
			}
			if err := rec.Flush(ctx); err != nil && policy != "noeviction" {
				t.Fatal(err)
			}
			fill(11_000, 13_000)
			clock.Advance(fleet.StatsStep)
			_ = rec.Flush(ctx) // under noeviction a full server refuses it (OOM)

			cs, err := New(Config{
				Limiter:  sdk.New(b),
				Fleet:    fleetOf(b, &fleet.Options{Now: clock.Now}),
				Policies: []*sdk.Policy{p},
				Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.Get(serveConsole(t, cs) + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			page := string(body)
			if res.StatusCode != 200 {
				t.Fatalf("GET / = %d\n%s", res.StatusCode, page)
			}
			evicts := policy != "noeviction"
			row := fmt.Sprintf(`<tr data-node="%s"><td class="mono">%s</td><td>3.0 MiB</td><td><code>%s</code></td>`, srv.Addr(), srv.Addr(), policy)
			if !strings.Contains(page, row) {
				t.Errorf("overview lacks the memory row %q", row)
			}
			if got := strings.Contains(page, `class="banner bad backend-warning"`); got != evicts {
				t.Errorf("overview has the eviction banner: %v, want %v", got, evicts)
			}
			if got := strings.Contains(page, "may evict freqcap&#39;s keys"); got != evicts {
				t.Errorf("overview says the master may evict: %v, want %v", got, evicts)
			}
			if !evicts {
				return
			}
			// The hour's chart (10 s buckets) holds both samples; the
			// day's (1 min buckets) may hold them in one bucket: 0.
			if !regexp.MustCompile(`Last hour: .*<span class="evicted">[1-9][0-9]* keys evicted</span>`).MatchString(page) ||
				!strings.Contains(page, `<polyline class="evicted"`) {
				t.Errorf("overview chart lacks the evicted keys beside the decisions:\n%s", fleetSection(page))
			}
		})
	}
}

// fleetSection is the fleet panel of an overview page, for failure
// messages.
func fleetSection(page string) string {
	if i := strings.Index(page, `id="fleet"`); i >= 0 {
		page = page[i:]
	}
	return page[:min(len(page), 3000)]
}
