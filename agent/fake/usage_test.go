package fake

import (
	"testing"
	"time"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Estimates stay within the container's requests' plausible share and under its limits, and are the
// same for the same container and epoch.
func TestEstimateUsage(t *testing.T) {
	rt, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 0)
	tests := []struct {
		name           string
		req, lim       map[string]string
		minCPU, maxCPU uint64 // nanocores
		minMem, maxMem uint64
	}{
		{"requests", map[string]string{"cpu": "1", "memory": "1Gi"}, nil, 270e6, 880e6, 36 << 30 / 100, 99 << 30 / 100},
		{"nothing", nil, nil, 0.9e6, 5.5e6, 36 << 20 / 10, 176 << 20 / 10},
		{"limited", map[string]string{"cpu": "1", "memory": "1Gi"}, map[string]string{"cpu": "100m", "memory": "100Mi"}, 0, 100e6, 0, 100 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 50 {
				pod := &pb.Pod{Metadata: &pb.ObjectMeta{Uid: tt.name + string(rune('a'+i))}}
				c := &pb.Container{Name: "c", Resources: &pb.ResourceRequirements{Requests: tt.req, Limits: tt.lim}}
				cpu, mem := rt.EstimateUsage(pod, c, now)
				if cpu < tt.minCPU || cpu > tt.maxCPU || mem < tt.minMem || mem > tt.maxMem {
					t.Fatalf("pod %d: cpu %d mem %d, want cpu in [%d, %d], mem in [%d, %d]", i, cpu, mem, tt.minCPU, tt.maxCPU, tt.minMem, tt.maxMem)
				}
				if c2, m2 := rt.EstimateUsage(pod, c, now.Add(time.Second)); c2 != cpu || m2 != mem {
					t.Fatalf("pod %d: estimate changed within its epoch", i)
				}
			}
		})
	}
}
