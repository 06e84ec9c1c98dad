package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/config"
	"github.com/podbus/podbus/sched/core"
	"github.com/podbus/podbus/sched/framework"
)

// WhatIfOptions shape a what-if run.
type WhatIfOptions struct {
	Stream  string // default bus.StreamAudit
	Profile config.Profile
	// Since: decisions before it are taken as recorded; from it on they are re-run with Profile.
	Since time.Time
}

// WhatIfReport counts how the re-run decisions compare with the recorded ones.
type WhatIfReport struct {
	Decisions        int // re-run
	Same             int // same node, or unschedulable both times
	DifferentNode    int
	NowUnschedulable int
	NowSchedulable   int
	// Nodes holding pods at the end of the history, as recorded and as re-run.
	NodesInUseBefore, NodesInUseAfter int
	// Examples of differing decisions (at most 10).
	Examples []string
}

// WhatIf re-runs every recorded scheduling decision (pod.scheduled) through the scheduler framework
// with another profile. The cluster it schedules on is rebuilt from the history: nodes from the nodes
// bucket records as of each decision, and the pods placed on them from the decisions themselves — the
// recorded ones before Since, the re-run ones after, so a changed decision changes the room left for
// the next. A pod leaves its node when it is queued again (a lost conflict), deleted, or dropped from
// its node's alloc record by the binder. Decisions are taken in the order they were made (their
// decidedAt, read inside the scheduler's cycle), which may differ slightly from the order they reached
// the log. The same history and profile always give the same report.
func WhatIf(ctx context.Context, js jetstream.JetStream, o WhatIfOptions) (WhatIfReport, error) {
	var rep WhatIfReport
	sim, err := core.NewSimulator(o.Profile)
	if err != nil {
		return rep, err
	}
	evs, err := readWhatIfEvents(ctx, js, o.Stream)
	if err != nil {
		return rep, err
	}
	// Decisions go back into their slots in the order they were made.
	var slots []int
	var decisions []*event
	for i, e := range evs {
		if e.decision != nil {
			slots = append(slots, i)
			decisions = append(decisions, e)
		}
	}
	slices.SortStableFunc(decisions, func(a, b *event) int {
		return a.decision.GetDecidedAt().AsTime().Compare(b.decision.GetDecidedAt().AsTime())
	})
	for i, slot := range slots {
		evs[slot] = decisions[i]
	}

	w := newWorld()
	// Every node version first: they are placed by their own time, not by where they sit in the log.
	for _, e := range evs {
		if e.nodeKey != "" {
			w.nodes[e.nodeKey] = append(w.nodes[e.nodeKey], nodeVersion{at: e.time, node: e.node})
		}
	}
	for _, vs := range w.nodes {
		slices.SortStableFunc(vs, func(a, b nodeVersion) int { return a.at.Compare(b.at) })
	}
	recorded := map[string]string{} // uid -> node, as recorded
	for _, e := range evs {
		switch {
		case e.pod != nil:
			uid := e.pod.GetMetadata().GetUid()
			w.pods[uid] = e.pod
			w.release(uid)
			delete(recorded, uid)
		case e.release != "":
			w.release(e.release)
			delete(recorded, e.release)
		case e.decision != nil:
			d := e.decision
			uid := d.GetUid()
			w.release(uid)
			delete(recorded, uid)
			if !d.GetUnschedulable() {
				recorded[uid] = d.GetNode()
			}
			at := d.GetDecidedAt().AsTime()
			if at.Before(o.Since) {
				if !d.GetUnschedulable() {
					w.place(uid, d.GetNode(), d.GetRequests())
				}
				continue
			}
			rep.Decisions++
			res, err := sim.Schedule(w.snapshot(at), w.podInfo(d))
			var fit *framework.FitError
			unsched := errors.As(err, &fit) || errors.Is(err, framework.ErrNoNodesAvailable)
			if err != nil && !unsched {
				return rep, fmt.Errorf("re-run decision for %s/%s: %w", d.GetNamespace(), d.GetName(), err)
			}
			what := ""
			switch {
			case unsched && d.GetUnschedulable():
				rep.Same++
			case unsched:
				rep.NowUnschedulable++
				what = "now unschedulable (was " + d.GetNode() + "): " + err.Error()
			case d.GetUnschedulable():
				rep.NowSchedulable++
				what = "now fits on " + res.Node
			case res.Node == d.GetNode():
				rep.Same++
			default:
				rep.DifferentNode++
				what = d.GetNode() + " -> " + res.Node
			}
			if what != "" && len(rep.Examples) < 10 {
				rep.Examples = append(rep.Examples, fmt.Sprintf("%s/%s: %s", d.GetNamespace(), d.GetName(), what))
			}
			if !unsched {
				w.place(uid, res.Node, d.GetRequests())
			}
		}
	}
	rep.NodesInUseBefore = distinct(recorded)
	rep.NodesInUseAfter = distinct(w.placed)
	return rep, nil
}

func distinct(m map[string]string) int {
	seen := map[string]bool{}
	for _, n := range m {
		seen[n] = true
	}
	return len(seen)
}

// event is one history record what-if cares about.
type event struct {
	time     time.Time // nodes: when the record was written (see nodeTime)
	nodeKey  string    // a nodes bucket record; node nil when deleted
	node     *pb.Node
	pod      *pb.Pod // queued for scheduling (pod.pending): the pod as the scheduler got it
	release  string  // uid deleted
	decision *pb.SchedulingDecision
}

