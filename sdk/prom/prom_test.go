package prom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/prom"
)

type failing struct{}

func (failing) Take(context.Context, driver.Request) (driver.Result, error) {
	return driver.Result{}, errors.New("down")
}

// TestCollector: a service's own registry exposes its decisions, per
// policy, op, outcome and rule, with no subject label.
func TestCollector(t *testing.T) {
	ctx := context.Background()
	col := prom.New(&prom.Options{ConstLabels: prometheus.Labels{"service": "test"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	lim := sdk.New(memory.New(nil), sdk.WithObserver(col.Observe))
	p, err := sdk.NewPolicy("msg", []sdk.Rule{
		sdk.FixedWindow("per-min", 2, time.Minute).By("user"),
		sdk.FixedWindow("per-day", 10, 24*time.Hour).By("user"),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "secret-user-id"}
	for range 3 {
		if _, err := lim.Allow(ctx, p, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lim.Peek(ctx, p, sdk.Attempt{Subject: s}); err != nil {
		t.Fatal(err)
	}
	open, err := sdk.NewPolicy("open", []sdk.Rule{sdk.FixedWindow("r", 1, time.Minute).By("user")}, sdk.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	down := sdk.New(failing{}, sdk.WithObserver(col.Observe))
	if d, err := down.Allow(ctx, open, s); err != nil || !d.Degraded {
		t.Fatalf("Allow(down, fail open) = %+v, %v", d, err)
	}

	want := `
# HELP freqcap_decisions_total Decisions made by the limiter, by policy, operation and outcome (allowed, denied, error).
# TYPE freqcap_decisions_total counter
freqcap_decisions_total{op="peek",outcome="denied",policy="msg",service="test"} 1
freqcap_decisions_total{op="take",outcome="allowed",policy="msg",service="test"} 2
freqcap_decisions_total{op="take",outcome="allowed",policy="open",service="test"} 1
freqcap_decisions_total{op="take",outcome="denied",policy="msg",service="test"} 1
# HELP freqcap_degraded_decisions_total Decisions answered by a fail-open policy because the backend failed.
# TYPE freqcap_degraded_decisions_total counter
freqcap_degraded_decisions_total{op="take",policy="open",service="test"} 1
# HELP freqcap_rule_decisions_total Per-rule verdicts of consuming decisions (take, reserve, wait), by policy, rule and outcome.
# TYPE freqcap_rule_decisions_total counter
freqcap_rule_decisions_total{outcome="allowed",policy="msg",rule="per-day",service="test"} 3
freqcap_rule_decisions_total{outcome="allowed",policy="msg",rule="per-min",service="test"} 2
freqcap_rule_decisions_total{outcome="denied",policy="msg",rule="per-min",service="test"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), prom.DecisionsTotal, prom.RuleDecisionsTotal, prom.DegradedDecisionsTotal); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(col, prom.BackendLatencySeconds); n != 2 {
		t.Errorf("latency series = %d, want 2 (take, peek)", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "secret-user-id") {
					t.Errorf("%s has a subject in label %s", mf.GetName(), l.GetName())
				}
			}
		}
	}
}
