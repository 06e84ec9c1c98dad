// Package intern shares equal values decoded from the buckets among the messages that hold them. A
// scheduler and a binder keep an alloc entry for every placed pod, and the pods of one ReplicaSet have
// equal labels, namespace, scheduler name and requests: each decoded copy would otherwise stay in
// memory as long as its pod. One table serves the whole process, whose services (cluster/up runs them
// all) decode the same values.
//
// Interned values are shared: callers must not change them (clone a message before changing it;
// proto.Clone copies maps and submessages).
package intern

import (
	"slices"
	"strings"
	"sync"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// maxEntries bounds each table: values beyond it are kept as they are, unshared. Tables only grow, so
// pods with labels of their own cannot make them grow without bound.
const maxEntries = 1 << 14

// resourcesKey is a Resources without extended resources, which are rare and not interned.
type resourcesKey struct{ cpu, memory, ephemeral, pods int64 }

type table struct {
	mu        sync.Mutex
	labels    map[string]map[string]string
	strings   map[string]string
	resources map[resourcesKey]*pb.Resources
	// key and keys are Labels' scratch space, reused so that a hit allocates nothing.
	key  []byte
	keys []string
}

var shared = &table{labels: map[string]map[string]string{}, strings: map[string]string{},
	resources: map[resourcesKey]*pb.Resources{}}

// Labels returns a map equal to m, shared with every other caller that has such a map (m itself when
// it is empty or the table is full).
func Labels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	t := shared
	t.mu.Lock()
	defer t.mu.Unlock()
	t.keys = t.keys[:0]
	for k := range m {
		t.keys = append(t.keys, k)
	}
	slices.Sort(t.keys)
	t.key = t.key[:0]
	for _, k := range t.keys {
		t.key = append(append(t.key, k...), 0)
		t.key = append(append(t.key, m[k]...), 0)
	}
	clear(t.keys) // keep no caller's strings alive
	if s, ok := t.labels[string(t.key)]; ok {
		return s
	}
	if len(t.labels) >= maxEntries {
		return m
	}
	s := make(map[string]string, len(m))
	for k, v := range m {
		s[t.stringLocked(k)] = t.stringLocked(v)
	}
	t.labels[string(t.key)] = s
	return s
}

// String returns a string equal to s, shared with every other caller that has it.
func String(s string) string {
	if s == "" {
		return ""
	}
	t := shared
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stringLocked(s)
}

// Bytes is String(string(b)), without making the string when the table holds it already: a reader of
// a message's wire form interns its strings straight from the bytes.
func Bytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	t := shared
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.strings[string(b)]; ok {
		return v
	}
	return t.stringLocked(string(b))
}

func (t *table) stringLocked(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := t.strings[s]; ok {
		return v
	}
	if len(t.strings) >= maxEntries {
		return s
	}
	s = strings.Clone(s)
	t.strings[s] = s
	return s
}

// Resources returns a message equal to r, shared with every other caller that has one (r itself when
// it is nil, names extended resources or the table is full).
func Resources(r *pb.Resources) *pb.Resources {
	if r == nil || len(r.GetScalar()) > 0 || len(r.ProtoReflect().GetUnknown()) > 0 {
		return r
	}
	k := resourcesKey{r.GetMilliCpu(), r.GetMemory(), r.GetEphemeralStorage(), r.GetPods()}
	t := shared
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.resources[k]; ok {
		return v
	}
	if len(t.resources) >= maxEntries {
		return r
	}
	v := &pb.Resources{MilliCpu: k.cpu, Memory: k.memory, EphemeralStorage: k.ephemeral, Pods: k.pods}
	t.resources[k] = v
	return v
}

// PodAllocation replaces pa's labels, namespace, scheduler name and requests with shared equal ones. pa
// must be the caller's own, just decoded: no other goroutine may read it yet.
func PodAllocation(pa *pb.PodAllocation) {
	if pa == nil {
		return
	}
	pa.Labels = Labels(pa.Labels)
	pa.Namespace = String(pa.Namespace)
	pa.SchedulerName = String(pa.SchedulerName)
	pa.Requests = Resources(pa.Requests)
}

// hostnameLabel's value is a node's own name: sharing it would only fill the table.
const hostnameLabel = "kubernetes.io/hostname"

// Node replaces the strings a node repeats from other nodes with shared equal ones: its labels (but the
// hostname's value), capacity and allocatable, phase, taints, the types, statuses, reasons and messages
// of its conditions, its addresses' types and its system info but the ids. A cache of thousands of
// nodes then holds a few dozen objects fewer per node. n must be the caller's own, just decoded: no
// other goroutine may read it yet. Its maps stay its own (new ones, with shared keys and values), so
// the caller may still change them.
func Node(n *pb.Node) {
	if n == nil {
		return
	}
	t := shared
	t.mu.Lock()
	defer t.mu.Unlock()
	if md := n.GetMetadata(); md != nil {
		md.Labels = t.stringMapLocked(md.Labels, hostnameLabel)
	}
	for _, taint := range n.GetSpec().GetTaints() {
		taint.Key, taint.Value, taint.Effect = t.stringLocked(taint.Key), t.stringLocked(taint.Value), t.stringLocked(taint.Effect)
	}
	st := n.GetStatus()
	if st == nil {
		return
	}
	st.Capacity = t.stringMapLocked(st.Capacity, "")
	st.Allocatable = t.stringMapLocked(st.Allocatable, "")
	st.Phase = t.stringLocked(st.Phase)
	for _, c := range st.Conditions {
		c.Type, c.Status = t.stringLocked(c.Type), t.stringLocked(c.Status)
		c.Reason, c.Message = t.stringLocked(c.Reason), t.stringLocked(c.Message)
	}
	for _, a := range st.Addresses {
		a.Type = t.stringLocked(a.Type)
	}
	if ni := st.NodeInfo; ni != nil {
		ni.KernelVersion, ni.OsImage = t.stringLocked(ni.KernelVersion), t.stringLocked(ni.OsImage)
		ni.ContainerRuntimeVersion = t.stringLocked(ni.ContainerRuntimeVersion)
		ni.KubeletVersion, ni.KubeProxyVersion = t.stringLocked(ni.KubeletVersion), t.stringLocked(ni.KubeProxyVersion)
		ni.OperatingSystem, ni.Architecture = t.stringLocked(ni.OperatingSystem), t.stringLocked(ni.Architecture)
	}
}

// stringMapLocked returns a new map equal to m whose keys and values are shared, but the value of own,
// which is kept as it is (m itself when it is empty).
func (t *table) stringMapLocked(m map[string]string, own string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != own {
			v = t.stringLocked(v)
		}
		out[t.stringLocked(k)] = v
	}
	return out
}
