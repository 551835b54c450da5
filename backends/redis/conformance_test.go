package redis

import (
	"testing"

	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/driver"
)

// implemented lists the conformance features this backend has. Batches
// (driver.Batcher) are not implemented yet.
const implemented = conformance.AllFeatures &^ conformance.Batch

func TestConformanceStandalone(t *testing.T) {
	b, _ := standalone(t)
	conformance.Run(t, conformance.Harness{
		NewBackend: func(t *testing.T) driver.Backend { return b },
		Clock:      nil, // the server's clock
		Features:   implemented,
	})
}

func TestConformanceCluster(t *testing.T) {
	b, _ := cluster(t)
	conformance.Run(t, conformance.Harness{
		NewBackend: func(t *testing.T) driver.Backend { return b },
		Clock:      nil,
		Features:   implemented,
	})
}
