package framework

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrNoNodesAvailable: the cluster has no nodes at all (Kubernetes' exact wording).
var ErrNoNodesAvailable = errors.New("no nodes available to schedule pods")

// FitError says why a pod fits no node. Its Error is the message Kubernetes puts in the pod's
// PodScheduled condition and FailedScheduling event.
type FitError struct {
	NumAllNodes int
	// PreFilterMsg is set when a PreFilter rejected the pod outright (then Reasons is not listed).
	PreFilterMsg string
	// Reasons counts, per reason, the nodes that were rejected for it.
	Reasons map[string]int32
	// PostFilterMsg is why PostFilter (preemption) could not help either, appended to the message.
	PostFilterMsg string
	// Plugins names the plugins that rejected the pod (kube-scheduler's UnschedulablePlugins): their
	// registered events decide when the pod is worth another cycle (see Framework.RequeueFor).
	Plugins []string
}

// Error formats "0/12 nodes are available: 3 Insufficient cpu, 9 node(s) didn't match Pod's node
// affinity/selector." with the "<count> <reason>" entries sorted as strings, as kube-scheduler does.
func (f *FitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "0/%d nodes are available:", f.NumAllNodes)
	if f.PreFilterMsg != "" {
		fmt.Fprintf(&b, " %s.", f.PreFilterMsg)
		return b.String()
	}
	entries := make([]string, 0, len(f.Reasons))
	for r, n := range f.Reasons {
		entries = append(entries, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(entries)
	if len(entries) > 0 {
		fmt.Fprintf(&b, " %s.", strings.Join(entries, ", "))
	}
	if f.PostFilterMsg != "" {
		fmt.Fprintf(&b, " %s.", f.PostFilterMsg)
	}
	return b.String()
}
