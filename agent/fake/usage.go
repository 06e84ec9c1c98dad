package fake

import (
	"hash/fnv"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

var _ agent.UsageEstimator = (*Runtime)(nil)

// usageEpoch is how long an estimate holds before it drifts to the next one.
const usageEpoch = 15 * time.Second

// EstimateUsage implements agent.UsageEstimator: a share of the container's requests (30 to 80 % of
// its cpu, 40 to 90 % of its memory), a few millicores and mebibytes when it requests nothing, never
// over its limits. The share is fixed per container and drifts by ±10 % from one epoch to the next,
// so that repeated reads look alive without any state kept.
func (r *Runtime) EstimateUsage(pod *pb.Pod, c *pb.Container, now time.Time) (cpuNanoCores, memoryBytes uint64) {
	base := unit(pod.GetMetadata().GetUid(), c.GetName(), 0)
	drift := 0.9 + 0.2*unit(pod.GetMetadata().GetUid(), c.GetName(), now.UnixNano()/int64(usageEpoch))
	req := podutil.Parse(c.GetResources().GetRequests())
	lim := podutil.Parse(c.GetResources().GetLimits())
	cpuMilli := 1 + 4*base
	if req.GetMilliCpu() > 0 {
		cpuMilli = float64(req.GetMilliCpu()) * (0.3 + 0.5*base)
	}
	mem := float64(4<<20) + float64(12<<20)*base
	if req.GetMemory() > 0 {
		mem = float64(req.GetMemory()) * (0.4 + 0.5*base)
	}
	cpuMilli, mem = cpuMilli*drift, mem*drift
	if l := lim.GetMilliCpu(); l > 0 {
		cpuMilli = min(cpuMilli, float64(l))
	}
	if l := lim.GetMemory(); l > 0 {
		mem = min(mem, float64(l))
	}
	return uint64(cpuMilli * 1e6), uint64(mem)
}

// unit is a number in [0, 1) fixed by its inputs.
func unit(uid, name string, epoch int64) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(name))
	var b [8]byte
	for i := range b {
		b[i] = byte(epoch >> (8 * i))
	}
	_, _ = h.Write(b[:])
	return float64(h.Sum64()>>11) / (1 << 53)
}
