package cri

import (
	"errors"
	"testing"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/typeurl/v2"
)

func TestCgroupUsage(t *testing.T) {
	tests := []struct {
		name             string
		metrics          any
		wantCPU, wantMem uint64
		wantErr          error
	}{
		{name: "cgroup v1", metrics: &v1.Metrics{
			CPU:    &v1.CPUStat{Usage: &v1.CPUUsage{Total: 2_500_000_000}},
			Memory: &v1.MemoryStat{Usage: &v1.MemoryEntry{Usage: 300 << 20}, TotalInactiveFile: 100 << 20},
		}, wantCPU: 2_500_000_000, wantMem: 200 << 20},
		{name: "cgroup v2", metrics: &v2.Metrics{
			CPU:    &v2.CPUStat{UsageUsec: 1_500_000},
			Memory: &v2.MemoryStat{Usage: 64 << 20, InactiveFile: 16 << 20},
		}, wantCPU: 1_500_000_000, wantMem: 48 << 20},
		{name: "inactive above usage", metrics: &v2.Metrics{
			Memory: &v2.MemoryStat{Usage: 1 << 20, InactiveFile: 2 << 20},
		}},
		{name: "empty v2", metrics: &v2.Metrics{}},
		{name: "something else", metrics: "cpu 1", wantErr: ErrMetrics},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.metrics
			if m, ok := tt.metrics.(typeurl.Any); ok {
				// Through the wire form containerd's task service sends.
				any, err := typeurl.MarshalAny(m)
				if err != nil {
					t.Fatal(err)
				}
				if data, err = typeurl.UnmarshalAny(any); err != nil {
					t.Fatal(err)
				}
			}
			cpu, mem, err := cgroupUsage(data)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if cpu != tt.wantCPU || mem != tt.wantMem {
				t.Errorf("cpu %d mem %d, want %d %d", cpu, mem, tt.wantCPU, tt.wantMem)
			}
		})
	}
}
