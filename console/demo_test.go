package console

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
)

func TestDemoProducesDenials(t *testing.T) {
	pols, err := SeedPolicies()
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	lim := sdk.New(memory.New(nil), sdk.WithObserver(m.Observe))
	d := StartDemo(lim, pols, DemoOptions{Rate: 500})
	defer d.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := m.Rates("push")
		if r.Allowed > 0 && r.Denied > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no denials from demo traffic within 10s: %+v", r)
		}
		time.Sleep(20 * time.Millisecond) // polling, not waiting for time to pass
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	// Closed: no more decisions, and a second Close is fine.
	before := m.Rates("push")
	if err := d.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	ins, err := lim.Inspect(context.Background(), pols[0], sdk.Subject{"user": DemoUsers[0]})
	if err != nil || len(ins.Denials) == 0 {
		t.Errorf("hot demo user has no denial trail: %+v, %v", ins, err)
	}
	if after := m.Rates("push"); after.Allowed != before.Allowed || after.Denied != before.Denied {
		t.Errorf("decisions after Close: before %+v, after %+v", before, after)
	}
}

// TestSeedMatchesTestdata keeps the embedded seed policies in step with
// the repository's testdata/policies.yaml (not embeddable from here).
func TestSeedMatchesTestdata(t *testing.T) {
	want, err := sdk.LoadPolicyFile("../testdata/policies.yaml")
	if err != nil {
		t.Fatalf("reading ../testdata/policies.yaml to compare with: %v", err)
	}
	got, err := SeedPolicies()
	if err != nil {
		t.Fatal(err)
	}
	describe := func(ps []*sdk.Policy) string {
		var b strings.Builder
		for _, p := range ps {
			fmt.Fprintf(&b, "%s open=%v\n", p.Name(), p.FailOpen())
			for _, r := range p.Rules() {
				loc := ""
				if r.Location != nil {
					loc = r.Location.String()
				}
				fmt.Fprintf(&b, "  %s %v %d %v %v %d %d %v %s\n", r.Name, r.Algorithm, r.Limit, r.Window, r.Dimensions, r.SubWindows, r.Burst, r.Calendar, loc)
			}
		}
		return b.String()
	}
	if g, w := describe(got), describe(want); g != w {
		t.Errorf("embedded seed policies differ from testdata/policies.yaml:\n%s\nwant:\n%s", g, w)
	}
}
