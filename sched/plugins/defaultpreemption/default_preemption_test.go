package defaultpreemption_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/defaultpreemption"
	"github.com/podbus/podbus/sched/plugins/nodename"
	"github.com/podbus/podbus/sched/plugins/noderesources"
	st "github.com/podbus/podbus/sched/schedtest"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// placed is a pod on a node: name (also its uid), priority, cpu in millicores, start offset in seconds.
type placed struct {
	name        string
	prio        int32
	milliCPU    int64
	startedSecs int
	preemptedBy string
}

func alloc(p placed) *pb.PodAllocation {
	return &pb.PodAllocation{
		Namespace: "default", Name: p.name, Priority: p.prio, PreemptedBy: p.preemptedBy,
		Requests:          &pb.Resources{MilliCpu: p.milliCPU, Pods: 1},
		CreationTimestamp: timestamppb.New(t0.Add(time.Duration(p.startedSecs) * time.Second)),
	}
}

// node is a 4-core node holding pods (and nominated pods, which the alloc record lists apart).
func node(name string, pods []placed, nominated ...placed) *framework.NodeInfo {
	var pps []*framework.PlacedPod
	for _, p := range pods {
		pps = append(pps, framework.NewPlacedPod(p.name, alloc(p)))
	}
	n := st.Node(name).Capacity("4", "8Gi", 110).Ready().Info().WithPods(pps...)
	for _, p := range nominated {
		n.Nominated = append(n.Nominated, framework.NewPlacedPod(p.name, alloc(p)))
	}
	return n
}

func preemptor(prio int32, cpu string) *st.PodWrapper {
	w := st.Pod("hi", "hi").Req(cpu, "")
	w.Obj().Spec.Priority = &prio
	return w
}

