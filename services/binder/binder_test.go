package binder

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestJudge(t *testing.T) {
	d := decision("u1", "web", "n1")
	tests := []struct {
		name string
		pod  *pb.Pod
		d    *pb.SchedulingDecision
		want verdict
	}{
		{"unbound", pod("u1", "web", "1"), d, verdictAct},
		{"unbound, unschedulable decision", pod("u1", "web", "1"), &pb.SchedulingDecision{Uid: "u1", Unschedulable: true}, verdictAct},
		{"gone", nil, d, verdictRelease},
		{"other uid", pod("u2", "web", "1"), d, verdictRelease},
		{"deleting, unbound", pod("u1", "web", "1", deleting), d, verdictRelease},
		{"bound here", pod("u1", "web", "1", boundTo("n1")), d, verdictBound},
		{"bound elsewhere", pod("u1", "web", "1", boundTo("n2")), d, verdictRelease},
		{"bound, unschedulable decision", pod("u1", "web", "1", boundTo("n2")), &pb.SchedulingDecision{Uid: "u1", Unschedulable: true}, verdictRelease},
		{"bound here, deleting", pod("u1", "web", "1", boundTo("n1"), deleting), d, verdictDone},
		{"pre-bound here", pod("u1", "web", "1", preBoundTo("n1")), d, verdictAct},
		{"pre-bound, unschedulable decision", pod("u1", "web", "1", preBoundTo("n1")), &pb.SchedulingDecision{Uid: "u1", Unschedulable: true}, verdictAct},
		{"pre-bound elsewhere", pod("u1", "web", "1", preBoundTo("n2")), d, verdictRelease},
		{"pre-bound, deleting", pod("u1", "web", "1", preBoundTo("n1"), deleting), d, verdictRelease},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judge(tt.pod, tt.d); got != tt.want {
				t.Errorf("judge = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	const seq = 42
	unschedulable := &pb.SchedulingDecision{Uid: "u1", Namespace: "default", Name: "web", Unschedulable: true, PodRevision: 1,
		Message: "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) were not ready."}
	type event struct{ typ, reason, message string }
	tests := []struct {
		name string
		pod  *pb.Pod
		// reserved are reservations made before the decision (by earlier or crashed decisions).
		reserved  map[string][]*pb.Pod
		d         *pb.SchedulingDecision
		wantNode  string
		wantCond  *pb.PodCondition // PodScheduled afterwards (nil: none)
		wantAlloc map[string][]string
		wantBound int // pod.bound messages
		wantQueue bool
		wantEvent *event
	}{
		{
			name:      "binds when it fits",
			pod:       pod("u1", "web", "500m"),
			d:         decision("u1", "web", "n1"),
			wantNode:  "n1",
			wantCond:  &pb.PodCondition{Type: "PodScheduled", Status: "True"},
			wantAlloc: map[string][]string{"n1": {"u1"}},
			wantBound: 1,
			wantEvent: &event{"Normal", "Scheduled", "Successfully assigned default/web to n1"},
		},
		{
			name:      "no room on the node",
			pod:       pod("u1", "web", "500m"),
			reserved:  map[string][]*pb.Pod{"n1": {pod("u9", "other", "600m")}},
			d:         decision("u1", "web", "n1"),
			wantAlloc: map[string][]string{"n1": {"u9"}},
			wantQueue: true,
		},
		{
			name:      "unknown node",
			pod:       pod("u1", "web", "500m"),
			d:         decision("u1", "web", "n9"),
			wantQueue: true,
		},
		{
			name:      "node not ready",
			pod:       pod("u1", "web", "500m"),
			d:         decision("u1", "web", "n3"),
			wantQueue: true,
		},
		{
			name:      "unschedulable",
			pod:       pod("u1", "web", "500m"),
			d:         unschedulable,
			wantCond:  &pb.PodCondition{Type: "PodScheduled", Status: "False", Reason: "Unschedulable", Message: unschedulable.Message},
			wantEvent: &event{"Warning", "FailedScheduling", unschedulable.Message},
		},
		{
			name:     "pod gone: the decision's reservation is released",
			reserved: map[string][]*pb.Pod{"n1": {pod("u1", "web", "500m")}},
			d:        decision("u1", "web", "n1"),
		},
		{
			name:     "pod replaced by another uid",
			pod:      pod("u2", "web", "500m"),
			reserved: map[string][]*pb.Pod{"n1": {pod("u1", "web", "500m")}},
			d:        decision("u1", "web", "n1"),
		},
		{
			name:     "unbound pod being deleted",
			pod:      pod("u1", "web", "500m", deleting),
			reserved: map[string][]*pb.Pod{"n1": {pod("u1", "web", "500m")}},
			d:        decision("u1", "web", "n1"),
		},
		{
			name:      "already bound here: handed to the agent again",
			pod:       pod("u1", "web", "500m", boundTo("n1")),
			reserved:  map[string][]*pb.Pod{"n1": {pod("u1", "web", "500m")}},
			d:         decision("u1", "web", "n1"),
			wantNode:  "n1",
			wantCond:  &pb.PodCondition{Type: "PodScheduled", Status: "True"},
			wantAlloc: map[string][]string{"n1": {"u1"}},
			wantBound: 1,
			wantEvent: &event{"Normal", "Scheduled", "Successfully assigned default/web to n1"},
		},
		{
			name:      "already bound here without reservation: restored",
			pod:       pod("u1", "web", "500m", boundTo("n1")),
			d:         decision("u1", "web", "n1"),
			wantNode:  "n1",
			wantCond:  &pb.PodCondition{Type: "PodScheduled", Status: "True"},
			wantAlloc: map[string][]string{"n1": {"u1"}},
			wantBound: 1,
			wantEvent: &event{"Normal", "Scheduled", "Successfully assigned default/web to n1"},
		},
		{
			name:      "bound elsewhere: this node's reservation is released",
			pod:       pod("u1", "web", "500m", boundTo("n2")),
			reserved:  map[string][]*pb.Pod{"n1": {pod("u1", "web", "500m")}, "n2": {pod("u1", "web", "500m")}},
			d:         decision("u1", "web", "n1"),
			wantNode:  "n2",
			wantCond:  &pb.PodCondition{Type: "PodScheduled", Status: "True"},
			wantAlloc: map[string][]string{"n2": {"u1"}},
		},
		{
			name:      "created with nodeName: reserved, then bound",
			pod:       pod("u1", "web", "500m", preBoundTo("n1")),
			d:         decision("u1", "web", "n1"),
			wantNode:  "n1",
			wantCond:  &pb.PodCondition{Type: "PodScheduled", Status: "True"},
			wantAlloc: map[string][]string{"n1": {"u1"}},
			wantBound: 1,
			wantEvent: &event{"Normal", "Scheduled", "Successfully assigned default/web to n1"},
		},
		{
			name:      "created with nodeName, no room: never overcommitted, back to the schedulers",
			pod:       pod("u1", "web", "500m", preBoundTo("n1")),
			reserved:  map[string][]*pb.Pod{"n1": {pod("u9", "other", "600m")}},
			d:         decision("u1", "web", "n1"),
			wantNode:  "n1",
			wantAlloc: map[string][]string{"n1": {"u9"}},
			wantQueue: true,
		},
		{
			name:      "created with nodeName, judged unschedulable: waits",
			pod:       pod("u1", "web", "500m", preBoundTo("n1")),
			d:         unschedulable,
			wantNode:  "n1",
			wantCond:  &pb.PodCondition{Type: "PodScheduled", Status: "False", Reason: "Unschedulable", Message: unschedulable.Message},
			wantEvent: &event{"Warning", "FailedScheduling", unschedulable.Message},
		},
		{
			name:      "bound here and being deleted: left to pod.deleted",
			pod:       pod("u1", "web", "500m", boundTo("n1"), deleting),
			reserved:  map[string][]*pb.Pod{"n1": {pod("u1", "web", "500m")}},
			d:         decision("u1", "web", "n1"),
			wantNode:  "n1",
			wantCond:  &pb.PodCondition{Type: "PodScheduled", Status: "True"},
			wantAlloc: map[string][]string{"n1": {"u1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t)
			h.addNode(node("n1", "1", true))
			h.addNode(node("n2", "1", true))
			h.addNode(node("n3", "1", false))
			s := h.service("b1")
			ctx := context.Background()
			var rev uint64
			if tt.pod != nil {
				rev = h.addPod(tt.pod)
			}
			for n, pods := range tt.reserved {
				for _, p := range pods {
					if res, _, err := s.reserve(ctx, n, p); err != nil || res != reservationAdded {
						t.Fatalf("setup reserve: %v %v", res, err)
					}
				}
			}
			conflicts := metrics.Counter("binder.conflicts")

			// Twice: a redelivered decision must change nothing more.
			for range 2 {
				if err := s.decide(ctx, tt.d, seq); err != nil {
					t.Fatalf("decide: %v", err)
				}
			}

			got := h.getPod("web")
			if got.GetSpec().GetNodeName() != tt.wantNode {
				t.Errorf("nodeName = %q, want %q", got.GetSpec().GetNodeName(), tt.wantNode)
			}
			cond := podutil.PodCondition(got, podutil.PodScheduled)
			if cond != nil {
				cond = proto.Clone(cond).(*pb.PodCondition)
				cond.LastTransitionTime = nil
			}
			if !proto.Equal(cond, tt.wantCond) {
				t.Errorf("PodScheduled = %v, want %v", cond, tt.wantCond)
			}
			for _, n := range []string{"n1", "n2"} {
				want := map[string]bool{}
				for _, uid := range tt.wantAlloc[n] {
					want[uid] = true
				}
				if diff := cmp.Diff(want, h.allocPods(n)); diff != "" {
					t.Errorf("alloc/%s (-want +got):\n%s", n, diff)
				}
			}

			boundMsgs := h.msgs(bus.StreamPods, "pod.bound.*")
			if len(boundMsgs) != tt.wantBound {
				t.Errorf("pod.bound messages = %d, want %d", len(boundMsgs), tt.wantBound)
			}
			for _, m := range boundMsgs {
				b := bustest.Decode(t, m, &pb.PodBinding{})
				if m.Subject != bus.SubjPodBound(tt.wantNode) || b.GetNode() != tt.wantNode || b.GetPod().GetSpec().GetNodeName() != tt.wantNode {
					t.Errorf("binding on %s for node %s", m.Subject, b.GetNode())
				}
				if id := m.Header.Get(bus.HdrMsgID); id != "bound-u1" {
					t.Errorf("binding msg id = %q", id)
				}
				if c := m.Header.Get(bus.HdrCorrelation); c != "corr-u1" {
					t.Errorf("binding correlation = %q", c)
				}
			}

			pending := h.msgs(bus.StreamPods, bus.SubjPodPendingAll)
			if gotQueue := len(pending) > 0; gotQueue != tt.wantQueue {
				t.Errorf("requeued = %v, want %v", gotQueue, tt.wantQueue)
			}
			wantConflicts := int64(0)
			if tt.wantQueue {
				wantConflicts = 2 // both deliveries refused; the requeue is deduplicated
				if len(pending) != 1 {
					t.Errorf("pod.pending messages = %d, want 1", len(pending))
				}
				pp := bustest.Decode(t, pending[0], &pb.PendingPod{})
				if pp.GetCause() != "conflict" || pp.GetRevision() != rev || pp.GetPod().GetMetadata().GetUid() != "u1" {
					t.Errorf("requeue = %v", pp)
				}
				if id := pending[0].Header.Get(bus.HdrMsgID); id != fmt.Sprintf("conflict-u1-%d", seq) {
					t.Errorf("requeue msg id = %q", id)
				}
				if tr := pending[0].Header.Get(bus.HdrTrigger); (tr == "") == strings.Contains(tt.name, "no room") || tr != "" && (tr[0] != 'a' || len(tr) < 2) {
					t.Errorf("requeue trigger = %q, want a<alloc revision> or none", tr)
				}
			}
			if got := metrics.Counter("binder.conflicts") - conflicts; got != wantConflicts {
				t.Errorf("binder.conflicts grew by %d, want %d", got, wantConflicts)
			}

			events := h.msgs(bus.StreamEvents, bus.SubjEvent("default", "web"))
			switch {
			case tt.wantEvent == nil && len(events) > 0:
				t.Errorf("unexpected events: %d", len(events))
			case tt.wantEvent != nil && len(events) != 1:
				t.Errorf("events = %d, want 1", len(events))
			case tt.wantEvent != nil:
				ev := bustest.Decode(t, events[0], &pb.Event{})
				gotEv := event{ev.GetType(), ev.GetReason(), ev.GetMessage()}
				if gotEv != *tt.wantEvent || ev.GetSource().GetComponent() != "default-scheduler" || ev.GetInvolvedObject().GetUid() != "u1" {
					t.Errorf("event = %+v from %q, want %+v from default-scheduler", gotEv, ev.GetSource().GetComponent(), *tt.wantEvent)
				}
			}
		})
	}
}

func TestPodDeletedReleases(t *testing.T) {
	h := setup(t)
	h.addNode(node("n1", "1", true))
	s := h.service("direct")
	p := pod("u1", "web", "500m", boundTo("n1"))
	if _, _, err := s.reserve(context.Background(), "n1", p); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.reserve(context.Background(), "n1", pod("u2", "keep", "100m")); err != nil {
		t.Fatal(err)
	}
	h.run("b1")
	// Twice, as both the store and the status service may announce it; and once without a node.
	for i, d := range []*pb.PodDeleted{
		{Uid: "u1", Namespace: "default", Name: "web", Node: "n1"},
		{Uid: "u1", Namespace: "default", Name: "web", Node: "n1"},
		{Uid: "u1", Namespace: "default", Name: "web"},
	} {
		if err := h.pub.Publish(context.Background(), bus.SubjPodDeleted, d, bus.Meta{MsgID: fmt.Sprint("d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	h.quiesce()
	if diff := cmp.Diff(map[string]bool{"u2": true}, h.allocPods("n1")); diff != "" {
		t.Errorf("alloc/n1 (-want +got):\n%s", diff)
	}
}

func TestMalformedIsParked(t *testing.T) {
	noNode, _ := proto.Marshal(&pb.SchedulingDecision{Uid: "u1", Namespace: "default", Name: "web"})
	tests := []struct {
		name, subject, consumer string
		data                    []byte
	}{
		{"decision not protobuf", bus.SubjPodScheduled, "binder", []byte("\xff\xff garbage")},
		{"decision without node", bus.SubjPodScheduled, "binder", noNode},
		{"deletion not protobuf", bus.SubjPodDeleted, "binder-deleted", []byte("\xff\xff garbage")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t)
			h.run("b1")
			before := metrics.Counter("malformed." + tt.consumer)
			if _, err := h.conn.JS.PublishMsg(context.Background(), &nats.Msg{Subject: tt.subject, Data: tt.data}); err != nil {
				t.Fatal(err)
			}
			bustest.Eventually(t, 10*time.Second, func() bool {
				return len(h.msgs(bus.StreamDead, bus.SubjDeadPrefix+tt.subject)) == 1
			}, "message never parked")
			if got := metrics.Counter("malformed."+tt.consumer) - before; got != 1 {
				t.Errorf("malformed.%s grew by %d, want 1", tt.consumer, got)
			}
		})
	}
}

// cluster is the common setup of the concurrency tests: three nodes with room for two pods each,
// and more pods than fit.
func cluster(h *harness, pods int) (nodes []string, all []*pb.Pod, inv *invariants) {
	allocatable := map[string]*pb.Resources{}
	for i := 1; i <= 3; i++ {
		n := node(fmt.Sprint("n", i), "1", true)
		h.addNode(n)
		nodes = append(nodes, n.GetMetadata().GetName())
		allocatable[n.GetMetadata().GetName()] = podutil.NodeAllocatable(n)
	}
	for i := range pods {
		p := pod(fmt.Sprint("u", i), fmt.Sprint("p", i), "400m")
		h.addPod(p)
		all = append(all, p)
	}
	return nodes, all, h.watchInvariants(allocatable)
}

// everywhere publishes, in a seeded random order, a decision for every pod on every node from each of
// `schedulers` stale schedulers: the worst case of conflicting decisions.
func (h *harness) everywhere(nodes []string, pods []*pb.Pod, schedulers int, seed int64) {
	h.t.Helper()
	type one struct {
		d  *pb.SchedulingDecision
		id string
	}
	var all []one
	for sch := range schedulers {
		for _, p := range pods {
			for _, n := range nodes {
				d := decision(p.GetMetadata().GetUid(), p.GetMetadata().GetName(), n)
				d.Scheduler = fmt.Sprint("scheduler/s", sch)
				all = append(all, one{d, fmt.Sprintf("sched-%s-%s-%d", d.GetUid(), n, sch)})
			}
		}
	}
	rand.New(rand.NewSource(seed)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, o := range all {
		h.publishDecision(o.d, o.id)
	}
}

// Two binder replicas, every pod decided onto every node by two schedulers: each pod is bound at most
// once and no node is ever committed beyond its allocatable.
func TestConcurrentConflictingDecisions(t *testing.T) {
	h := setup(t)
	nodes, pods, inv := cluster(h, 12)
	h.run("b1")
	h.run("b2")
	h.everywhere(nodes, pods, 2, 1)
	h.quiesce()
	inv.check(t)
	bound := h.checkFinal(nodes, pods)
	if bound == 0 || bound > 6 {
		t.Errorf("%d pods bound; want between 1 and 6 (3 nodes x 2)", bound)
	}
}

// A binder that stopped between reserving and binding leaves a reservation and an unacknowledged
// decision. Simulated by calling the reserve (and bind) steps directly, then letting a fresh binder
// handle the redelivered decision.
func TestCrashBetweenReserveAndBind(t *testing.T) {
	tests := []struct {
		name string
		// crashed runs the steps the stopped binder completed.
		crashed func(t *testing.T, s *Service, h *harness, p *pb.Pod, rev uint64)
		// then are the decisions delivered afterwards (the redelivery last).
		then      []string
		wantNode  string
		wantEvent bool
	}{
		{
			name: "redelivery binds with the reservation it finds",
			crashed: func(t *testing.T, s *Service, h *harness, p *pb.Pod, rev uint64) {
				mustReserve(t, s, "n1", p)
			},
			then:      []string{"n1"},
			wantNode:  "n1",
			wantEvent: true,
		},
		{
			name: "another decision bound it first: redelivery releases",
			crashed: func(t *testing.T, s *Service, h *harness, p *pb.Pod, rev uint64) {
				mustReserve(t, s, "n1", p)
			},
			then:     []string{"n2", "n1"},
			wantNode: "n2",
		},
		{
			name: "pod deleted meanwhile: redelivery releases",
			crashed: func(t *testing.T, s *Service, h *harness, p *pb.Pod, rev uint64) {
				mustReserve(t, s, "n1", p)
				if err := bus.Delete(context.Background(), h.b.Pods, bus.PodKey("default", "web"), rev); err != nil {
					t.Fatal(err)
				}
			},
			then: []string{"n1"},
		},
		{
			name: "stopped after the binding, before telling the agent",
			crashed: func(t *testing.T, s *Service, h *harness, p *pb.Pod, rev uint64) {
				mustReserve(t, s, "n1", p)
				if _, _, _, err := s.bind(context.Background(), bus.PodKey("default", "web"), p, rev, decision("u1", "web", "n1")); err != nil {
					t.Fatal(err)
				}
			},
			then:      []string{"n1"},
			wantNode:  "n1",
			wantEvent: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t)
			nodes := []string{"n1", "n2"}
			allocatable := map[string]*pb.Resources{}
			for _, n := range nodes {
				nd := node(n, "1", true)
				h.addNode(nd)
				allocatable[n] = podutil.NodeAllocatable(nd)
			}
			inv := h.watchInvariants(allocatable)
			p := pod("u1", "web", "600m")
			rev := h.addPod(p)
			tt.crashed(t, h.service("crashed"), h, p, rev)

			h.run("b1")
			for i, n := range tt.then {
				h.publishDecision(decision("u1", "web", n), fmt.Sprint("sched-", i))
				h.quiesce() // in order
			}
			inv.check(t)
			if got := h.getPod("web").GetSpec().GetNodeName(); got != tt.wantNode {
				t.Errorf("bound to %q, want %q", got, tt.wantNode)
			}
			h.checkFinal(nodes, []*pb.Pod{p})
			if got := len(h.msgs(bus.StreamEvents, bus.SubjEvent("default", "web"))) == 1; got != tt.wantEvent && tt.wantNode == "n1" {
				t.Errorf("Scheduled event recorded = %v, want %v", got, tt.wantEvent)
			}
		})
	}
}

func mustReserve(t *testing.T, s *Service, node string, p *pb.Pod) {
	t.Helper()
	if res, _, err := s.reserve(context.Background(), node, p); err != nil || !res.ok() {
		t.Fatalf("reserve on %s: %v %v", node, res, err)
	}
}

// A binder that crashes between reserving and binding (every other decision it reserves for), is then
// stopped in the middle of a burst and replaced by two fresh replicas, after an earlier crash left
// reservations behind: the invariants hold and nothing leaks.
func TestRestartMidRun(t *testing.T) {
	h := setup(t)
	nodes, pods, inv := cluster(h, 9)
	crashed := h.service("crashed")
	mustReserve(t, crashed, "n1", pods[0])
	mustReserve(t, crashed, "n2", pods[0])
	mustReserve(t, crashed, "n3", pods[1])

	var mu sync.Mutex
	calls := 0
	crashy := func(s *Service) {
		s.afterReserve = func(*pb.SchedulingDecision) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls%2 == 1 {
				return errors.New("simulated crash between reserve and bind")
			}
			return nil
		}
	}
	stop := h.run("b1", crashy)
	h.everywhere(nodes, pods[:5], 1, 2)
	bustest.Eventually(t, 20*time.Second, func() bool {
		return len(h.msgs(bus.StreamPods, "pod.bound.*")) > 0
	}, "nothing bound by the first binder")
	stop()
	h.everywhere(nodes, pods[5:], 1, 3)
	h.run("b2", crashy)
	h.run("b3")
	h.quiesce()
	inv.check(t)
	if bound := h.checkFinal(nodes, pods); bound == 0 || bound > 6 {
		t.Errorf("%d pods bound; want between 1 and 6", bound)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls < 2 {
		t.Errorf("only %d reservations went through the crash seam", calls)
	}
}

// A decision carries the pod as the scheduler saw it, which saves the binder a read. When the stored
// pod changed since, the binder must act on the stored one: the pod's compare-and-set on the decided
// revision fails and the next attempt reads it.
func TestDecisionCarriesPod(t *testing.T) {
	tests := []struct {
		name     string
		change   func(p *pb.Pod) // applied to the stored pod after the decision (nil: none)
		wantNode string
		wantUIDs map[string]bool
	}{
		{name: "unchanged: binds the stored pod", wantNode: "n1", wantUIDs: map[string]bool{"u1": true}},
		{name: "deleted since: not bound, reservation released", change: deleting, wantUIDs: map[string]bool{}},
		{name: "labels changed since: binds the stored pod", change: func(p *pb.Pod) { p.Metadata.Labels = map[string]string{"v": "2"} },
			wantNode: "n1", wantUIDs: map[string]bool{"u1": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t)
			h.addNode(node("n1", "1", true))
			decided := pod("u1", "web", "500m")
			rev := h.addPod(decided)
			if tt.change != nil {
				stored := proto.Clone(decided).(*pb.Pod)
				tt.change(stored)
				if _, err := bus.Update(context.Background(), h.b.Pods, bus.PodKey("default", "web"), stored, rev); err != nil {
					t.Fatal(err)
				}
			}
			h.run("b1")
			d := decision("u1", "web", "n1")
			d.PodRevision, d.Pod = rev, decided
			h.publishDecision(d, "d1")
			h.quiesce()
			got := h.getPod("web")
			if node := got.GetSpec().GetNodeName(); node != tt.wantNode {
				t.Errorf("bound to %q, want %q", node, tt.wantNode)
			}
			if tt.change != nil && tt.wantNode != "" && got.GetMetadata().GetLabels()["v"] != "2" {
				t.Errorf("the binding overwrote the change made after the decision: %v", got.GetMetadata().GetLabels())
			}
			if diff := cmp.Diff(tt.wantUIDs, h.allocPods("n1"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("alloc/n1 (-want +got):\n%s", diff)
			}
		})
	}
}

// Once the watch has delivered the existing records, a node without one in the cache is taken to have
// none, and its first reservation creates the record without reading it. A record the cache did not
// see yet (another binder's, still on the way) makes that create conflict: the reservation then reads
// the record and keeps what it holds.
func TestReserveWithoutARecordInTheCache(t *testing.T) {
	tests := []struct {
		name       string
		elsewhere  bool // another binder wrote n1's record, unseen by this one
		wantPods   map[string]bool
		wantSynced bool
	}{
		{"no record", false, map[string]bool{"u1": true}, true},
		{"a record the cache has not seen", true, map[string]bool{"u0": true, "u1": true}, true},
		{"the watch has not caught up", true, map[string]bool{"u0": true, "u1": true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t)
			h.addNode(node("n1", "4", true))
			if tt.elsewhere {
				other := h.service("other")
				if res, _, err := other.reserve(context.Background(), "n1", pod("u0", "db", "1")); err != nil || res != reservationAdded {
					t.Fatalf("other binder: %v, %v", res, err)
				}
			}
			s := h.service("b1") // nothing watches: the cache holds what the test says
			if tt.wantSynced {
				s.alloc.sync()
			}
			if _, known := s.alloc.view("n1", "u1"); known != tt.wantSynced {
				t.Fatalf("known = %v, want %v", known, tt.wantSynced)
			}
			res, _, err := s.reserve(context.Background(), "n1", pod("u1", "web", "1"))
			if err != nil || res != reservationAdded {
				t.Fatalf("reserve = %v, %v", res, err)
			}
			if diff := cmp.Diff(tt.wantPods, h.allocPods("n1")); diff != "" {
				t.Errorf("alloc/n1 (-want +got):\n%s", diff)
			}
		})
	}
}

// Entries are never changed once taken in: settling a tentative reservation writes a copy of the
// cache's entry, which the view or a decision may hold.
func TestCachedEntriesStayAsWritten(t *testing.T) {
	h := setup(t)
	h.addNode(node("n1", "4", true))
	s := h.service("b1")
	ctx := context.Background()
	if res, _, err := s.reserveAs(ctx, "n1", pod("u1", "web", "1"), "dec-1", "dec-1"); err != nil || res != reservationAdded {
		t.Fatalf("reserve = %v, %v", res, err)
	}
	written := s.alloc.m["n1"].pods["u1"]
	if err := s.settle(ctx, "n1", "u1", "dec-1", true); err != nil {
		t.Fatal(err)
	}
	if got := written.GetTentative(); got != "dec-1" {
		t.Errorf("the written entry changed: tentative %q, want dec-1", got)
	}
	a, _, err := ReadAllocation(ctx, h.b.Alloc, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if e := a.Pods["u1"]; e == nil || e.GetTentative() != "" || e.GetDecision() != "dec-1" {
		t.Errorf("stored entry %v, want u1 confirmed, made by dec-1", e)
	}
}

// Binders racing for one node's room, each with its own cache and each pod asked for by two of them,
// fill the node exactly: the compare-and-set over the node's keys refuses every write based on a
// state another binder changed, so the total never passes allocatable and no pod counts twice.
func TestConcurrentBindersNeverOvercommit(t *testing.T) {
	h := setup(t)
	h.addNode(node("n1", "4", true)) // room for 8 pods of 500m
	ctx := context.Background()
	binders := make([]*Service, 4)
	for i := range binders {
		binders[i] = h.service(fmt.Sprintf("b%d", i))
	}
	var wg sync.WaitGroup
	added := make(chan string, 64)
	for i := range 12 {
		p := pod(fmt.Sprintf("u%02d", i), fmt.Sprintf("p%02d", i), "500m")
		for _, s := range []*Service{binders[i%4], binders[(i+1)%4]} {
			wg.Go(func() {
				res, _, err := s.reserve(ctx, "n1", p)
				if err != nil {
					t.Errorf("reserve %s: %v", p.GetMetadata().GetUid(), err)
				}
				if res == reservationAdded {
					added <- p.GetMetadata().GetUid()
				}
			})
		}
	}
	wg.Wait()
	close(added)
	seen := map[string]bool{}
	for uid := range added {
		if seen[uid] {
			t.Errorf("pod %s added twice", uid)
		}
		seen[uid] = true
	}
	a, _, err := ReadAllocation(ctx, h.b.Alloc, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.GetPods()) != 8 || len(seen) != 8 || a.GetTotal().GetMilliCpu() != 4000 {
		t.Errorf("node holds %d pods (%d added), %dm cpu; want 8 pods, 4000m", len(a.GetPods()), len(seen), a.GetTotal().GetMilliCpu())
	}
}

// The binder reads every field of a decision but the pod it carries, and of that pod what routes the
// decision: a field added to SchedulingDecision must be added to decisionMask, or the binder drops it.
func TestDecisionMask(t *testing.T) {
	fields := (&pb.SchedulingDecision{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if _, ok := decisionMask[fd.Number()]; !ok && fd.Name() != "pod" {
			t.Errorf("decisionMask leaves out %s", fd.Name())
		}
	}

	antiAffinity := pod("u2", "db", "100m")
	antiAffinity.Spec.Affinity = &pb.Affinity{PodAntiAffinity: &pb.PodAffinity{
		Required: []*pb.PodAffinityTerm{{TopologyKey: "kubernetes.io/hostname"}}}}
	spread := pod("u3", "api", "100m")
	spread.Spec.TopologySpreadConstraints = []*pb.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone"}}
	tests := []struct {
		name string
		pod  *pb.Pod
		want string
	}{
		{"no constraints: by node", pod("u1", "web", "100m"), "n1"},
		{"required anti-affinity: checked", antiAffinity, keyChecked},
		{"spread, DoNotSchedule: checked", spread, keyChecked},
		{"no pod carried: by node", nil, "n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decision("u1", "web", "n1")
			d.Pod, d.Reasons, d.Victims = tt.pod, map[string]int32{"r": 1}, []*pb.PreemptionVictim{{Uid: "v"}}
			data, err := proto.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			m := &bus.Msg{Data: data}
			if got := decisionNode(m); got != tt.want {
				t.Errorf("decisionNode = %q, want %q", got, tt.want)
			}
			kept, ok := m.Kept().(*pb.SchedulingDecision)
			if !ok {
				t.Fatal("no decision kept")
			}
			want := proto.Clone(d).(*pb.SchedulingDecision)
			want.Pod = nil
			got := proto.Clone(kept).(*pb.SchedulingDecision)
			got.Pod = nil
			if !proto.Equal(got, want) {
				t.Errorf("kept decision differs beyond its pod:\n got %v\nwant %v", got, want)
			}
		})
	}
}
