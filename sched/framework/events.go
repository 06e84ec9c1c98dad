package framework

import "strings"

// Cluster events, as kube-scheduler's ClusterEvent: a resource and what happened to it, as far as the
// scheduler's watches can tell. A plugin that rejected a pod says which events may make it fit
// (EnqueueExtensions); the scheduler requeues a parked pod only on those.
//
//	nodes bucket:  Node Add (new node); Node Update{Allocatable,Label,Taint,Condition} (one entry may
//	               carry several); a removed node is no event (it frees nothing a pod could use)
//	alloc bucket:  AssignedPod Add (a record gained pods); AssignedPod Delete (a record lost a pod or a
//	               nomination, or a decision of this replica was refused: its room is free again)
//
// A cordon (spec.unschedulable) counts as UpdateNodeTaint, as in Kubernetes, where it is the
// node.kubernetes.io/unschedulable taint.

// EventResource is what changed.
type EventResource string

// Resources podbus's scheduler watches.
const (
	Node EventResource = "Node"
	// AssignedPod is a pod placed on a node (committed by the binder or assumed by a scheduler).
	AssignedPod EventResource = "AssignedPod"
	// WildCard matches every resource.
	WildCard EventResource = "*"
)

// ActionType is a set of changes (a bit mask).
type ActionType uint32

// Actions. UpdateNode* are the node updates a filter may care about.
const (
	Add ActionType = 1 << iota
	Delete
	UpdateNodeAllocatable
	UpdateNodeLabel
	UpdateNodeTaint
	UpdateNodeCondition

	UpdateNode = UpdateNodeAllocatable | UpdateNodeLabel | UpdateNodeTaint | UpdateNodeCondition
	All        = Add | Delete | UpdateNode
)

var actionNames = []string{"Add", "Delete", "UpdateNodeAllocatable", "UpdateNodeLabel", "UpdateNodeTaint", "UpdateNodeCondition"}

func (a ActionType) String() string {
	var parts []string
	for i, n := range actionNames {
		if a&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, "|")
}

// ClusterEvent is a change to the cluster: Resource and the actions that happened (or, in a
// registration, any of which is of interest).
type ClusterEvent struct {
	Resource   EventResource
	ActionType ActionType
}

// Match reports whether the event ev (a change that happened) is one registered by e.
func (e ClusterEvent) Match(ev ClusterEvent) bool {
	return (e.Resource == WildCard || ev.Resource == WildCard || e.Resource == ev.Resource) && e.ActionType&ev.ActionType != 0
}

// String is "Resource/Action|Action".
func (e ClusterEvent) String() string { return string(e.Resource) + "/" + e.ActionType.String() }

// EverythingEvent matches every event: a pod rejected by a plugin that registers none is requeued on
// any change, as kube-scheduler does.
var EverythingEvent = ClusterEvent{Resource: WildCard, ActionType: All}

// QueueingHintFn refines a registration: given the event and the pod's rejection (the reasons and the
// count of nodes each rejected it, as FitError.Reasons), it reports whether the event may help. nil
// means it always may.
type QueueingHintFn func(ev ClusterEvent, reasons map[string]int32) bool

// ClusterEventWithHint is one registration of EnqueueExtensions.
type ClusterEventWithHint struct {
	Event        ClusterEvent
	QueueingHint QueueingHintFn
}

// EnqueueExtensions is implemented by a plugin that can reject pods (PreFilter or Filter) and knows
// which cluster events may make such a pod schedulable again. A rejecting plugin without it is
// assumed to be helped by any event.
type EnqueueExtensions interface {
	Plugin
	EventsToRegister() []ClusterEventWithHint
}

// Requeue says which cluster events may make a rejected pod schedulable: the union of the events the
// rejecting plugins registered, filtered by their hints. The zero Requeue matches every event (the
// pod's rejection is not known, e.g. there were no nodes).
type Requeue struct {
	known   bool
	events  []ClusterEventWithHint
	reasons map[string]int32
}

// Match reports whether ev may make the pod schedulable.
func (r Requeue) Match(ev ClusterEvent) bool {
	if !r.known {
		return true
	}
	for _, e := range r.events {
		if e.Event.Match(ev) && (e.QueueingHint == nil || e.QueueingHint(ev, r.reasons)) {
			return true
		}
	}
	return false
}

// RequeueFor returns the events that may help a pod the framework rejected with fit (nil: any event).
func (f *Framework) RequeueFor(fit *FitError) Requeue {
	if fit == nil || len(fit.Plugins) == 0 {
		return Requeue{}
	}
	r := Requeue{known: true, reasons: fit.Reasons}
	for _, name := range fit.Plugins {
		evs, ok := f.events[name]
		if !ok {
			evs = []ClusterEventWithHint{{Event: EverythingEvent}}
		}
		r.events = append(r.events, evs...)
	}
	return r
}
