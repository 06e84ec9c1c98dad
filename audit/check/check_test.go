package check

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// step is one record of a made-up history.
type step func(seq uint64) *audit.Record

func kvRecord(bucket, key string, m proto.Message) step {
	return func(seq uint64) *audit.Record {
		h := nats.Header{}
		h.Set("Nats-Stream-Source", fmt.Sprintf("%s %d", bus.KVStream(bucket), seq))
		r := &audit.Record{Seq: seq, Subject: bus.SubjKV(bucket) + key, Header: h}
		if m == nil {
			h.Set(bus.HdrKVOperation, "DEL")
			return r
		}
		r.Data, _ = proto.Marshal(m)
		return r
	}
}

func nodeRec(name, cpu string) step {
	return kvRecord(bus.BucketNodes, bus.NodeKey(name), &pb.Node{Metadata: &pb.ObjectMeta{Name: name},
		Status: &pb.NodeStatus{Allocatable: map[string]string{"cpu": cpu, "memory": "4Gi", "pods": "110"}}})
}

func podRec(name string, p *pb.Pod) step {
	return kvRecord(bus.BucketPods, bus.PodKey("default", name), p)
}

func podDel(name string) step { return kvRecord(bus.BucketPods, bus.PodKey("default", name), nil) }

func deleteCmd(name string) step {
	return func(seq uint64) *audit.Record {
		data, _ := proto.Marshal(&pb.PodCommand{Op: pb.PodCommand_OP_DELETE, Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: name}}})
		return &audit.Record{Seq: seq, Subject: bus.SubjPodDelete, Header: nats.Header{}, Data: data}
	}
}

func boundMsg(uid, name, node string) step {
	return func(seq uint64) *audit.Record {
		data, _ := proto.Marshal(&pb.PodBinding{Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: name, Uid: uid},
			Spec: &pb.PodSpec{NodeName: node}}})
		return &audit.Record{Seq: seq, Subject: bus.SubjPodBound(node), Header: nats.Header{}, Data: data}
	}
}

type podOpt func(*pb.Pod)

func pod(uid, cpu string, opts ...podOpt) *pb.Pod {
	p := &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Uid: uid},
		Spec:   &pb.PodSpec{Containers: []*pb.Container{{Name: "c", Resources: &pb.ResourceRequirements{Requests: map[string]string{"cpu": cpu}}}}},
		Status: &pb.PodStatus{Phase: "Pending"}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func on(node string) podOpt {
	return func(p *pb.Pod) {
		p.Spec.NodeName = node
		p.Status.Conditions = append(p.Status.Conditions, &pb.PodCondition{Type: podutil.PodScheduled, Status: podutil.True})
	}
}

func ready(p *pb.Pod) {
	p.Status.Phase = "Running"
	p.Status.Conditions = append(p.Status.Conditions, &pb.PodCondition{Type: podutil.PodReady, Status: podutil.True})
}

func phase(ph string) podOpt { return func(p *pb.Pod) { p.Status.Phase = ph } }

func deleting(grace int64) podOpt {
	return func(p *pb.Pod) {
		p.Metadata.DeletionTimestamp = timestamppb.Now()
		p.Metadata.DeletionGracePeriodSeconds = proto.Int64(grace)
	}
}

// gen sets the workload's update generation: label and annotation.
func gen(label, ann string) podOpt {
	return func(p *pb.Pod) {
		if label != "" {
			p.Metadata.Labels = map[string]string{GenLabel: label}
		}
		if ann != "" {
			p.Metadata.Annotations = map[string]string{GenAnnotation: ann}
		}
	}
}

