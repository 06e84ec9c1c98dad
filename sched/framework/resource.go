package framework

import (
	"maps"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Resource is an amount of resources held by value inside NodeInfo and PodInfo, so the filters and
// scores that run for hundreds of nodes per pod read plain fields instead of chasing a pointer to a
// protobuf message per node: the memory accesses, not the arithmetic, are what such a loop costs.
type Resource struct {
	MilliCPU, Memory, EphemeralStorage, Pods int64
	// Scalar holds extended resources (example.com/gpu); nil when there are none. Shared between
	// copies: Add and Sub replace it rather than write into it.
	Scalar map[string]int64
}

// ResourceOf converts r (nil: zero).
func ResourceOf(r *pb.Resources) Resource {
	out := Resource{MilliCPU: r.GetMilliCpu(), Memory: r.GetMemory(), EphemeralStorage: r.GetEphemeralStorage(), Pods: r.GetPods()}
	if s := r.GetScalar(); len(s) > 0 {
		out.Scalar = maps.Clone(s)
	}
	return out
}

// Proto converts r back (tests and messages).
func (r Resource) Proto() *pb.Resources {
	out := &pb.Resources{MilliCpu: r.MilliCPU, Memory: r.Memory, EphemeralStorage: r.EphemeralStorage, Pods: r.Pods}
	if len(r.Scalar) > 0 {
		out.Scalar = maps.Clone(r.Scalar)
	}
	return out
}

// Add adds o to r.
func (r *Resource) Add(o Resource) { r.add(o, 1) }

// Sub subtracts o from r.
func (r *Resource) Sub(o Resource) { r.add(o, -1) }

func (r *Resource) add(o Resource, sign int64) {
	r.MilliCPU += sign * o.MilliCPU
	r.Memory += sign * o.Memory
	r.EphemeralStorage += sign * o.EphemeralStorage
	r.Pods += sign * o.Pods
	if len(o.Scalar) == 0 {
		return
	}
	s := make(map[string]int64, len(r.Scalar)+len(o.Scalar))
	maps.Copy(s, r.Scalar)
	for k, v := range o.Scalar {
		if s[k] += sign * v; s[k] == 0 {
			delete(s, k)
		}
	}
	r.Scalar = s
}

// Insufficient names the resources (podutil's names) for which req does not fit in alloc after used,
// in podutil.Insufficient's order (a copy on values: the filter must not allocate for a full node,
// which converting to call podutil would); nil when it fits. A zero request always fits, and ephemeral
// storage is checked only on nodes that report it.
func Insufficient(alloc, used, req *Resource) []string {
	// The common case, everything fits, without building anything.
	if (req.Pods == 0 || used.Pods+req.Pods <= alloc.Pods) &&
		(req.MilliCPU == 0 || used.MilliCPU+req.MilliCPU <= alloc.MilliCPU) &&
		(req.Memory == 0 || used.Memory+req.Memory <= alloc.Memory) &&
		(req.EphemeralStorage == 0 || alloc.EphemeralStorage == 0 || used.EphemeralStorage+req.EphemeralStorage <= alloc.EphemeralStorage) &&
		len(req.Scalar) == 0 {
		return nil
	}
	var out []string
	if req.Pods > 0 && used.Pods+req.Pods > alloc.Pods {
		out = append(out, podutil.Pods)
	}
	if req.MilliCPU > 0 && used.MilliCPU+req.MilliCPU > alloc.MilliCPU {
		out = append(out, podutil.CPU)
	}
	if req.Memory > 0 && used.Memory+req.Memory > alloc.Memory {
		out = append(out, podutil.Memory)
	}
	if req.EphemeralStorage > 0 && alloc.EphemeralStorage > 0 && used.EphemeralStorage+req.EphemeralStorage > alloc.EphemeralStorage {
		out = append(out, podutil.EphemeralStorage)
	}
	for k, v := range req.Scalar {
		if v > 0 && used.Scalar[k]+v > alloc.Scalar[k] {
			out = append(out, k)
		}
	}
	return out
}
