//go:build !linux

package cri

import (
	"fmt"
	"runtime"
)

// MachineCapacity is this machine's cpu and memory; only Linux can run real pods.
func MachineCapacity() (cpu, memory string, err error) {
	return "", "", fmt.Errorf("%w: real pods need Linux, not %s", ErrUnavailable, runtime.GOOS)
}
