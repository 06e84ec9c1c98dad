package webview

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Stage is how far a pod got in the pipeline.
type Stage int

// The stages, in order. A pod counts in the furthest it reached.
const (
	Admitted  Stage = iota // in the store, not placed yet
	Scheduled              // PodScheduled is True
	Bound                  // spec.nodeName is set
	Running                // phase Running (or ended)
	Ready                  // the Ready condition is True
	numStages
)

var stageNames = [numStages]string{"admitted", "scheduled", "bound", "running", "ready"}

func (s Stage) String() string { return stageNames[s] }

// stageOf is the furthest stage p reached.
func stageOf(p *pb.Pod) Stage {
	if c := podutil.PodCondition(p, podutil.PodReady); c != nil && c.GetStatus() == podutil.True {
		return Ready
	}
	switch p.GetStatus().GetPhase() {
	case "Running", "Succeeded", "Failed":
		return Running
	}
	if p.GetSpec().GetNodeName() != "" {
		return Bound
	}
	if c := podutil.PodCondition(p, podutil.PodScheduled); c != nil && c.GetStatus() == podutil.True {
		return Scheduled
	}
	return Admitted
}

// Window lengths: rates over rateWindow, p99 over latencyWindow.
const (
	rateWindow    = 10 * time.Second
	latencyWindow = time.Minute
	maxSamples    = 20000 // per stage; older samples go first
	maxEvents     = 30
)

type podRow struct {
	Namespace, Name, Node string
	Stage                 Stage
	Unschedulable         string // the scheduler's message while PodScheduled is False
	created               time.Time
}

type nodeRow struct {
	Name          string
	Ready         bool
	Unschedulable bool
}

type eventRow struct {
	Time                          time.Time
	Type, Reason, Object, Message string
}

// sample is one pod reaching a stage: when, and how long after its creation.
type sample struct {
	at  time.Time
	lat time.Duration
}

// model is what the view shows, kept from the watches. Every change closes changed, which watchers
// of the model wait on, and replaces it.
type model struct {
	mu      sync.Mutex
	pods    map[string]*podRow // by bucket key
	nodes   map[string]*nodeRow
	events  []eventRow // oldest first
	samples [numStages][]sample
	changed chan struct{}
	now     func() time.Time
}

func newModel() *model {
	return &model{pods: map[string]*podRow{}, nodes: map[string]*nodeRow{}, changed: make(chan struct{}), now: time.Now}
}

// wait returns a channel closed at the next change.
func (m *model) wait() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *model) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// setPod records the pod under key (nil: deleted). live says the write happened now, at, rather than
// being the state found at start: only live writes count towards rates and latencies.
func (m *model) setPod(key string, p *pb.Pod, at time.Time, live bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.pods[key]
	if p == nil {
		if old != nil {
			delete(m.pods, key)
			m.notifyLocked()
		}
		return
	}
	row := &podRow{Namespace: p.GetMetadata().GetNamespace(), Name: p.GetMetadata().GetName(),
		Node: p.GetSpec().GetNodeName(), Stage: stageOf(p), created: p.GetMetadata().GetCreationTimestamp().AsTime()}
	if c := podutil.PodCondition(p, podutil.PodScheduled); c != nil && c.GetStatus() == podutil.False && row.Node == "" {
		row.Unschedulable = c.GetReason() + ": " + c.GetMessage()
	}
	if old != nil && *old == *row {
		return
	}
	m.pods[key] = row
	if live {
		from := Admitted
		if old != nil {
			from = old.Stage + 1
		}
		for s := from; s <= row.Stage; s++ {
			m.addSampleLocked(s, sample{at: at, lat: max(at.Sub(row.created), 0)})
		}
	}
	m.notifyLocked()
}

func (m *model) addSampleLocked(s Stage, x sample) {
	xs := append(m.samples[s], x)
	if len(xs) > maxSamples {
		xs = slices.Delete(xs, 0, len(xs)-maxSamples)
	}
	m.samples[s] = xs
}

