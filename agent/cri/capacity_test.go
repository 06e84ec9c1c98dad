package cri_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/podbus/podbus/agent/cri"
)

func TestMachineCapacity(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	cpu, mem, err := cri.MachineCapacity()
	if err != nil {
		t.Fatal(err)
	}
	if cpu != strconv.Itoa(runtime.NumCPU()) || !strings.HasSuffix(mem, "Ki") || len(mem) < 4 {
		t.Errorf("capacity %q cpu, %q memory", cpu, mem)
	}
}