func TestPostFilter(t *testing.T) {
	lowFull := []placed{{"l1", 1, 1000, 0, ""}, {"l2", 1, 1000, 1, ""}, {"l3", 1, 1000, 2, ""}, {"l4", 1, 1000, 3, ""}}
	never := preemptor(10, "2")
	never.Obj().Spec.PreemptionPolicy = defaultpreemption.PreemptNever
	pinned := preemptor(10, "2").NodeName("n2")
	tests := []struct {
		name        string
		pod         *st.PodWrapper
		nodes       []*framework.NodeInfo
		wantNode    string
		wantVictims []string
		wantMsg     string
	}{
		{
			name: "minimal set: the least important pods go, the rest are reprieved",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{node("n1", []placed{
				{"a", 1, 2000, 0, ""}, {"b", 2, 1000, 0, ""}, {"c", 3, 1000, 0, ""},
			})},
			wantNode: "n1", wantVictims: []string{"a"},
		},
		{
			name: "reprieve goes by importance, not by fewest pods",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{node("n1", []placed{
				{"a", 1, 1000, 0, ""}, {"b", 2, 1000, 0, ""}, {"c", 3, 2000, 0, ""},
			})},
			wantNode: "n1", wantVictims: []string{"b", "a"},
		},
		{
			name:    "equal priority is never preempted",
			pod:     preemptor(10, "2"),
			nodes:   []*framework.NodeInfo{node("n1", []placed{{"a", 10, 2000, 0, ""}, {"b", 10, 2000, 0, ""}})},
			wantMsg: "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod",
		},
		{
			name:    "higher priority stays, and the lower ones are not enough",
			pod:     preemptor(10, "2"),
			nodes:   []*framework.NodeInfo{node("n1", []placed{{"hi", 20, 3000, 0, ""}, {"lo", 1, 1000, 0, ""}})},
			wantMsg: "preemption: 0/1 nodes are available: 1 Insufficient cpu",
		},
		{
			name: "lowest highest-victim priority wins",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{
				node("n1", []placed{{"a5", 5, 2000, 0, ""}, {"x", 20, 2000, 0, ""}}),
				node("n2", []placed{{"b3", 3, 2000, 0, ""}, {"y", 20, 2000, 0, ""}}),
			},
			wantNode: "n2", wantVictims: []string{"b3"},
		},
		{
			name: "then the smallest sum of priorities",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{
				node("n1", []placed{{"a3", 3, 1000, 0, ""}, {"b3", 3, 1000, 0, ""}, {"x", 20, 2000, 0, ""}}),
				node("n2", []placed{{"c3", 3, 1000, 0, ""}, {"d1", 1, 1000, 0, ""}, {"y", 20, 2000, 0, ""}}),
			},
			wantNode: "n2", wantVictims: []string{"c3", "d1"},
		},
		{
			// kube shifts each priority by MaxInt32+1 before summing, so fewer pods always sum lower.
			name: "fewest victims",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{
				node("n1", []placed{{"a2", 2, 1000, 0, ""}, {"b1", 1, 500, 0, ""}, {"c1", 1, 500, 0, ""}, {"x", 20, 2000, 0, ""}}),
				node("n2", []placed{{"d2", 2, 2000, 0, ""}, {"y", 20, 2000, 0, ""}}),
			},
			wantNode: "n2", wantVictims: []string{"d2"},
		},
		{
			name: "then the latest start among the highest-priority victims",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{
				node("n1", []placed{{"old", 3, 2000, 0, ""}, {"x", 20, 2000, 0, ""}}),
				node("n2", []placed{{"new", 3, 2000, 60, ""}, {"y", 20, 2000, 0, ""}}),
			},
			wantNode: "n2", wantVictims: []string{"new"},
		},
		{
			name: "ties go to the first node by name",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{
				node("n2", []placed{{"b", 3, 2000, 0, ""}, {"y", 20, 2000, 0, ""}}),
				node("n1", []placed{{"a", 3, 2000, 0, ""}, {"x", 20, 2000, 0, ""}}),
			},
			wantNode: "n1", wantVictims: []string{"a"},
		},
		{
			name: "unresolvable failures are not preempted on",
			pod:  pinned,
			nodes: []*framework.NodeInfo{
				node("n1", lowFull),
				node("n2", []placed{{"x", 20, 4000, 0, ""}}),
			},
			wantMsg: "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling",
		},
		{
			name:    "preemptionPolicy Never never preempts",
			pod:     never,
			nodes:   []*framework.NodeInfo{node("n1", lowFull)},
			wantMsg: defaultpreemption.MsgPolicyNever,
		},
		{
			name: "a higher-priority nominated pod keeps its room",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{
				node("n1", lowFull, placed{"nom", 100, 2000, 0, ""}),
				node("n2", lowFull),
			},
			// the latest started go first
			wantNode: "n2", wantVictims: []string{"l3", "l4"},
		},
		{
			name: "a lower-priority nominated pod does not",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{
				node("n1", lowFull[:3], placed{"nom", 5, 2000, 0, ""}),
			},
			wantNode: "n1", wantVictims: []string{"l3"},
		},
		{
			name: "victims of an earlier preemption still going: wait on the nominated node",
			pod:  preemptor(10, "2"),
			nodes: []*framework.NodeInfo{
				node("n1", []placed{{"v", 1, 4000, 0, "hi"}}, placed{"hi", 10, 2000, 0, ""}),
				node("n2", lowFull),
			},
			wantNode: "n1", wantMsg: defaultpreemption.MsgVictimsPending,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotNode, gotVictims, gotMsg := runPostFilter(t, []framework.Registration{
				{Plugin: nodename.New()},
				{Plugin: noderesources.NewFit()},
				{Plugin: defaultpreemption.New()},
			}, tt.pod.Info(), tt.nodes)
			if gotMsg != tt.wantMsg {
				t.Errorf("message %q, want %q", gotMsg, tt.wantMsg)
			}
			if gotNode != tt.wantNode {
				t.Errorf("nominated %q, want %q", gotNode, tt.wantNode)
			}
			if diff := cmp.Diff(tt.wantVictims, gotVictims); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
		})
	}
}

// runPostFilter runs a failed cycle as the scheduler does (PreFilter over the snapshot, Filter on
// every node with the nominated pods' room held) and then PostFilter.
func runPostFilter(t *testing.T, regs []framework.Registration, pod *framework.PodInfo, nodes []*framework.NodeInfo) (node string, victims []string, msg string) {
	t.Helper()
	fw, err := framework.New(regs...)
	if err != nil {
		t.Fatal(err)
	}
	snap := framework.SnapshotOf(nodes...)
	state := framework.NewCycleState()
	state.SetSnapshot(snap)
	skip := make([]bool, fw.NumFilters())
	if s := fw.RunPreFilterPlugins(state, pod, skip); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	var rejected []framework.NodeStatus
	for _, n := range snap.Nodes() {
		s := fw.RunFilterPlugins(state, pod, n.WithNominated(pod), skip)
		if s.IsSuccess() {
			t.Fatalf("pod fits %s already", n.Name())
		}
		rejected = append(rejected, framework.NodeStatus{Node: n, Status: s})
	}
	res, s := fw.RunPostFilterPlugins(state, pod, snap, rejected, skip)
	if s.Code() == framework.Error {
		t.Fatal(s.Message())
	}
	for _, v := range res.GetVictims() {
		victims = append(victims, v.Name)
	}
	return res.GetNominatedNode(), victims, s.Message()
}

func TestFitErrorWithPostFilterMessage(t *testing.T) {
	fe := &framework.FitError{NumAllNodes: 1, Reasons: map[string]int32{"Insufficient cpu": 1},
		PostFilterMsg: "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod"}
	want := "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
	if got := fe.Error(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
