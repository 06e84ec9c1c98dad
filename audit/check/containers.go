package check

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/podbus/podbus/internal/podutil"
)

// Violation kinds of a node's runtime (Options.Containers), at the end.
const (
	// KindLeftover: a container the runtime still holds whose pod is deleted in the history, or not in
	// the store at all: the agent never removed it.
	KindLeftover = "container-left"
	// KindNotRunning: a pod stored as Running and Ready on the node whose container the runtime does
	// not run.
	KindNotRunning = "container-not-running"
)

// Container is one container a node's runtime holds, named as the agent labelled it.
type Container struct {
	ID      string
	PodUID  string
	Pod     string // namespace/name
	Name    string // the container's name in its pod
	Running bool   // its task runs
}

// ContainerLister lists the containers one node's runtime holds (containerd's, for a real node).
type ContainerLister interface {
	ListContainers(ctx context.Context) ([]Container, error)
}

// runtimes checks each node's containers against the last state of the history.
func (h *history) runtimes(ctx context.Context, listers map[string]ContainerLister) ([]Violation, error) {
	var out []Violation
	for _, node := range slices.Sorted(maps.Keys(listers)) {
		cs, err := listers[node].ListContainers(ctx)
		if err != nil {
			return out, fmt.Errorf("containers of node %s: %w", node, err)
		}
		out = append(out, h.containers(node, cs)...)
	}
	return out, nil
}

// containers names every container of a pod no longer stored, and every container of a Ready pod of
// node that does not run.
func (h *history) containers(node string, cs []Container) []Violation {
	stored := map[string]bool{} // uids
	for _, s := range h.keys {
		stored[s.uid] = true
	}
	running := map[[2]string]bool{} // pod uid, container name
	var out []Violation
	for _, c := range cs {
		if c.Running {
			running[[2]string{c.PodUID, c.Name}] = true
		}
		if stored[c.PodUID] {
			continue
		}
		v := Violation{Kind: KindLeftover, Pod: c.Pod, UID: c.PodUID, Node: node}
		state := "exited"
		if c.Running {
			state = "running"
		}
		if inc := h.uids[c.PodUID]; inc != nil {
			v.Pod, v.Revision = inc.key, inc.lastRev
			v.Detail = fmt.Sprintf("container %s (%s, %s) of a pod deleted from the store", c.Name, c.ID, state)
		} else {
			v.Detail = fmt.Sprintf("container %s (%s, %s) of a pod the history never shows", c.Name, c.ID, state)
		}
		out = append(out, v)
	}
	for _, k := range slices.Sorted(maps.Keys(h.keys)) {
		s := h.keys[k]
		inc := h.uids[s.uid]
		p := inc.last
		if p.GetSpec().GetNodeName() != node || p.GetMetadata().GetDeletionTimestamp() != nil || p.GetStatus().GetPhase() != "Running" ||
			podutil.PodCondition(p, podutil.PodReady).GetStatus() != podutil.True {
			continue
		}
		for _, c := range p.GetSpec().GetContainers() {
			if !running[[2]string{s.uid, c.GetName()}] {
				out = append(out, Violation{Kind: KindNotRunning, Pod: inc.key, UID: s.uid, Node: node, Revision: inc.lastRev,
					Detail: fmt.Sprintf("Ready, but container %s does not run", c.GetName())})
			}
		}
	}
	return out
}
