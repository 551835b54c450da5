//go:build !linux

package bench

import (
	"errors"
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return nil }

// procCPU needs /proc: the Envoy comparison measures services' CPU on
// Linux only.
func procCPU(int) (float64, error) {
	return 0, errors.New("a service's CPU time is read from /proc: the Envoy comparison runs on Linux")
}
