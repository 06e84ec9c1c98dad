// Package usage is the wire format of resource usage, from the node agents to the API server's
// metrics.k8s.io cache: what each node, pod and container uses right now (CPU as a rate over the
// window, memory as the working set), as metrics-server keeps it.
//
//	agent (real: cgroup stats; simulated: estimated from requests)
//	  ─▶ podbus.usage.node.<node> (one node) or podbus.usage.pool.<host> (a host's simulated nodes)
//	  ─▶ API server cache (latest report per node) ─▶ GET /apis/metrics.k8s.io/v1beta1/...
//
// Messages are core NATS, not JetStream: only the latest usage matters, so a report lost or missed by
// an API server started later is simply replaced by the next one.
package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Report is one message: the usage of one node, or of several nodes of a pool.
type Report struct {
	Nodes []Node `json:"nodes"`
}

// Node is a node's usage and that of its pods.
type Node struct {
	Name string    `json:"name"`
	Time time.Time `json:"time"` // when measured
	// WindowMillis is the span the CPU rates are averaged over.
	WindowMillis int64 `json:"windowMs"`
	// CPUNanoCores and MemoryBytes are the whole node's (memory: total minus available), not the sum
	// of its pods'.
	CPUNanoCores uint64 `json:"cpu"`
	MemoryBytes  uint64 `json:"mem"`
	Pods         []Pod  `json:"pods,omitempty"`
}

// Pod is one pod's usage, container by container.
type Pod struct {
	Namespace  string      `json:"ns"`
	Name       string      `json:"name"`
	UID        string      `json:"uid,omitempty"`
	Containers []Container `json:"c"`
}

// Container is one running container's usage.
type Container struct {
	Name         string `json:"name"`
	CPUNanoCores uint64 `json:"cpu"`
	MemoryBytes  uint64 `json:"mem"` // working set
}

// Window is the node's averaging window.
func (n *Node) Window() time.Duration { return time.Duration(n.WindowMillis) * time.Millisecond }

// ErrMalformed is returned by Decode for a message that is not a usage report.
var ErrMalformed = errors.New("malformed usage report")

// Encode marshals r.
func Encode(r *Report) ([]byte, error) { return json.Marshal(r) }

// Decode unmarshals a report; every node must have a name.
func Decode(data []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	for _, n := range r.Nodes {
		if n.Name == "" {
			return nil, fmt.Errorf("%w: node without a name", ErrMalformed)
		}
	}
	return &r, nil
}

// Chunk splits nodes into reports of at most maxPods pods each (a node is never split; a node with
// more pods than maxPods is a report of its own), so that a pool's message stays well under the
// server's maximum payload.
func Chunk(nodes []Node, maxPods int) []*Report {
	var out []*Report
	cur, pods := &Report{}, 0
	for _, n := range nodes {
		if len(cur.Nodes) > 0 && pods+len(n.Pods) > maxPods {
			out = append(out, cur)
			cur, pods = &Report{}, 0
		}
		cur.Nodes = append(cur.Nodes, n)
		pods += len(n.Pods)
	}
	if len(cur.Nodes) > 0 {
		out = append(out, cur)
	}
	return out
}
