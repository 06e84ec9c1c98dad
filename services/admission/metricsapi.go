package admission

import (
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/usage"
)

// metrics.k8s.io/v1beta1, as metrics-server serves it, from the latest usage the agents published
// (package internal/usage): PodMetrics and NodeMetrics, get and list, with label selectors read from
// the pods' and nodes' watch caches. Nothing is stored; a node silent for usageTTL drops out.
//
//	podbus.usage.> ──subscribe──▶ usageCache (latest report per node) ──▶ GET /apis/metrics.k8s.io/v1beta1/...

const metricsGroup = "metrics.k8s.io"

// usageTTL is how long a node's last report is served: a few of the agents' intervals.
const usageTTL = 2 * time.Minute

// ContainerMetrics is one container's usage.
type ContainerMetrics struct {
	Name  string              `json:"name"`
	Usage corev1.ResourceList `json:"usage"`
}

// PodMetrics is metrics.k8s.io/v1beta1 PodMetrics.
type PodMetrics struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Timestamp         metav1.Time        `json:"timestamp"`
	Window            string             `json:"window"` // a metav1.Duration: "15s"
	Containers        []ContainerMetrics `json:"containers"`
}

// NodeMetrics is metrics.k8s.io/v1beta1 NodeMetrics.
type NodeMetrics struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Timestamp         metav1.Time         `json:"timestamp"`
	Window            string              `json:"window"`
	Usage             corev1.ResourceList `json:"usage"`
}

// DeepCopyObject implements runtime.Object.
func (m *PodMetrics) DeepCopyObject() runtime.Object {
	c := *m
	m.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Containers = make([]ContainerMetrics, len(m.Containers))
	for i, ct := range m.Containers {
		c.Containers[i] = ContainerMetrics{Name: ct.Name, Usage: ct.Usage.DeepCopy()}
	}
	return &c
}

// DeepCopyObject implements runtime.Object.
func (m *NodeMetrics) DeepCopyObject() runtime.Object {
	c := *m
	m.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Usage = m.Usage.DeepCopy()
	return &c
}

var podMetricsKind = &kind{
	group: metricsGroup, version: "v1beta1", kind: "PodMetrics", resource: "pods", singular: "",
	namespaced: true, verbs: []string{"get", "list"},
	newObject: func() runtime.Object { return &PodMetrics{} },
}

var nodeMetricsKind = &kind{
	group: metricsGroup, version: "v1beta1", kind: "NodeMetrics", resource: "nodes", singular: "",
	verbs:     []string{"get", "list"},
	newObject: func() runtime.Object { return &NodeMetrics{} },
}

// usageCache holds the latest usage report of every node.
type usageCache struct {
	now func() time.Time

	mu    sync.Mutex
	nodes map[string]*nodeUsage // by node name
	pods  map[string]podUsage   // by namespace/name
	// own are nodes that report on their own subject: a pool's report of them is ignored.
	own  map[string]bool
	strs *intern.Strings // node and container names
	gen  uint64          // counts the node reports taken in
	walk usageWalk       // the message being taken in
}

type nodeUsage struct {
	u        usage.Node // without its pods: pods has them
	pods     []string   // the keys of pods this report set, in its order
	received time.Time
	gen      uint64 // the report's
}

// podUsage is what a pod's metrics are made of besides its name: its containers' usage.
type podUsage struct {
	key  string // the map's: a report that lists the pod again reuses it
	node string
	// containers are changed in place by the next report of the same containers: readers copy them
	// before the cache's lock is released.
	containers []usage.Container
	gen        uint64 // the node report that set it
}

func newUsageCache() *usageCache {
	c := &usageCache{now: time.Now, nodes: map[string]*nodeUsage{}, pods: map[string]podUsage{}, own: map[string]bool{},
		strs: intern.NewStrings(intern.DefaultLimit)}
	c.walk.c = c
	return c
}

// onMessage takes a usage report in. A node's own subject may report that node only. Every node
// reports every pod each UsageInterval, so a pod whose containers are the same as in its node's last
// report is updated in place: a full cluster's reports then allocate nothing per pod.
func (c *usageCache) onMessage(m *nats.Msg) {
	node, own := bus.UsageSubjectNode(m.Subject)
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &c.walk
	w.subject, w.own, w.now = node, own, c.now()
	if err := usage.Walk(m.Data, w); err != nil {
		metrics.Count("admission.usage.malformed", 1)
	}
	w.n, w.old, w.keys = nil, nil, nil
}

