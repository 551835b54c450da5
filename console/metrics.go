package console

import (
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/prom"
)

// Metrics counts the limiter's decisions for /metrics and for the
// overview's live rates. Feed it by passing Observe to sdk.WithObserver.
// It is safe for concurrent use; the zero value is not usable, call
// NewMetrics.
//
// /metrics serves, through client_golang, the series of an sdk/prom
// Collector (freqcap_decisions_total, freqcap_rule_decisions_total,
// freqcap_degraded_decisions_total, freqcap_backend_latency_seconds: the
// names and labels a service's own prom.Collector exports) and one of the
// console's own, freqcap_console_start_time_seconds.
type Metrics struct {
	now       func() time.Time
	collector *prom.Collector
	registry  *prometheus.Registry
	handler   http.Handler

	mu    sync.Mutex
	rates map[string]*rateRing // policy; consuming ops only
}

// rateSlots is how many seconds of history the rate rings keep.
const rateSlots = 64

type rateRing struct {
	sec     [rateSlots]int64 // unix second each slot holds
	allowed [rateSlots]uint64
	denied  [rateSlots]uint64
}

func (r *rateRing) add(t time.Time, allowed bool) {
	s := t.Unix()
	i := int(((s % rateSlots) + rateSlots) % rateSlots)
	if r.sec[i] != s {
		r.sec[i], r.allowed[i], r.denied[i] = s, 0, 0
	}
	if allowed {
		r.allowed[i]++
	} else {
		r.denied[i]++
	}
}

// sum counts the decisions of the last n whole seconds before t.
func (r *rateRing) sum(t time.Time, n int) (allowed, denied uint64) {
	now := t.Unix()
	for i := range rateSlots {
		if age := now - r.sec[i]; age >= 1 && age <= int64(n) {
			allowed += r.allowed[i]
			denied += r.denied[i]
		}
	}
	return allowed, denied
}

// NewMetrics returns empty metrics; now is the clock of the rates (nil:
// time.Now).
func NewMetrics(now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{now: now, collector: prom.New(nil), registry: prometheus.NewRegistry(), rates: map[string]*rateRing{}}
	start := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "freqcap_console_start_time_seconds", Help: "When the console started, in Unix seconds.",
	})
	start.Set(float64(now().UnixNano()) / 1e9)
	m.registry.MustRegister(m.collector, start)
	m.handler = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
	return m
}

// Observe records one decision. Pass it to sdk.WithObserver.
func (m *Metrics) Observe(ev sdk.Event) {
	m.collector.Observe(ev)
	if !prom.Consuming(ev.Op) || prom.Outcome(ev) == "error" {
		return
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rates[ev.Policy]
	if r == nil {
		r = &rateRing{}
		m.rates[ev.Policy] = r
	}
	r.add(now, ev.Decision.Allowed)
}

// Rates is a policy's recent traffic, for the overview.
type Rates struct {
	Policy                 string
	AllowedPerSec          float64 // over the last Window
	DeniedPerSec           float64
	Allowed, Denied, Error uint64 // consuming decisions since start
	Degraded               uint64
	Window                 time.Duration
}

// Rates returns the recent rates of policy over the last 10 seconds, and
// its totals (read from the /metrics counters).
func (m *Metrics) Rates(policy string) Rates {
	const window = 10
	now := m.now()
	r := Rates{Policy: policy, Window: window * time.Second}
	m.mu.Lock()
	if ring := m.rates[policy]; ring != nil {
		a, d := ring.sum(now, window)
		r.AllowedPerSec = float64(a) / window
		r.DeniedPerSec = float64(d) / window
	}
	m.mu.Unlock()
	mfs, err := m.registry.Gather()
	if err != nil {
		return r // the registry's own collectors do not fail
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range s.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["policy"] != policy {
				continue
			}
			n := uint64(s.GetCounter().GetValue())
			switch mf.GetName() {
			case prom.DegradedDecisionsTotal:
				r.Degraded += n
			case prom.DecisionsTotal:
				if !prom.Consuming(l["op"]) {
					continue
				}
				switch l["outcome"] {
				case "allowed":
					r.Allowed += n
				case "denied":
					r.Denied += n
				case "error":
					r.Error += n
				}
			}
		}
	}
	return r
}

func (s *Server) metricsHandler(c echo.Context) error {
	s.metrics.handler.ServeHTTP(c.Response(), c.Request())
	return nil
}
