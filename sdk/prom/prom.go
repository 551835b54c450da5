// Package prom exports a Limiter's decisions as Prometheus metrics
// (github.com/prometheus/client_golang), with the series of the freqcap
// console's /metrics, so that a service's dashboards and the console's
// read alike. It lives apart from package sdk so that the sdk does not
// depend on client_golang.
//
//	col := prom.New(nil)
//	reg.MustRegister(col) // the service's own registry
//	lim := sdk.New(backend, sdk.WithObserver(col.Observe))
//
// Labels name policies, operations, outcomes and rules, never subjects,
// so the number of series is bounded by the policies and rules the
// service runs.
package prom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/freqcap/freqcap/sdk"
)

// The metric names, the same as the console's /metrics.
const (
	// DecisionsTotal counts decisions by policy, op ("take", "peek",
	// "reserve", "wait", "inspect") and outcome ("allowed", "denied",
	// "error"; a degraded fail-open answer is "allowed").
	DecisionsTotal = "freqcap_decisions_total"
	// RuleDecisionsTotal counts each rule's verdict ("allowed", "denied")
	// in consuming decisions (take, reserve, wait) by policy and rule.
	RuleDecisionsTotal = "freqcap_rule_decisions_total"
	// DegradedDecisionsTotal counts fail-open answers to backend
	// failures by policy and op.
	DegradedDecisionsTotal = "freqcap_degraded_decisions_total"
	// BackendLatencySeconds is the histogram of backend call latency by
	// op.
	BackendLatencySeconds = "freqcap_backend_latency_seconds"
)

// LatencyBuckets are the latency histogram's upper bounds, in seconds
// (the console's).
var LatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// Options configures a Collector. Nil means defaults.
type Options struct {
	// ConstLabels are added to every series (e.g. {"service": "push"}).
	ConstLabels prometheus.Labels
	// Buckets are the latency histogram's bounds (default LatencyBuckets).
	Buckets []float64
}

// Collector is a prometheus.Collector of decisions. Feed it by passing
// Observe to sdk.WithObserver, and register it in a registry. It is safe
// for concurrent use; the zero value is not usable, call New.
type Collector struct {
	decisions *prometheus.CounterVec
	rules     *prometheus.CounterVec
	degraded  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector with no series yet.
func New(opts *Options) *Collector {
	var o Options
	if opts != nil {
		o = *opts
	}
	if len(o.Buckets) == 0 {
		o.Buckets = LatencyBuckets
	}
	return &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: DecisionsTotal, ConstLabels: o.ConstLabels,
			Help: "Decisions made by the limiter, by policy, operation and outcome (allowed, denied, error)."},
			[]string{"policy", "op", "outcome"}),
		rules: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RuleDecisionsTotal, ConstLabels: o.ConstLabels,
			Help: "Per-rule verdicts of consuming decisions (take, reserve, wait), by policy, rule and outcome."},
			[]string{"policy", "rule", "outcome"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: DegradedDecisionsTotal, ConstLabels: o.ConstLabels,
			Help: "Decisions answered by a fail-open policy because the backend failed."},
			[]string{"policy", "op"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: BackendLatencySeconds, ConstLabels: o.ConstLabels,
			Help: "Latency of backend calls made for decisions, by operation.", Buckets: o.Buckets},
			[]string{"op"}),
	}
}

// Consuming reports whether op takes units (take, reserve, wait): the
// operations counted per rule.
func Consuming(op string) bool { return op == "take" || op == "reserve" || op == "wait" }

// Outcome is an event's outcome label: "error" for a failure that was
// not answered fail-open, else "allowed" or "denied".
func Outcome(ev sdk.Event) string {
	switch {
	case ev.Err != nil && !ev.Decision.Degraded:
		return "error"
	case ev.Decision.Allowed:
		return "allowed"
	}
	return "denied"
}

// Observe counts one decision. Pass it to sdk.WithObserver.
func (c *Collector) Observe(ev sdk.Event) {
	outcome := Outcome(ev)
	c.decisions.WithLabelValues(ev.Policy, ev.Op, outcome).Inc()
	if ev.Decision.Degraded {
		c.degraded.WithLabelValues(ev.Policy, ev.Op).Inc()
	}
	c.latency.WithLabelValues(ev.Op).Observe(ev.Latency.Seconds())
	if !Consuming(ev.Op) || outcome == "error" {
		return
	}
	for _, rd := range ev.Decision.Rules {
		o := "denied"
		if rd.Allowed {
			o = "allowed"
		}
		c.rules.WithLabelValues(ev.Policy, rd.Rule, o).Inc()
	}
}

// Describe sends the descriptors of the four metrics.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.rules.Describe(ch)
	c.degraded.Describe(ch)
	c.latency.Describe(ch)
}

// Collect sends the current series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.rules.Collect(ch)
	c.degraded.Collect(ch)
	c.latency.Collect(ch)
}
