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
