// Package noderesources holds the resource plugins, as Kubernetes' package of the same name:
// NodeResourcesFit (filter: the pod's requests fit what is left of the node's allocatable) and
// NodeResourcesLeastAllocated (score: prefer the emptiest node).
//
// "What is left" is allocatable minus the requests the binder committed (the alloc record) minus the
// pods this scheduler assumed but the alloc record does not show yet; the cache folds both into
// NodeInfo.Requested.
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
	single map[string]*framework.Status
}

var _ framework.FilterPlugin = &Fit{}

// NewFit returns the filter.
func NewFit() *Fit { return &Fit{single: map[string]*framework.Status{}} }

// Name implements framework.Plugin.
func (*Fit) Name() string { return FitName }

// Filter rejects the node when any requested resource exceeds what is left (Unschedulable: removing
// pods would help).
func (f *Fit) Filter(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	short := framework.Insufficient(&node.Allocatable, &node.Requested, &pod.Request)
	switch len(short) {
	case 0:
		return nil
	case 1:
		return f.singleStatus(short[0])
	}
	reasons := make([]string, len(short))
	for i, r := range short {
		reasons[i] = Reason(r)
	}
	return framework.NewStatus(framework.Unschedulable, reasons...)
}

// maxCached bounds the status cache: resource names come from pods, so there could be many.
const maxCached = 256

func (f *Fit) singleStatus(resource string) *framework.Status {
	f.mu.RLock()
	st, ok := f.single[resource]
	f.mu.RUnlock()
	if ok {
		return st
	}
	st = framework.NewStatus(framework.Unschedulable, Reason(resource))
	f.mu.Lock()
	if len(f.single) < maxCached {
		f.single[resource] = st
	}
	f.mu.Unlock()
	return st
}
