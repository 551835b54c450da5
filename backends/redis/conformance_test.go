package redis

import (
	"testing"

	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/driver"
)

// implemented lists the conformance features this backend has.
const implemented = conformance.AllFeatures

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
