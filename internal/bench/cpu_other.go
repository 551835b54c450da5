//go:build !unix

package bench

// clientCPU reports no figure where getrusage is missing.
func clientCPU() float64 { return -1 }
