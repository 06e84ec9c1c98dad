package framework

import (
	"errors"
	"fmt"
)

// ErrStateNotFound is returned by CycleState.Read when a key was never written in this cycle
// (typically: the PreFilter that writes it did not run).
var ErrStateNotFound = errors.New("cycle state not found")

// StateKey names one entry of the cycle state; by convention "PreFilter" + plugin name.
type StateKey string

// CycleState carries data computed once per scheduling cycle (by PreFilter) to the per-node
// extension points. A cycle runs on one goroutine, so it is not locked; it is reset and reused
// between cycles, so plugins must not keep references to it.
type CycleState struct {
	data map[StateKey]any
	snap *Snapshot
}

// NewCycleState returns an empty state.
func NewCycleState() *CycleState { return &CycleState{data: make(map[StateKey]any, 8)} }

// Write stores v under k (store pointers: boxing them does not allocate).
func (c *CycleState) Write(k StateKey, v any) { c.data[k] = v }

// Read returns what was written under k.
func (c *CycleState) Read(k StateKey) (any, error) {
	v, ok := c.data[k]
	if !ok {
		return nil, fmt.Errorf("%s: %w", k, ErrStateNotFound)
	}
	return v, nil
}

// ReadState returns what was written under k as a T: an Error status when it is missing or of another
// type (a plugin reading what its own PreFilter or PreScore wrote).
func ReadState[T any](c *CycleState, k StateKey) (T, *Status) {
	var zero T
	v, err := c.Read(k)
	if err != nil {
		return zero, AsStatus(err)
	}
	t, ok := v.(T)
	if !ok {
		return zero, NewStatus(Error, fmt.Sprintf("%s: unexpected state type %T", k, v))
	}
	return t, nil
}

// StateData is a cycle-state value that PreFilter extensions (AddPod/RemovePod) change: Clone must
// return a deep enough copy that changing it leaves the original alone. Values that are not StateData
// are shared by clones and must be treated as immutable.
type StateData interface {
	Clone() StateData
}

// Clone copies the state for a what-if (preemption filters node views without some pods on a clone
// that PreFilter extensions update), cloning every StateData value.
func (c *CycleState) Clone() *CycleState {
	out := &CycleState{data: make(map[StateKey]any, len(c.data)), snap: c.snap}
	for k, v := range c.data {
		if sd, ok := v.(StateData); ok {
			v = sd.Clone()
		}
		out.data[k] = v
	}
	return out
}

// Reset forgets everything, keeping the map's storage for the next cycle.
func (c *CycleState) Reset() { clear(c.data); c.snap = nil }

// SetSnapshot records the snapshot the cycle runs on (the scheduling algorithm does, before PreFilter).
func (c *CycleState) SetSnapshot(s *Snapshot) { c.snap = s }

// Snapshot is the cycle's snapshot, for plugins that look beyond the node at hand (inter-pod affinity
// and topology spread count pods on every node, as kube-scheduler's SnapshotSharedLister). It is
// never nil: a state without one returns an empty snapshot.
func (c *CycleState) Snapshot() *Snapshot {
	if c.snap == nil {
		return emptySnapshot
	}
	return c.snap
}

var emptySnapshot = &Snapshot{}
