package console

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/sdk"
)

// Metrics counts the limiter's decisions for /metrics (Prometheus text
// exposition) and for the overview's live rates. Feed it by passing
// Observe to sdk.WithObserver. It is safe for concurrent use; the zero
// value is not usable, call NewMetrics.
//
// Exposed series:
//
//	freqcap_decisions_total{policy,op,outcome}         outcome: allowed | denied | error
//	freqcap_rule_decisions_total{policy,rule,outcome}  consuming ops only (take, reserve, wait)
//	freqcap_degraded_decisions_total{policy,op}        fail-open answers to backend failures
//	freqcap_backend_latency_seconds{op}                histogram of backend call latency
type Metrics struct {
	now   func() time.Time
	start time.Time

	mu        sync.Mutex
	decisions map[[3]string]uint64 // policy, op, outcome
	rules     map[[3]string]uint64 // policy, rule, outcome
	degraded  map[[2]string]uint64 // policy, op
	latency   map[string]*histogram
	rates     map[string]*rateRing // policy; consuming ops only
}

// latencyBuckets are the histogram's upper bounds, in seconds.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
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
	return &Metrics{
		now:       now,
		start:     now(),
		decisions: map[[3]string]uint64{},
		rules:     map[[3]string]uint64{},
		degraded:  map[[2]string]uint64{},
		latency:   map[string]*histogram{},
		rates:     map[string]*rateRing{},
	}
}

// consuming reports whether op takes units (and so counts as traffic).
func consuming(op string) bool { return op == "take" || op == "reserve" || op == "wait" }

// Observe records one decision. Pass it to sdk.WithObserver.
func (m *Metrics) Observe(ev sdk.Event) {
	outcome := "denied"
	switch {
	case ev.Err != nil && !ev.Decision.Degraded:
		outcome = "error"
	case ev.Decision.Allowed:
		outcome = "allowed"
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decisions[[3]string{ev.Policy, ev.Op, outcome}]++
	if ev.Decision.Degraded {
		m.degraded[[2]string{ev.Policy, ev.Op}]++
	}
	h := m.latency[ev.Op]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(latencyBuckets)+1)}
		m.latency[ev.Op] = h
	}
	sec := ev.Latency.Seconds()
	h.counts[sort.SearchFloat64s(latencyBuckets, sec)]++
	h.sum += sec
	h.n++
	if !consuming(ev.Op) || outcome == "error" {
		return
	}
	for _, rd := range ev.Decision.Rules {
		o := "denied"
		if rd.Allowed {
			o = "allowed"
		}
		m.rules[[3]string{ev.Policy, rd.Rule, o}]++
	}
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
// its totals.
func (m *Metrics) Rates(policy string) Rates {
	const window = 10
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := Rates{Policy: policy, Window: window * time.Second}
	if ring := m.rates[policy]; ring != nil {
		a, d := ring.sum(now, window)
		r.AllowedPerSec = float64(a) / window
		r.DeniedPerSec = float64(d) / window
	}
	for k, v := range m.decisions {
		if k[0] != policy || !consuming(k[1]) {
			continue
		}
		switch k[2] {
		case "allowed":
			r.Allowed += v
		case "denied":
			r.Denied += v
		case "error":
			r.Error += v
		}
	}
	for k, v := range m.degraded {
		if k[0] == policy {
			r.Degraded += v
		}
	}
	return r
}

// WriteTo writes the metrics in the Prometheus text exposition format.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	m.mu.Lock()
	family(&b, "freqcap_decisions_total", "counter", "Decisions made by the limiter, by policy, operation and outcome (allowed, denied, error).")
	for _, k := range sortedKeys3(m.decisions) {
		sample(&b, "freqcap_decisions_total", [][2]string{{"policy", k[0]}, {"op", k[1]}, {"outcome", k[2]}}, float64(m.decisions[k]))
	}
	family(&b, "freqcap_rule_decisions_total", "counter", "Per-rule verdicts of consuming decisions (take, reserve, wait), by policy, rule and outcome.")
	for _, k := range sortedKeys3(m.rules) {
		sample(&b, "freqcap_rule_decisions_total", [][2]string{{"policy", k[0]}, {"rule", k[1]}, {"outcome", k[2]}}, float64(m.rules[k]))
	}
	family(&b, "freqcap_degraded_decisions_total", "counter", "Decisions answered by a fail-open policy because the backend failed.")
	deg := make([][2]string, 0, len(m.degraded))
	for k := range m.degraded {
		deg = append(deg, k)
	}
	sort.Slice(deg, func(i, j int) bool { return deg[i][0]+"\x00"+deg[i][1] < deg[j][0]+"\x00"+deg[j][1] })
	for _, k := range deg {
		sample(&b, "freqcap_degraded_decisions_total", [][2]string{{"policy", k[0]}, {"op", k[1]}}, float64(m.degraded[k]))
	}
	family(&b, "freqcap_backend_latency_seconds", "histogram", "Latency of backend calls made for decisions, by operation.")
	ops := make([]string, 0, len(m.latency))
	for op := range m.latency {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		h := m.latency[op]
		var cum uint64
		for i, ub := range latencyBuckets {
			cum += h.counts[i]
			sample(&b, "freqcap_backend_latency_seconds_bucket", [][2]string{{"op", op}, {"le", formatFloat(ub)}}, float64(cum))
		}
		cum += h.counts[len(latencyBuckets)]
		sample(&b, "freqcap_backend_latency_seconds_bucket", [][2]string{{"op", op}, {"le", "+Inf"}}, float64(cum))
		sample(&b, "freqcap_backend_latency_seconds_sum", [][2]string{{"op", op}}, h.sum)
		sample(&b, "freqcap_backend_latency_seconds_count", [][2]string{{"op", op}}, float64(h.n))
	}
	family(&b, "freqcap_console_start_time_seconds", "gauge", "When the console started, in Unix seconds.")
	sample(&b, "freqcap_console_start_time_seconds", nil, float64(m.start.UnixNano())/1e9)
	m.mu.Unlock()
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

func sortedKeys3(m map[[3]string]uint64) [][3]string {
	keys := make([][3]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		if a[1] != b[1] {
			return a[1] < b[1]
		}
		return a[2] < b[2]
	})
	return keys
}

func family(b *strings.Builder, name, typ, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func sample(b *strings.Builder, name string, labels [][2]string, v float64) {
	b.WriteString(name)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(l[0])
			b.WriteString(`="`)
			b.WriteString(labelEscaper.Replace(l[1]))
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(formatFloat(v))
	b.WriteByte('\n')
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func (s *Server) metricsHandler(c echo.Context) error {
	c.Response().Header().Set(echo.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
	c.Response().WriteHeader(http.StatusOK)
	_, err := s.metrics.WriteTo(c.Response())
	return err
}
