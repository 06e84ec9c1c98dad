package fake

import (
	"hash/fnv"
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

var unitSink float64

// unit is FNV-1a of the uid, a zero byte, the name and the epoch's bytes, as hash/fnv makes it.
func TestUnitIsFNV(t *testing.T) {
	for _, tc := range []struct {
		uid, name string
		epoch     int64
	}{{"", "", 0}, {"6f1c2e8a-3b5d-4c7e-9f0a-1b2c3d4e5f60", "app", 1796470000}, {"u", "side-car", -1}} {
		h := fnv.New64a()
		_, _ = h.Write([]byte(tc.uid))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(tc.name))
		var b [8]byte
		for i := range b {
			b[i] = byte(tc.epoch >> (8 * i))
		}
		_, _ = h.Write(b[:])
		want := float64(h.Sum64()>>11) / (1 << 53)
		if got := unit(tc.uid, tc.name, tc.epoch); got != want {
			t.Errorf("unit(%q, %q, %d) = %v, want %v", tc.uid, tc.name, tc.epoch, got, want)
		}
	}
	if a := testing.AllocsPerRun(100, func() { unitSink = unit("uid", "app", 7) }); a != 0 {
		t.Errorf("%.0f allocations", a)
	}
}
