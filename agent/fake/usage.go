package fake

import (
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

var _ agent.UsageEstimator = (*Runtime)(nil)

// usageEpoch is how long an estimate holds before it drifts to the next one.
const usageEpoch = 15 * time.Second

// usageBasis is what a container's estimates derive from, parsed once per sandbox.
type usageBasis struct {
	cpuMilli, mem        float64 // the steady share
	limitMilli, limitMem float64 // 0: unlimited
}

func basisOf(uid string, c *pb.Container) usageBasis {
	base := unit(uid, c.GetName(), 0)
	req := podutil.Parse(c.GetResources().GetRequests())
	lim := podutil.Parse(c.GetResources().GetLimits())
	b := usageBasis{cpuMilli: 1 + 4*base, mem: float64(4<<20) + float64(12<<20)*base,
		limitMilli: float64(lim.GetMilliCpu()), limitMem: float64(lim.GetMemory())}
	if req.GetMilliCpu() > 0 {
		b.cpuMilli = float64(req.GetMilliCpu()) * (0.3 + 0.5*base)
	}
	if req.GetMemory() > 0 {
		b.mem = float64(req.GetMemory()) * (0.4 + 0.5*base)
	}
	return b
}

// EstimateUsage implements agent.UsageEstimator: a share of the container's requests (30 to 80 % of
// its cpu, 40 to 90 % of its memory), a few millicores and mebibytes when it requests nothing, never
// over its limits. The share is fixed per container and drifts by ±10 % from one epoch to the next,
// so that repeated reads look alive; the requests are parsed once per sandbox.
func (r *Runtime) EstimateUsage(pod *pb.Pod, c *pb.Container, now time.Time) (cpuNanoCores, memoryBytes uint64) {
	uid := pod.GetMetadata().GetUid()
	r.mu.Lock()
	s := r.sandboxes[uid]
	b, ok := usageBasis{}, false
	if s != nil {
		b, ok = s.usage[c.GetName()]
	}
	r.mu.Unlock()
	if !ok {
		b = basisOf(uid, c)
		r.mu.Lock()
		if s != nil && r.sandboxes[uid] == s {
			if s.usage == nil {
				s.usage = map[string]usageBasis{}
			}
			s.usage[c.GetName()] = b
		}
		r.mu.Unlock()
	}
	drift := 0.9 + 0.2*unit(uid, c.GetName(), now.UnixNano()/int64(usageEpoch))
	cpuMilli, mem := b.cpuMilli*drift, b.mem*drift
	if b.limitMilli > 0 {
		cpuMilli = min(cpuMilli, b.limitMilli)
	}
	if b.limitMem > 0 {
		mem = min(mem, b.limitMem)
	}
	return uint64(cpuMilli * 1e6), uint64(mem)
}

// unit is a number in [0, 1) fixed by its inputs.
func unit(uid, name string, epoch int64) float64 {
	// FNV-1a over uid, a zero byte, name and the epoch's 8 bytes, inline: every running container is
	// estimated each interval, and a hash.Hash64 and its byte slices would be garbage each time.
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(uid); i++ {
		h = (h ^ uint64(uid[i])) * prime64
	}
	h *= prime64 // h ^ 0
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * prime64
	}
	for i := range 8 {
		h = (h ^ uint64(byte(epoch>>(8*i)))) * prime64
	}
	return float64(h>>11) / (1 << 53)
}
