// Package usage is the wire format of resource usage, from the node agents to the API server's
// metrics.k8s.io cache: what each node, pod and container uses right now (CPU as a rate over the
// window, memory as the working set), as metrics-server keeps it.
//
//	agent (real: cgroup stats; simulated: estimated from requests)
//	  ─▶ podbus.usage.node.<node> (one node) or podbus.usage.pool.<host> (a host's simulated nodes)
//	  ─▶ API server cache (latest report per node) ─▶ GET /apis/metrics.k8s.io/v1beta1/...
//
// Messages are podbusv1.UsageReport on core NATS, not JetStream: only the latest usage matters, so a
// report lost or missed by an API server started later is simply replaced by the next one.
package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
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

// Encode marshals r as a podbusv1.UsageReport, field by field: a simulated pool reports every pod
// of thousands of nodes each interval, and building the message's objects first would cost more
// than the encoding. The bytes are those proto.Marshal makes of the same message.
func Encode(r *Report) ([]byte, error) {
	sizes := make([]int, len(r.Nodes))
	total := 0
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if err := validNode(n); err != nil {
			return nil, err
		}
		sizes[i] = nodeSize(n)
		total += protowire.SizeTag(1) + protowire.SizeBytes(sizes[i])
	}
	b := make([]byte, 0, total)
	for i := range r.Nodes {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[i]))
		b = appendNode(b, &r.Nodes[i])
	}
	return b, nil
}

// validNode refuses what proto.Marshal refuses: a string field that is not UTF-8.
func validNode(n *Node) error {
	ok := utf8.ValidString(n.Name)
	for _, p := range n.Pods {
		ok = ok && utf8.ValidString(p.Namespace) && utf8.ValidString(p.Name) && utf8.ValidString(p.UID)
		for _, c := range p.Containers {
			ok = ok && utf8.ValidString(c.Name)
		}
	}
	if !ok {
		return fmt.Errorf("usage of node %q: a name is not UTF-8", n.Name)
	}
	return nil
}

// Sizes and appenders of the proto3 fields: zero values are left out, as proto.Marshal does.
func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func sizeUint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func (n *Node) unixNano() int64 {
	if n.Time.IsZero() {
		return 0
	}
	return n.Time.UnixNano()
}

func nodeSize(n *Node) int {
	size := sizeString(1, n.Name) + sizeUint(2, uint64(n.unixNano())) + sizeUint(3, uint64(n.WindowMillis)) +
		sizeUint(4, n.CPUNanoCores) + sizeUint(5, n.MemoryBytes)
	for i := range n.Pods {
		size += protowire.SizeTag(6) + protowire.SizeBytes(podSize(&n.Pods[i]))
	}
	return size
}

func appendNode(b []byte, n *Node) []byte {
	b = appendString(b, 1, n.Name)
	b = appendUint(b, 2, uint64(n.unixNano()))
	b = appendUint(b, 3, uint64(n.WindowMillis))
	b = appendUint(b, 4, n.CPUNanoCores)
	b = appendUint(b, 5, n.MemoryBytes)
	for i := range n.Pods {
		p := &n.Pods[i]
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(podSize(p)))
		b = appendString(b, 1, p.Namespace)
		b = appendString(b, 2, p.Name)
		b = appendString(b, 3, p.UID)
		for _, c := range p.Containers {
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(containerSize(c)))
			b = appendString(b, 1, c.Name)
			b = appendUint(b, 2, c.CPUNanoCores)
			b = appendUint(b, 3, c.MemoryBytes)
		}
	}
	return b
}

func podSize(p *Pod) int {
	size := sizeString(1, p.Namespace) + sizeString(2, p.Name) + sizeString(3, p.UID)
	for _, c := range p.Containers {
		size += protowire.SizeTag(4) + protowire.SizeBytes(containerSize(c))
	}
	return size
}

func containerSize(c Container) int {
	return sizeString(1, c.Name) + sizeUint(2, c.CPUNanoCores) + sizeUint(3, c.MemoryBytes)
}

// Decode unmarshals a report; every node must have a name. A JSON report, as agents before the
// protobuf format sent, is read too: a protobuf UsageReport never starts with '{'.
func Decode(data []byte) (*Report, error) {
	var r *Report
	if len(data) > 0 && data[0] == '{' {
		r = &Report{}
		if err := json.Unmarshal(data, r); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
	} else {
		var err error
		if r, err = decodePB(data); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
	}
	for _, n := range r.Nodes {
		if n.Name == "" {
			return nil, fmt.Errorf("%w: node without a name", ErrMalformed)
		}
	}
	return r, nil
}

// decodePB reads a podbusv1.UsageReport straight into a Report, through Walk: no message tree is built
// only to be copied, and the namespaces and container names that repeat from pod to pod are allocated
// once per message.
func decodePB(data []byte) (*Report, error) {
	b := &builder{strs: map[string]string{}}
	if err := walkPB(data, b); err != nil {
		return nil, err
	}
	return &b.r, nil
}

// builder is a Walker that builds the report.
type builder struct {
	r    Report
	strs map[string]string
}

func (b *builder) Node(n Node) bool {
	b.r.Nodes = append(b.r.Nodes, n)
	return true
}

func (b *builder) Pod(v *PodView) {
	p := Pod{Namespace: b.str(v.Namespace), Name: string(v.Name), UID: string(v.UID)}
	for _, c := range v.Containers {
		p.Containers = append(p.Containers, Container{Name: b.str(c.Name), CPUNanoCores: c.CPUNanoCores, MemoryBytes: c.MemoryBytes})
	}
	n := &b.r.Nodes[len(b.r.Nodes)-1]
	n.Pods = append(n.Pods, p)
}

func (b *builder) EndNode() {}

// str is b as a string, one copy per distinct value in the message (Walk checked it is UTF-8).
func (b *builder) str(v []byte) string {
	if s, ok := b.strs[string(v)]; ok {
		return s
	}
	s := string(v)
	b.strs[s] = s
	return s
}

// errUTF8 is a string field that is not UTF-8, which protobuf refuses for proto3 strings.
var errUTF8 = errors.New("string field is not valid UTF-8")

// text is b as a string.
func text(b []byte) (string, error) {
	if !utf8.Valid(b) {
		return "", errUTF8
	}
	return string(b), nil
}

// timeOf is a node's time field.
func timeOf(x uint64) time.Time { return time.Unix(0, int64(x)).UTC() }

// fields calls f with each field of a message: v for a length-delimited one, x for a varint; other
// wire types are skipped, as protobuf skips unknown fields.
func fields(data []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if !num.IsValid() {
			return fmt.Errorf("field number %d out of range", num)
		}
		data = data[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(data)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(data)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		if typ == protowire.BytesType || typ == protowire.VarintType {
			if err := f(num, typ, v, x); err != nil {
				return err
			}
		}
	}
	return nil
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
