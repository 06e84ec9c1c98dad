package agent

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

type resources = pb.Resources

// capacity is the node's capacity as Kubernetes quantities; allocatable is the same (no reservations).
func capacity(cfg Config) map[string]string {
	c := map[string]string{
		podutil.CPU:              cfg.CPU,
		podutil.Memory:           cfg.Memory,
		podutil.Pods:             strconv.Itoa(cfg.MaxPods),
		podutil.EphemeralStorage: cfg.Storage,
	}
	for k, v := range cfg.Extended {
		if _, builtin := c[k]; !builtin {
			c[k] = v
		}
	}
	return c
}

func parseCapacity(cfg Config) (*resources, error) {
	for name, q := range capacity(cfg) {
		if _, err := resource.ParseQuantity(q); err != nil {
			return nil, fmt.Errorf("%w: %s %q: %v", ErrConfig, name, q, err)
		}
	}
	return podutil.Parse(capacity(cfg)), nil
}

// admitLocked is the kubelet's resource admission: the requests of the pods this node runs plus the
// new pod's must fit the node's allocatable. It returns the rejection reason and message, or "" after
// counting w's requests as used: the caller then adds w to a.pods. Called with a.mu held.
func (a *Agent) admitLocked(w *podWorker) (reason, message string) {
	pod := w.pod
	if reason, message := a.admitPrivileged(pod); reason != "" {
		return reason, message
	}
	used := a.usedLocked()
	req := podutil.PodRequests(pod)
	short := podutil.Insufficient(a.alloc, used, req)
	if len(short) == 0 {
		w.requests = req
		podutil.Add(used, req)
		return "", ""
	}
	name := short[0]
	var r, u, c int64
	switch name {
	case podutil.CPU:
		r, u, c = req.GetMilliCpu(), used.GetMilliCpu(), a.alloc.GetMilliCpu()
	case podutil.Memory:
		r, u, c = req.GetMemory(), used.GetMemory(), a.alloc.GetMemory()
	case podutil.Pods:
		r, u, c = req.GetPods(), used.GetPods(), a.alloc.GetPods()
	case podutil.EphemeralStorage:
		r, u, c = req.GetEphemeralStorage(), used.GetEphemeralStorage(), a.alloc.GetEphemeralStorage()
	default:
		r, u, c = req.GetScalar()[name], used.GetScalar()[name], a.alloc.GetScalar()[name]
	}
	return "OutOf" + name, fmt.Sprintf("Pod was rejected: Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", name, r, u, c)
}

// usedLocked is the sum of the requests of the active pods, kept between admissions so that admitting
// a pod costs the same on a node with 110 pods as on an empty one. It is summed again after anything
// that may have stopped a pod counting (usedStale). Called with a.mu held.
func (a *Agent) usedLocked() *resources {
	if a.usedStale.Swap(false) || a.used == nil {
		used := &resources{}
		for _, w := range a.pods {
			if w.active() {
				if w.requests == nil {
					w.requests = podutil.PodRequests(w.pod)
				}
				podutil.Add(used, w.requests)
			}
		}
		a.used = used
	}
	return a.used
}

// recount marks the admission sum stale: a pod finished or left a.pods. Safe with any lock held.
func (a *Agent) recount() { a.usedStale.Store(true) }
