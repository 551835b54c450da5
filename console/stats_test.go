package console

import (
	goredis "github.com/redis/go-redis/v9"

	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/prom"
)

// fleetFixture is a console and a separate service (its own Limiter and
// Recorder) on one memory backend and a fake clock.
type fleetFixture struct {
	*fixture
	service *sdk.Limiter
	rec     *fleet.Recorder
}

func newFleetFixture(t *testing.T, servicePolicies ...*sdk.Policy) *fleetFixture {
	t.Helper()
	clk := fakeclock.New(t0)
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	mb := memory.New(&memory.Options{Clock: clk})
	lim := sdk.New(mb, sdk.WithClock(clk))
	srv, err := New(Config{Limiter: lim, Fleet: fleetOf(mb, nil), Policies: pols, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := fleet.NewRecorder(mb, &fleet.Options{Now: clk.Now, FlushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec.Announce(servicePolicies...)
	f := &fleetFixture{
		fixture: &fixture{srv: srv, lim: lim, clock: clk, policies: map[string]*sdk.Policy{}},
		service: sdk.New(mb, sdk.WithClock(clk), sdk.WithObserver(rec.Observe)),
		rec:     rec,
	}
	for _, p := range pols {
		f.policies[p.Name()] = p
	}
	return f
}

// serve makes the service decide n times for s under p, and flushes.
func (f *fleetFixture) serve(t *testing.T, p *sdk.Policy, s sdk.Subject, n int) {
	t.Helper()
	for range n {
		if _, err := f.service.Allow(context.Background(), p, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestAPIStats(t *testing.T) {
	f := newFleetFixture(t)
	f.serve(t, f.policies["push"], push, 3) // 2 allowed, 1 denied by content-59s
	res := f.do(t, req{path: "/api/v1/stats?policy=push"})
	body := readBody(t, res)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/stats = %d, want 200: %s", res.StatusCode, body)
	}
	var got StatsJSON
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if got.Policy != "push" || got.Allowed != 2 || got.Denied != 1 || got.StepSeconds != 10 || got.To.Sub(got.From) < 59*time.Minute {
		t.Errorf("stats = %+v, want push: 2 allowed, 1 denied over an hour of 10 s buckets", got)
	}
	want := []RuleStatsJSON{{"recv-1m", 3, 0, 0, 0, 0}, {"recv-24h", 3, 0, 0, 0, 0}, {"content-59s", 2, 1, 1, 0, 0}, {"content-59m", 3, 0, 0, 0, 0}}
	if len(got.Rules) != len(want) {
		t.Fatalf("rules = %+v, want %+v", got.Rules, want)
	}
	for i := range want {
		if got.Rules[i] != want[i] {
			t.Errorf("rule %d = %+v, want %+v", i, got.Rules[i], want[i])
		}
	}
	if res := f.do(t, req{path: "/api/v1/stats?policy=nope"}); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /api/v1/stats?policy=nope = %d, want 404", res.StatusCode)
	}
	// A backend that keeps no statistics.
	bare, err := New(Config{Limiter: sdk.New(failing), Policies: []*sdk.Policy{f.policies["push"]}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if res := (&fixture{srv: bare}).do(t, req{path: "/api/v1/stats?policy=push"}); res.StatusCode != http.StatusNotImplemented {
		t.Errorf("GET /api/v1/stats on a backend without statistics = %d, want 501", res.StatusCode)
	}
}

// TestOverviewFleet: the overview charts a separate service's decisions,
// lists its most denied subjects with links to their pages, and warns
// when the service runs other policies than the console's file.
func TestOverviewFleet(t *testing.T) {
	other, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, 2*time.Minute).By("user"), // another window: other keys
	})
	if err != nil {
		t.Fatal(err)
	}
	extra, err := sdk.NewPolicy("sms", []sdk.Rule{sdk.FixedWindow("daily", 5, 24*time.Hour).By("phone")})
	if err != nil {
		t.Fatal(err)
	}
	f := newFleetFixture(t, other, extra)
	f.serve(t, f.policies["push"], push, 4) // 2 allowed, 2 denied
	f.clock.Advance(20 * time.Second)
	f.serve(t, f.policies["push"], sdk.Subject{"user": "u<2>", "content": "c"}, 1)

	body := readBody(t, f.do(t, req{path: "/"}))
	for _, want := range []string{
		`id="fleet"`,
		`last hour: <span class="ok fleet-allowed">3</span> allowed`,
		`<span class="bad fleet-denied">2</span> denied (40%)`,
		`<polyline class="denied"`,
		`href="/subject?policy=push&amp;user=18829340001"`,
		"user=18829340001",
		"A service runs policy sms, which the console&#39;s policy file lacks",
		"A service runs policy push differently from the console&#39;s policy file",
		"rule recv-1m has other keys: id w26372 (sliding_window, 1m0s) here, id 2h5s54 (sliding_window, 2m0s) there",
		"rule content-59s is only here",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	// push was announced (the service used it), api was not.
	if i := strings.Index(body, `class="fleet-policy" data-policy="api"`); i < 0 || !strings.Contains(body[i:], "No service announced this policy") {
		t.Error("overview does not say that no service announced api")
	}
	if i, j := strings.Index(body, `class="fleet-policy" data-policy="push"`), strings.Index(body, `class="fleet-policy" data-policy="api"`); i < 0 || j < i || strings.Contains(body[i:j], "No service announced") {
		t.Error("overview says that no service announced push")
	}
	if strings.Contains(body, "u<2>") {
		t.Error("overview shows an unescaped subject")
	}
	for _, want := range []string{
		`Last hour: <span class="ok">3 allowed</span>, <span class="bad">2 denied</span>`,
		`Last 24 h: <span class="ok">3 allowed</span>, <span class="bad">2 denied</span>`,
	} {
		if !strings.Contains(html.UnescapeString(body), want) {
			t.Errorf("overview lacks the chart caption %q", want)
		}
	}
}

// TestPromSeriesMatchConsole: the console's /metrics serves what a
// service's own sdk/prom Collector exports, sample for sample, and its
// start time beside.
func TestPromSeriesMatchConsole(t *testing.T) {
	m := NewMetrics(nil)
	col := prom.New(nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	lim := sdk.New(memory.New(nil), sdk.WithObserver(func(ev sdk.Event) { m.Observe(ev); col.Observe(ev) }))
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := lim.Allow(context.Background(), pols[0], push); err != nil {
			t.Fatal(err)
		}
	}
	broken := sdk.New(failing, sdk.WithObserver(func(ev sdk.Event) { m.Observe(ev); col.Observe(ev) }))
	_, _ = broken.Allow(context.Background(), pols[0], push)
	scraped := scrape(t, m)
	families := []string{prom.BackendLatencySeconds, prom.DecisionsTotal, prom.DegradedDecisionsTotal, prom.RuleDecisionsTotal}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(scraped), families...); err != nil {
		t.Errorf("the console's /metrics and sdk/prom differ: %v", err)
	}
	var served []string
	for _, l := range strings.Split(scraped, "\n") {
		if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
			served = append(served, strings.Fields(name)[0])
		}
	}
	if want := append(families[:1:1], append([]string{"freqcap_console_start_time_seconds"}, families[1:]...)...); !slices.Equal(served, want) {
		t.Errorf("/metrics serves %v, want %v", served, want)
	}
}

// scrape returns what m serves at /metrics.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics = %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestOverviewFleetBackendDown: the panel says the statistics failed,
// without the backend's address.
func TestOverviewFleetBackendDown(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	// A real Redis backend whose server is unreachable: every call,
	// statistics included, fails with an error naming the address.
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	srv, err := New(Config{Limiter: sdk.New(fcredis.New(rdb, nil)), Fleet: fleetOf(fcredis.New(rdb, nil), nil), Policies: pols, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, (&fixture{srv: srv}).do(t, req{path: "/"}))
	if !strings.Contains(body, `id="fleet-error"`) || !strings.Contains(body, "Statistics could not be read") {
		t.Errorf("overview lacks the statistics error")
	}
	if i := strings.Index(body, `id="fleet"`); i < 0 || strings.Contains(body[i:], "127.0.0.1:1") {
		t.Errorf("the fleet panel shows the backend's address (or is missing)")
	}
}

// TestOverviewOwnTraffic: with traffic decided by another Limiter (a
// service's, recorded) and none by the console, the overview's fleet panel
// shows it and the console's own counts, at zero, say they are the
// console's own: no panel reads as the fleet's traffic at 0.0 / 0.0.
func TestOverviewOwnTraffic(t *testing.T) {
	f := newFleetFixture(t)
	f.serve(t, f.policies["push"], push, 3) // 2 allowed, 1 denied
	body := readBody(t, f.do(t, req{path: "/"}))
	for _, want := range []string{
		`last hour: <span class="ok fleet-allowed">2</span> allowed`,
		`<h2 id="own-traffic">This console's own decisions</h2>`,
		`Your services' decisions are not counted here: <a href="#fleet">Fleet traffic</a> above sums what their recorders flushed.`,
		`policy <strong>push</strong>, through this console, last 10 s`,
		`since this console started: 0 allowed, 0 denied (—), 0 degraded, 0 errors`,
	} {
		if !strings.Contains(html.UnescapeString(body), want) {
			t.Errorf("overview lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<h2>Traffic</h2>") {
		t.Error("overview still has a panel headed Traffic, which reads as the fleet's")
	}
	if i, j := strings.Index(body, `id="fleet"`), strings.Index(body, `id="own-traffic"`); i < 0 || j < i {
		t.Errorf("the console's own decisions (at %d) come before the fleet's (at %d)", j, i)
	}
}
