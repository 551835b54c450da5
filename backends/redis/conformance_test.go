package redis

import (
	"testing"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/driver"
)

// runConformance runs the suite on b against the server's own clock.
func runConformance(t *testing.T, b *Backend) {
	t.Helper()
	conformance.Run(t, conformance.Harness{NewBackend: func(*testing.T) driver.Backend { return b }})
}

func TestConformanceStandalone(t *testing.T) {
	b, _ := standalone(t)
	runConformance(t, b)
}

func TestConformanceCluster(t *testing.T) {
	b, _ := cluster(t)
	runConformance(t, b)
}

// TestConformanceCoalesced: the suite's decisions, coalesced with
// whatever runs at once, mean the same (Options.Coalesce).
func TestConformanceCoalesced(t *testing.T) {
	b, _ := coalescing(t, redistest.Standalone(t), 2)
	runConformance(t, b)
}