// usageWalk takes one message's nodes into the cache, with the cache's lock held.
type usageWalk struct {
	c       *usageCache
	subject string // the node of a node's own subject
	own     bool
	now     time.Time
	n       *nodeUsage
	old     []string // n's keys before this report
	keys    []string // this report's, once they differ from old
	i       int      // pods of this report so far
	same    bool     // the first i keys are old's
	key     []byte
}

func (w *usageWalk) Node(n usage.Node) bool {
	c := w.c
	switch {
	case w.own && n.Name != w.subject:
		metrics.Count("admission.usage.foreign", 1)
		return false
	case w.own:
		c.own[n.Name] = true
	case c.own[n.Name]:
		metrics.Count("admission.usage.foreign", 1)
		return false
	}
	n.Name = c.strs.Get(n.Name)
	nu := c.nodes[n.Name]
	if nu == nil {
		nu = &nodeUsage{}
		c.nodes[n.Name] = nu
	}
	c.gen++
	nu.u, nu.received, nu.gen = n, w.now, c.gen
	w.n, w.old, w.keys, w.i, w.same = nu, nu.pods, nil, 0, true
	return true
}

func (w *usageWalk) Pod(p *usage.PodView) {
	c := w.c
	w.key = append(append(append(w.key[:0], p.Namespace...), '/'), p.Name...)
	pu, ok := c.pods[string(w.key)]
	k := pu.key
	if !ok {
		k = string(w.key)
	}
	if w.same && (w.i >= len(w.old) || w.old[w.i] != k) {
		w.keys = append(make([]string, 0, max(len(w.old), w.i+1)), w.old[:w.i]...)
		w.same = false
	}
	if !w.same {
		w.keys = append(w.keys, k)
	}
	w.i++
	if ok && sameContainers(pu.containers, p.Containers) {
		for j, ct := range p.Containers {
			pu.containers[j].CPUNanoCores, pu.containers[j].MemoryBytes = ct.CPUNanoCores, ct.MemoryBytes
		}
	} else {
		pu.containers = make([]usage.Container, len(p.Containers))
		for j, ct := range p.Containers {
			pu.containers[j] = usage.Container{Name: c.strs.Get(string(ct.Name)), CPUNanoCores: ct.CPUNanoCores, MemoryBytes: ct.MemoryBytes}
		}
	}
	pu.key, pu.node, pu.gen = k, w.n.u.Name, w.n.gen
	c.pods[k] = pu
}

// EndNode drops the node's pods that its report left out, unless another node's report has them.
func (w *usageWalk) EndNode() {
	c, nu := w.c, w.n
	if w.same && w.i == len(w.old) {
		return // the same pods in the same order: every one was set again
	}
	for _, k := range w.old {
		if pu, ok := c.pods[k]; ok && pu.node == nu.u.Name && pu.gen != nu.gen {
			delete(c.pods, k)
		}
	}
	if w.same {
		nu.pods = w.old[:w.i:w.i]
	} else {
		nu.pods = w.keys
	}
}

// sameContainers says whether a report names the cached containers, in the same order.
func sameContainers(cached []usage.Container, cs []usage.ContainerView) bool {
	if len(cached) != len(cs) {
		return false
	}
	for i := range cs {
		if cached[i].Name != string(cs[i].Name) {
			return false
		}
	}
	return true
}

// node returns the node's usage without its pods, if fresh.
func (c *usageCache) node(name string) (usage.Node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[name]
	if n == nil || c.now().Sub(n.received) > usageTTL {
		return usage.Node{}, false
	}
	return n.u, true
}

// pod returns the pod's usage with its node's time and window, if fresh.
func (c *usageCache) pod(ns, name string) (usage.Pod, usage.Node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[ns+"/"+name]
	if !ok {
		return usage.Pod{}, usage.Node{}, false
	}
	n := c.nodes[p.node]
	if n == nil || c.now().Sub(n.received) > usageTTL {
		return usage.Pod{}, usage.Node{}, false
	}
	return usage.Pod{Namespace: ns, Name: name, Containers: slices.Clone(p.containers)},
		usage.Node{Name: n.u.Name, Time: n.u.Time, WindowMillis: n.u.WindowMillis}, true
}

// subscribeUsage feeds the cache from the agents' reports.
func (s *Service) subscribeUsage() (*nats.Subscription, error) {
	return s.conn.NC.Subscribe(bus.SubjUsageAll, s.usage.onMessage)
}

func cpuQuantity(nanocores uint64) resource.Quantity {
	return *resource.NewScaledQuantity(int64(nanocores), resource.Nano)
}

func memQuantity(bytes uint64) resource.Quantity {
	return *resource.NewQuantity(int64(bytes), resource.BinarySI)
}