// readWhatIfEvents reads the decisions, the pods queued, the deletions and the node records. The first
// three come from one stream (PODS) and keep its order. The log interleaves streams only roughly (each
// is sourced on its own, and one may lag, at start especially), so node records are placed by the time
// in the node object instead (nodeTime), and bucket records of pods and allocations are not used.
func readWhatIfEvents(ctx context.Context, js jetstream.JetStream, stream string) ([]*event, error) {
	var evs []*event
	filters := []string{bus.SubjKV(bus.BucketNodes) + ">", bus.SubjPodScheduled, bus.SubjPodPendingAll, bus.SubjPodDeleted}
	err := Scan(ctx, js, ScanOptions{Stream: stream, Filters: filters}, func(r *Record) error {
		e := &event{time: r.Time}
		if _, key, ok := r.Bucket(); ok {
			e.nodeKey, _ = bus.Untoken(key)
			if r.Deleted() {
				evs = append(evs, e)
				return nil
			}
		}
		m, err := r.Decode()
		if err != nil {
			return nil // a malformed record was parked by its consumer too; it decided nothing
		}
		switch m := m.(type) {
		case *pb.Node:
			e.node, e.time = m, nodeTime(m)
		case *pb.PendingPod:
			e.pod = m.GetPod()
			if e.pod.GetMetadata().GetUid() == "" {
				return nil
			}
		case *pb.PodDeleted:
			e.release = m.GetUid()
		case *pb.SchedulingDecision:
			e.decision = m
		default:
			return nil
		}
		evs = append(evs, e)
		return nil
	})
	return evs, err
}

// nodeTime is when a node record was written, from the object itself: its creation, or the latest
// heartbeat or condition change it carries.
func nodeTime(n *pb.Node) time.Time {
	t := n.GetMetadata().GetCreationTimestamp().AsTime()
	for _, c := range n.GetStatus().GetConditions() {
		for _, ts := range []time.Time{c.GetLastHeartbeatTime().AsTime(), c.GetLastTransitionTime().AsTime()} {
			if ts.After(t) {
				t = ts
			}
		}
	}
	return t
}

type nodeVersion struct {
	at   time.Time
	node *pb.Node // nil: deleted
}

// world is the simulated cluster: nodes, and the pods placed on them.
type world struct {
	nodes  map[string][]nodeVersion // by name, in the order written
	pods   map[string]*pb.Pod       // by uid, as last queued
	placed map[string]string        // uid -> node
	req    map[string]*pb.Resources
	used   map[string]*use // by node
}

type use struct {
	req          *pb.Resources
	nzCPU, nzMem int64
}

func newWorld() *world {
	return &world{nodes: map[string][]nodeVersion{}, pods: map[string]*pb.Pod{}, placed: map[string]string{},
		req: map[string]*pb.Resources{}, used: map[string]*use{}}
}

func (w *world) place(uid, node string, req *pb.Resources) {
	u := w.used[node]
	if u == nil {
		u = &use{req: &pb.Resources{}}
		w.used[node] = u
	}
	podutil.Add(u.req, req)
	cpu, mem := framework.NonZeroRequests(req)
	u.nzCPU += cpu
	u.nzMem += mem
	w.placed[uid], w.req[uid] = node, req
}

func (w *world) release(uid string) {
	node, ok := w.placed[uid]
	if !ok {
		return
	}
	req := w.req[uid]
	u := w.used[node]
	podutil.Sub(u.req, req)
	cpu, mem := framework.NonZeroRequests(req)
	u.nzCPU -= cpu
	u.nzMem -= mem
	delete(w.placed, uid)
	delete(w.req, uid)
}

// snapshot is the cluster as of at: each node's latest version written by then, with the pods placed.
func (w *world) snapshot(at time.Time) *framework.Snapshot {
	infos := make([]*framework.NodeInfo, 0, len(w.nodes))
	for name, vs := range w.nodes {
		i, _ := slices.BinarySearchFunc(vs, at, func(v nodeVersion, t time.Time) int {
			if v.at.After(t) {
				return 1
			}
			return -1
		})
		if i == 0 || vs[i-1].node == nil {
			continue
		}
		n := vs[i-1].node
		info := framework.NewNodeInfo(n)
		if u := w.used[name]; u != nil {
			info.Requested = framework.ResourceOf(u.req)
			info.NonZeroMilliCPU, info.NonZeroMemory = u.nzCPU, u.nzMem
		}
		infos = append(infos, info)
	}
	return framework.SnapshotOf(infos...)
}

// podInfo is the pod as it was when decided, with the requests the scheduler recorded.
func (w *world) podInfo(d *pb.SchedulingDecision) *framework.PodInfo {
	p := w.pods[d.GetUid()]
	if p == nil {
		p = &pb.Pod{Metadata: &pb.ObjectMeta{Uid: d.GetUid(), Namespace: d.GetNamespace(), Name: d.GetName()}, Spec: &pb.PodSpec{}}
	}
	pi := framework.NewPodInfo(p)
	if d.GetRequests() != nil {
		pi.Requests = d.GetRequests()
		pi.NonZeroMilliCPU, pi.NonZeroMemory = framework.NonZeroRequests(d.GetRequests())
	}
	return pi
}

// WriteWhatIf prints a report.
func WriteWhatIf(w io.Writer, r WhatIfReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "decisions re-run: %d\n", r.Decisions)
	fmt.Fprintf(&b, "  same:              %d\n", r.Same)
	fmt.Fprintf(&b, "  different node:    %d\n", r.DifferentNode)
	fmt.Fprintf(&b, "  now unschedulable: %d\n", r.NowUnschedulable)
	fmt.Fprintf(&b, "  now schedulable:   %d\n", r.NowSchedulable)
	fmt.Fprintf(&b, "nodes in use at the end: %d recorded, %d re-run\n", r.NodesInUseBefore, r.NodesInUseAfter)
	for _, e := range r.Examples {
		fmt.Fprintf(&b, "  e.g. %s\n", e)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