func (m *model) setNode(key string, n *pb.Node) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n == nil {
		delete(m.nodes, key)
	} else {
		m.nodes[key] = &nodeRow{Name: n.GetMetadata().GetName(), Ready: podutil.NodeIsReady(n), Unschedulable: n.GetSpec().GetUnschedulable()}
	}
	m.notifyLocked()
}

func (m *model) addEvent(e *pb.Event) {
	at := e.GetLastTimestamp().AsTime()
	if e.GetLastTimestamp() == nil {
		at = e.GetEventTime().AsTime()
	}
	obj := e.GetInvolvedObject()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, eventRow{Time: at, Type: e.GetType(), Reason: e.GetReason(),
		Object: obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName(), Message: e.GetMessage()})
	if len(m.events) > maxEvents {
		m.events = slices.Delete(m.events, 0, len(m.events)-maxEvents)
	}
	m.notifyLocked()
}

// StageStats is one stage of the pipeline as shown.
type StageStats struct {
	Name    string
	Now     int     // pods whose furthest stage is this one
	Reached int     // pods that got at least this far
	Rate    float64 // pods reaching it per second, over the last rateWindow
	P99     time.Duration
	HasP99  bool
}

// NodeView is a node with its pods' stages.
type NodeView struct {
	Name          string
	Ready         bool
	Unschedulable bool
	Pods          []PodDot
	More          int // pods not drawn
}

// PodDot is one pod in a node's grid.
type PodDot struct {
	Namespace, Name string
	Stage           Stage
}

// snapshot is the model's content for rendering.
type snapshot struct {
	Stages        []StageStats
	Total         int
	Nodes         []NodeView
	Events        []eventRow // newest first
	Unschedulable []*podRow
}

// maxDots bounds the pods drawn per node.
const maxDots = 400

func (m *model) snapshot() snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var s snapshot
	var in [numStages]int
	byNode := map[string][]PodDot{}
	for _, p := range m.pods {
		in[p.Stage]++
		if p.Node != "" {
			byNode[p.Node] = append(byNode[p.Node], PodDot{p.Namespace, p.Name, p.Stage})
		}
		if p.Unschedulable != "" {
			s.Unschedulable = append(s.Unschedulable, p)
		}
	}
	s.Total = len(m.pods)
	reached := 0
	s.Stages = make([]StageStats, numStages)
	for st := numStages - 1; st >= 0; st-- {
		reached += in[st]
		x := StageStats{Name: st.String(), Now: in[st], Reached: reached}
		var lats []time.Duration
		n := 0
		for _, smp := range m.samples[st] {
			if age := now.Sub(smp.at); age <= latencyWindow {
				lats = append(lats, smp.lat)
				if age <= rateWindow {
					n++
				}
			}
		}
		x.Rate = float64(n) / rateWindow.Seconds()
		if len(lats) > 0 {
			slices.Sort(lats)
			x.P99, x.HasP99 = lats[(len(lats)*99+99)/100-1], true
		}
		s.Stages[st] = x
	}
	for _, n := range m.nodes {
		v := NodeView{Name: n.Name, Ready: n.Ready, Unschedulable: n.Unschedulable, Pods: byNode[n.Name]}
		sort.Slice(v.Pods, func(i, j int) bool {
			a, b := v.Pods[i], v.Pods[j]
			if a.Namespace != b.Namespace {
				return a.Namespace < b.Namespace
			}
			return a.Name < b.Name
		})
		if len(v.Pods) > maxDots {
			v.More, v.Pods = len(v.Pods)-maxDots, v.Pods[:maxDots]
		}
		s.Nodes = append(s.Nodes, v)
	}
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].Name < s.Nodes[j].Name })
	sort.Slice(s.Unschedulable, func(i, j int) bool {
		a, b := s.Unschedulable[i], s.Unschedulable[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	if len(s.Unschedulable) > 50 {
		s.Unschedulable = s.Unschedulable[:50]
	}
	for i := len(m.events) - 1; i >= 0; i-- {
		s.Events = append(s.Events, m.events[i])
	}
	return s
}

// podStage is the stage of one pod, false when the view does not know it.
func (m *model) podStage(ns, name string) (Stage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[bus.PodKey(ns, name)]
	if p == nil {
		return 0, false
	}
	return p.Stage, true
}
