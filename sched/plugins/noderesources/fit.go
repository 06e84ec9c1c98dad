// Package noderesources holds the resource plugins, as Kubernetes' package of the same name:
// NodeResourcesFit (filter: the pod's requests fit what is left of the node's allocatable) and
// NodeResourcesLeastAllocated (score: prefer the emptiest node).
//
// "What is left" is allocatable minus the requests the binder committed (the alloc record) minus the
// pods this scheduler assumed but the alloc record does not show yet; the cache folds both into
// NodeInfo.Requested.
//
// As kube-scheduler v1.37, a rejection is UnschedulableAndUnresolvable when the pod asks for more of
// some resource than the node's whole allocatable: no preemption can make room there, and the
// preemption message counts the node as "Preemption is not helpful for scheduling". Running out of
// pod slots stays resolvable.
package noderesources

import (
	"sync"

	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/sched/framework"
)

// FitName is the name of the filter plugin.
const FitName = "NodeResourcesFit"

// Reasons, as Kubernetes prints them; extended resources get "Insufficient <name>".
const (
	ErrReasonTooManyPods           = "Too many pods"
	ErrReasonInsufficientCPU       = "Insufficient cpu"
	ErrReasonInsufficientMemory    = "Insufficient memory"
	ErrReasonInsufficientEphemeral = "Insufficient ephemeral-storage"
	insufficientPrefix             = "Insufficient "
)

// Reason returns the filter reason for one resource name reported by podutil.Insufficient.
func Reason(resource string) string {
	switch resource {
	case podutil.Pods:
		return ErrReasonTooManyPods
	case podutil.CPU:
		return ErrReasonInsufficientCPU
	case podutil.Memory:
		return ErrReasonInsufficientMemory
	case podutil.EphemeralStorage:
		return ErrReasonInsufficientEphemeral
	}
	return insufficientPrefix + resource
}

// Fit is the NodeResourcesFit filter.
type Fit struct {
	// single caches the one-reason statuses (the common case) so a full node costs no allocation.
	mu     sync.RWMutex
	single map[singleKey]*framework.Status
}

type singleKey struct {
	resource     string
	unresolvable bool
}

var _ framework.FilterPlugin = &Fit{}

// NewFit returns the filter.
func NewFit() *Fit { return &Fit{single: map[singleKey]*framework.Status{}} }

// Name implements framework.Plugin.
func (*Fit) Name() string { return FitName }

// Filter rejects the node when any requested resource exceeds what is left: Unschedulable (removing
// pods would help), or UnschedulableAndUnresolvable when a request exceeds the node's allocatable.
func (f *Fit) Filter(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	short := framework.Insufficient(&node.Allocatable, &node.Requested, &pod.Request)
	switch len(short) {
	case 0:
		return nil
	case 1:
		return f.singleStatus(singleKey{short[0], exceedsAllocatable(short[0], &node.Allocatable, &pod.Request)})
	}
	code := framework.Unschedulable
	reasons := make([]string, len(short))
	for i, r := range short {
		reasons[i] = Reason(r)
		if exceedsAllocatable(r, &node.Allocatable, &pod.Request) {
			code = framework.UnschedulableAndUnresolvable
		}
	}
	return framework.NewStatus(code, reasons...)
}

// exceedsAllocatable reports whether the pod's request for resource (a name from Insufficient) is
// more than the node's whole allocatable, so that no eviction could make it fit.
func exceedsAllocatable(resource string, alloc, req *framework.Resource) bool {
	switch resource {
	case podutil.Pods:
		return false
	case podutil.CPU:
		return req.MilliCPU > alloc.MilliCPU
	case podutil.Memory:
		return req.Memory > alloc.Memory
	case podutil.EphemeralStorage:
		return req.EphemeralStorage > alloc.EphemeralStorage
	}
	return req.Scalar[resource] > alloc.Scalar[resource]
}

// maxCached bounds the status cache: resource names come from pods, so there could be many.
const maxCached = 256

func (f *Fit) singleStatus(k singleKey) *framework.Status {
	f.mu.RLock()
	st, ok := f.single[k]
	f.mu.RUnlock()
	if ok {
		return st
	}
	code := framework.Unschedulable
	if k.unresolvable {
		code = framework.UnschedulableAndUnresolvable
	}
	st = framework.NewStatus(code, Reason(k.resource))
	f.mu.Lock()
	if len(f.single) < maxCached {
		f.single[k] = st
	}
	f.mu.Unlock()
	return st
}