func TestHistory(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
		end   bool
		want  []Violation // Kind, Pod, UID, Node, Revision compared
	}{
		{
			name: "two pods fill a node, one is deleted on request",
			steps: []step{nodeRec("n1", "2"),
				podRec("a", pod("ua", "1")), podRec("a", pod("ua", "1", on("n1"), ready)),
				podRec("b", pod("ub", "1")), podRec("b", pod("ub", "1", on("n1"), ready)),
				deleteCmd("b"), podRec("b", pod("ub", "1", on("n1"), ready, deleting(30))), podDel("b"),
				podRec("c", pod("uc", "1", on("n1"), ready))},
			end: true,
		},
		{
			name: "overcommit named at the revision that commits the third pod",
			steps: []step{nodeRec("n1", "2"),
				podRec("a", pod("ua", "1", on("n1"))), podRec("b", pod("ub", "1", on("n1"))), podRec("c", pod("uc", "1", on("n1")))},
			want: []Violation{{Kind: KindOvercommit, Pod: "default/c", UID: "uc", Node: "n1", Revision: 4}},
		},
		{
			name: "terminal and force-deleted pods free their room",
			steps: []step{nodeRec("n1", "2"),
				podRec("a", pod("ua", "1", on("n1"))), podRec("b", pod("ub", "1", on("n1"))),
				podRec("a", pod("ua", "1", on("n1"), phase("Succeeded"))),
				deleteCmd("b"), podRec("b", pod("ub", "1", on("n1"), deleting(0))),
				podRec("c", pod("uc", "1", on("n1"))), podRec("d", pod("ud", "1", on("n1")))},
		},
		{
			name: "a pod named on a node but not bound by a binder does not count",
			steps: []step{nodeRec("n1", "1"),
				podRec("a", pod("ua", "1", on("n1"))), podRec("b", pod("ub", "1", func(p *pb.Pod) { p.Spec.NodeName = "n1" }))},
		},
		{
			name:  "removed without a delete request",
			steps: []step{podRec("a", pod("ua", "1")), podDel("a")},
			want:  []Violation{{Kind: KindLost, Pod: "default/a", UID: "ua", Revision: 2}},
		},
		{
			name:  "replaced by another incarnation without a delete request",
			steps: []step{podRec("a", pod("ua", "1")), podRec("a", pod("ua2", "1"))},
			want:  []Violation{{Kind: KindLost, Pod: "default/a", UID: "ua", Revision: 2}},
		},
		{
			name:  "rebound to another node",
			steps: []step{nodeRec("n1", "4"), nodeRec("n2", "4"), podRec("a", pod("ua", "1", on("n1"))), podRec("a", pod("ua", "1", on("n2")))},
			want:  []Violation{{Kind: KindRebound, Pod: "default/a", UID: "ua", Node: "n2", Revision: 4}},
		},
		{
			name:  "pod.bound to two nodes",
			steps: []step{boundMsg("ua", "a", "n1"), boundMsg("ua", "a", "n1"), boundMsg("ua", "a", "n2")},
			want:  []Violation{{Kind: KindDoubleBind, Pod: "default/a", UID: "ua", Node: "n2"}},
		},
		{
			name:  "update generations only go up",
			steps: []step{podRec("a", pod("ua", "1")), podRec("a", pod("ua", "1", gen("1", "1"))), podRec("a", pod("ua", "1", gen("3", "3")))},
		},
		{
			name:  "an older generation written over a newer one",
			steps: []step{podRec("a", pod("ua", "1", gen("2", "2"))), podRec("a", pod("ua", "1", gen("1", "1")))},
			want:  []Violation{{Kind: KindLostUpdate, Pod: "default/a", UID: "ua", Revision: 2}},
		},
		{
			name:  "an update dropped by a later write",
			steps: []step{podRec("a", pod("ua", "1", gen("2", "2"))), podRec("a", pod("ua", "1", on("n1")))},
			want:  []Violation{{Kind: KindLostUpdate, Pod: "default/a", UID: "ua", Node: "", Revision: 2}},
		},
		{
			name:  "label and annotation of one update apart",
			steps: []step{podRec("a", pod("ua", "1", gen("2", "1")))},
			want:  []Violation{{Kind: KindLostUpdate, Pod: "default/a", UID: "ua", Revision: 1}},
		},
		{
			name: "end state: pending, terminating",
			steps: []step{nodeRec("n1", "4"),
				podRec("a", pod("ua", "1")), podRec("b", pod("ub", "1", on("n1"), ready)),
				deleteCmd("b"), podRec("b", pod("ub", "1", on("n1"), ready, deleting(30))),
				podRec("c", pod("uc", "1", on("n1"), phase("Failed")))},
			end: true,
			want: []Violation{{Kind: KindNotReady, Pod: "default/a", UID: "ua", Revision: 2},
				{Kind: KindTerminating, Pod: "default/b", UID: "ub", Node: "n1", Revision: 5}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHistory()
			for i, s := range tt.steps {
				if err := h.apply(s(uint64(i + 1))); err != nil {
					t.Fatal(err)
				}
			}
			got := h.violations
			if tt.end {
				got = append(got, h.endState()...)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("violations:\n%v\nwant:\n%v", got, tt.want)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Kind != w.Kind || g.Pod != w.Pod || g.UID != w.UID || g.Node != w.Node || g.Revision != w.Revision {
					t.Errorf("violation %d = %v, want %v", i, g, w)
				}
			}
		})
	}
}

// An update answered 200 must show in the history: generation 3 acknowledged, 2 stored at most.
func TestAcknowledgedUpdate(t *testing.T) {
	h := newHistory()
	for i, s := range []step{podRec("a", pod("ua", "1", gen("1", "1"))), podRec("a", pod("ua", "1", gen("2", "2")))} {
		if err := h.apply(s(uint64(i + 1))); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		op   WorkloadOp
		want int
	}{
		{WorkloadOp{Op: "update", Namespace: "default", Name: "a", UID: "ua", Gen: 2, Code: 200}, 0},
		{WorkloadOp{Op: "update", Namespace: "default", Name: "a", UID: "ua", Gen: 3, Code: 200}, 1},
		{WorkloadOp{Op: "update", Namespace: "default", Name: "b", UID: "ub", Gen: 1, Code: 200}, 0}, // never stored: its create says so
	} {
		if got := h.checkUpdate(tt.op); len(got) != tt.want || (tt.want > 0 && got[0].Kind != KindLostUpdate) {
			t.Errorf("checkUpdate(%+v) = %v, want %d lost-update", tt.op, got, tt.want)
		}
	}
}