func podMetricsOf(p usage.Pod, n usage.Node, lbls map[string]string) *PodMetrics {
	m := &PodMetrics{
		TypeMeta: metav1.TypeMeta{Kind: "PodMetrics", APIVersion: metricsGroup + "/v1beta1"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: lbls,
			CreationTimestamp: metav1.Now()},
		Timestamp:  metav1.NewTime(n.Time),
		Window:     n.Window().String(),
		Containers: []ContainerMetrics{},
	}
	for _, c := range p.Containers {
		m.Containers = append(m.Containers, ContainerMetrics{Name: c.Name, Usage: corev1.ResourceList{
			corev1.ResourceCPU: cpuQuantity(c.CPUNanoCores), corev1.ResourceMemory: memQuantity(c.MemoryBytes)}})
	}
	return m
}

func nodeMetricsOf(n usage.Node, lbls map[string]string) *NodeMetrics {
	return &NodeMetrics{
		TypeMeta:   metav1.TypeMeta{Kind: "NodeMetrics", APIVersion: metricsGroup + "/v1beta1"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: lbls, CreationTimestamp: metav1.Now()},
		Timestamp:  metav1.NewTime(n.Time),
		Window:     n.Window().String(),
		Usage: corev1.ResourceList{
			corev1.ResourceCPU: cpuQuantity(n.CPUNanoCores), corev1.ResourceMemory: memQuantity(n.MemoryBytes)},
	}
}

// servePodMetrics answers get and list of PodMetrics.
func (s *Service) servePodMetrics(w http.ResponseWriter, r *http.Request, req request) {
	s.serveMetrics(w, r, req, s.reg.lookup("", "v1", "pods"), func(e *cacheEntry) (runtime.Object, bool) {
		p, n, ok := s.usage.pod(e.ns, e.name)
		if !ok {
			return nil, false
		}
		return podMetricsOf(p, n, maps.Clone(e.labels)), true
	})
}

// serveNodeMetrics answers get and list of NodeMetrics.
func (s *Service) serveNodeMetrics(w http.ResponseWriter, r *http.Request, req request) {
	s.serveMetrics(w, r, req, s.reg.lookup("", "v1", "nodes"), func(e *cacheEntry) (runtime.Object, bool) {
		n, ok := s.usage.node(e.name)
		if !ok {
			return nil, false
		}
		return nodeMetricsOf(n, maps.Clone(e.labels)), true
	})
}

// serveMetrics lists the objects of the source kind (pods, nodes) that the request selects, by their
// labels and names, and answers the usage of those that have one.
func (s *Service) serveMetrics(w http.ResponseWriter, r *http.Request, req request, source *kind,
	metricsOf func(*cacheEntry) (runtime.Object, bool)) {
	ki := req.kind
	if req.sub != "" {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if r.Method != http.MethodGet {
		writeStatus(w, methodNotAllowed(ki.gr(), r.Method))
		return
	}
	if req.watch {
		writeStatus(w, methodNotAllowed(ki.gr(), "watch"))
		return
	}
	m, err := newMatcher(req.q, ki)
	if err != nil {
		writeStatus(w, err)
		return
	}
	c := s.cache(source)
	if err := c.waitReady(r.Context()); err != nil {
		writeStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return
	}
	if req.name != "" {
		id := req.name
		if req.ns != "" {
			id = req.ns + "/" + req.name
		}
		if e := c.entry(id); e != nil {
			if o, ok := metricsOf(e); ok {
				writeObject(w, http.StatusOK, req, ki, o)
				return
			}
		}
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: metricsGroup, Resource: ki.resource}, req.name))
		return
	}
	entries, _ := c.state()
	var objs []runtime.Object
	for _, e := range entries {
		if req.ns != "" && e.ns != req.ns {
			continue
		}
		if !m.label.Matches(labels.Set(e.labels)) {
			continue
		}
		o, ok := metricsOf(e)
		if !ok || !m.field.Matches(ki.fieldSet(o)) {
			continue
		}
		objs = append(objs, o)
	}
	writeListMeta(w, req, ki, objs, metav1.ListMeta{})
}

// entry is the cached entry with id (namespace/name, or name), nil when there is none.
func (c *watchCache) entry(id string) *cacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.objects[id]
}

// usageNodes are the names of the nodes with fresh usage, for tests.
func (c *usageCache) usageNodes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n, u := range c.nodes {
		if c.now().Sub(u.received) <= usageTTL {
			out = append(out, n)
		}
	}
	sortStrings(out)
	return out
}
