//go:build unix

package bench

import "syscall"

// clientCPU returns this process's CPU time (user + system, seconds, every
// thread): the bench client's share of the machine, beside serverCPU's.
func clientCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
