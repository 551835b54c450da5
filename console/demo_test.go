package console

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

func TestDemoProducesDenials(t *testing.T) {
	pols, err := seed.Policies()
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
