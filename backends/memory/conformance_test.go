package memory_test

import (
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestConformance(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	conformance.Run(t, conformance.Harness{
		NewBackend: func(t *testing.T) driver.Backend { return memory.New(&memory.Options{Clock: clock}) },
		Clock:      clock,
	})
}

// TestConformanceRealClock runs the suite as against a server: the
// backend reads the real clock and the suite waits by polling it.
func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("real-clock run takes a few seconds")
	}
	b := memory.New(nil)
	conformance.Run(t, conformance.Harness{
		NewBackend: func(t *testing.T) driver.Backend { return b },
	})
}
