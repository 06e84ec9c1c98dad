package status

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/internal/reportseq"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

const wait = 10 * time.Second

type env struct {
	t     *testing.T
	conn  *bus.Conn
	pods  jetstream.KeyValue
	nodes jetstream.KeyValue
	pub   *bus.Publisher
	svcs  []*Service
}

// newEnv starts a server and the given number of status replicas.
func newEnv(t *testing.T, replicas int) *env {
	t.Helper()
	return newEnvConfig(t, replicas, Config{NodeMonitorGracePeriod: 300 * time.Millisecond, MonitorInterval: 30 * time.Millisecond})
}

// newEnvQuiet starts a server and one status replica whose node monitor never finds a node silent,
// for tests that send a few heartbeats and look at what they wrote.
func newEnvQuiet(t *testing.T) *env {
	t.Helper()
	return newEnvConfig(t, 1, Config{NodeMonitorGracePeriod: time.Hour, MonitorInterval: time.Hour})
}

// newEnvConfig starts a server and the given number of status replicas configured as cfg.
func newEnvConfig(t *testing.T, replicas int, cfg Config) *env {
	t.Helper()
	_, conn := bustest.Start(t)
	b, err := bus.OpenBuckets(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	var svcs []*Service
	for i := range replicas {
		cfg.ID = fmt.Sprintf("s%d", i)
		s, err := New(cfg, conn)
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, s)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	return &env{t: t, conn: conn, pods: b.Pods, nodes: b.Nodes, pub: bus.NewPublisher(conn.JS, "test/agent"), svcs: svcs}
}

func testPod(name, uid string) *pb.Pod {
	return &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: name, Namespace: "default", Uid: uid},
		Spec:     &pb.PodSpec{NodeName: "n1", Containers: []*pb.Container{{Name: "app", Image: "nginx"}}},
		Status: &pb.PodStatus{Phase: "Pending", QosClass: "BestEffort", NominatedNodeName: "n9",
			Conditions: []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.True, Message: "binder"}}},
		Internal: &pb.PodInternal{CorrelationId: "corr"},
	}
}

func (e *env) put(p *pb.Pod) {
	e.t.Helper()
	if _, err := bus.Create(context.Background(), e.pods, bus.PodKey(p.Metadata.Namespace, p.Metadata.Name), p); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) get(name string) *pb.Pod {
	e.t.Helper()
	var p pb.Pod
	_, err := bus.Get(context.Background(), e.pods, bus.PodKey("default", name), &p)
	if errors.Is(err, bus.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return &p
}

func report(name, uid string, seq uint64, phase string) *pb.PodStatusReport {
	return &pb.PodStatusReport{
		Uid: uid, Namespace: "default", Name: name, Node: "n1", Seq: seq,
		Status: &pb.PodStatus{Phase: phase, PodIp: "10.42.1.7", Conditions: []*pb.PodCondition{
			{Type: podutil.PodReady, Status: podutil.True},
			{Type: podutil.PodScheduled, Status: podutil.True, Message: "agent"},
		}},
		Events: []*pb.EventNote{{Type: "Normal", Reason: "Started", Message: "Started container app", At: timestamppb.Now()}},
	}
}

func (e *env) send(r *pb.PodStatusReport) {
	e.t.Helper()
	meta := bus.Meta{MsgID: fmt.Sprintf("st-%s-%d", r.Uid, r.Seq), PodUID: r.Uid, Key: r.Namespace + "/" + r.Name}
	if err := e.pub.Publish(context.Background(), bus.SubjPodStatus(r.Node), r, meta); err != nil {
		e.t.Fatal(err)
	}
}

// drained reports whether a durable consumer has handled everything on its stream.
func (e *env) drained(stream, durable string) bool {
	return bustest.Drained(e.conn, stream, durable)
}

func (e *env) lastMsg(stream, subject string) *jetstream.RawStreamMsg {
	return bustest.LastMsg(e.t, e.conn, stream, subject)
}

func TestReportApplied(t *testing.T) {
	e := newEnv(t, 1)
	e.put(testPod("web", "u1"))
	e.send(report("web", "u1", 100, "Running"))
	var got *pb.Pod
	bustest.Eventually(t, wait, func() bool {
		got = e.get("web")
		return got.GetStatus().GetPhase() == "Running"
	}, "report applied")
	st := got.GetStatus()
	if st.GetPodIp() != "10.42.1.7" || st.GetQosClass() != "BestEffort" || st.GetNominatedNodeName() != "n9" ||
		podutil.PodCondition(got, podutil.PodScheduled).GetMessage() != "binder" || got.GetInternal().GetReportSeq() != 100 {
		t.Errorf("merged status %v internal %v", st, got.GetInternal())
	}
	bustest.Eventually(t, wait, func() bool {
		m := e.lastMsg(bus.StreamEvents, bus.SubjEvent("default", "web"))
		if m == nil {
			return false
		}
		var ev pb.Event
		if err := (&bus.Msg{Data: m.Data}).Decode(&ev); err != nil {
			t.Fatal(err)
		}
		return ev.GetReason() == "Started" && ev.GetSource().GetComponent() == "kubelet" && ev.GetSource().GetHost() == "n1"
	}, "event recorded as the kubelet of n1")

	// The report replaced the status in the stored bytes: metadata and spec are as they were.
	want := testPod("web", "u1")
	if diff := cmp.Diff(want, got, protocmp.Transform(), protocmp.IgnoreFields(want, "status", "internal")); diff != "" {
		t.Errorf("pod besides its status (-want +got):\n%s", diff)
	}
	// Another writer changes the pod after the service cached what it wrote: the next report conflicts
	// on the cached revision, is applied to a fresh read, and keeps the other writer's change.
	var p pb.Pod
	rev, err := bus.Get(context.Background(), e.pods, bus.PodKey("default", "web"), &p)
	if err != nil {
		t.Fatal(err)
	}
	p.Metadata.Labels = map[string]string{"team": "a"}
	if _, err := bus.Update(context.Background(), e.pods, bus.PodKey("default", "web"), &p, rev); err != nil {
		t.Fatal(err)
	}
	e.send(report("web", "u1", 200, "Succeeded"))
	bustest.Eventually(t, wait, func() bool {
		got = e.get("web")
		return got.GetStatus().GetPhase() == "Succeeded"
	}, "second report applied")
	if got.GetMetadata().GetLabels()["team"] != "a" || got.GetInternal().GetReportSeq() != 200 || got.GetInternal().GetCorrelationId() != "corr" {
		t.Errorf("after the second report: labels %v internal %v", got.GetMetadata().GetLabels(), got.GetInternal())
	}
}

func TestReportOrdering(t *testing.T) {
	e := newEnv(t, 1)
	e.put(testPod("web", "u1"))
	e.send(report("web", "u1", 200, "Running"))
	e.send(report("web", "u1", 100, "Pending")) // late: must not roll the status back
	bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamStatus, bus.ConsumerStatus) }, "reports handled")
	got := e.get("web")
	if got.GetStatus().GetPhase() != "Running" || got.GetInternal().GetReportSeq() != 200 {
		t.Errorf("phase %s seq %d, want Running 200", got.GetStatus().GetPhase(), got.GetInternal().GetReportSeq())
	}
}

func TestReportForOtherPodIgnored(t *testing.T) {
	e := newEnv(t, 1)
	e.put(testPod("web", "u-new"))
	e.send(report("web", "u-old", 300, "Running")) // same name, earlier incarnation
	bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamStatus, bus.ConsumerStatus) }, "report handled")
	if ph := e.get("web").GetStatus().GetPhase(); ph != "Pending" {
		t.Errorf("phase %s, want Pending", ph)
	}
}

func TestGoneDeletesPod(t *testing.T) {
	tests := []struct {
		name  string
		store bool // the pod is in the store
	}{
		{"stored pod", true},
		{"already absent", false},
	}
	e := newEnv(t, 1)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, uid := fmt.Sprintf("gone-%d", i), fmt.Sprintf("ug-%d", i)
			if tt.store {
				e.put(testPod(name, uid))
			}
			r := report(name, uid, 500, "Running")
			r.Gone = true
			r.Events = []*pb.EventNote{{Type: "Normal", Reason: "Killing", Message: "Stopping container app"}}
			e.send(r)
			bustest.Eventually(t, wait, func() bool { return e.get(name) == nil }, "pod deleted")
			bustest.Eventually(t, wait, func() bool {
				m := e.lastMsg(bus.StreamPods, bus.SubjPodDeleted)
				if m == nil || m.Header.Get(bus.HdrMsgID) != "deleted-"+uid {
					return false
				}
				var d pb.PodDeleted
				if err := (&bus.Msg{Data: m.Data}).Decode(&d); err != nil {
					t.Fatal(err)
				}
				return d.GetNode() == "n1" && d.GetName() == name
			}, "pod.deleted published")
		})
	}
}

func TestMalformedReportParked(t *testing.T) {
	e := newEnv(t, 1)
	bad := []struct {
		name string
		data []byte
	}{
		{"garbage", []byte{0xff, 0xff, 0xff}},
		{"no uid", mustMarshal(t, &pb.PodStatusReport{Namespace: "default", Name: "x", Node: "n1", Status: &pb.PodStatus{}})},
	}
	for _, b := range bad {
		if _, err := e.conn.JS.PublishMsg(context.Background(), &nats.Msg{Subject: bus.SubjPodStatus("n1"), Data: b.data}); err != nil {
			t.Fatal(err)
		}
		bustest.Eventually(t, wait, func() bool {
			m := e.lastMsg(bus.StreamDead, bus.SubjDeadPrefix+bus.SubjPodStatus("n1"))
			return m != nil && string(m.Data) == string(b.data)
		}, "%s parked", b.name)
	}
	// The consumer goes on working.
	e.put(testPod("web", "u1"))
	e.send(report("web", "u1", 1, "Running"))
	bustest.Eventually(t, wait, func() bool { return e.get("web").GetStatus().GetPhase() == "Running" }, "next report applied")
}

func mustMarshal(t *testing.T, r *pb.PodStatusReport) []byte {
	t.Helper()
	data, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func heartbeat(name string, at time.Time) *pb.NodeHeartbeat {
	ts := timestamppb.New(at)
	return &pb.NodeHeartbeat{SentAt: ts, Node: &pb.Node{
		Metadata: &pb.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:     &pb.NodeSpec{PodCidr: "10.42.1.0/24", PodCidrs: []string{"10.42.1.0/24"}},
		Status: &pb.NodeStatus{
			Capacity: map[string]string{"cpu": "4"},
			Conditions: []*pb.NodeCondition{{Type: podutil.NodeReady, Status: podutil.True, Reason: "KubeletReady",
				LastHeartbeatTime: ts, LastTransitionTime: timestamppb.New(at.Add(-time.Hour))}},
		},
	}}
}

func (e *env) beat(hb *pb.NodeHeartbeat) {
	e.t.Helper()
	if err := e.pub.Publish(context.Background(), bus.SubjHeartbeat(hb.Node.Metadata.Name), hb, bus.Meta{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) node(name string) *pb.Node {
	var n pb.Node
	if _, err := bus.Get(context.Background(), e.nodes, bus.NodeKey(name), &n); err != nil {
		return nil
	}
	return &n
}

func TestHeartbeatUpsert(t *testing.T) {
	e := newEnvQuiet(t)
	now := time.Now()
	e.beat(heartbeat("n1", now))
	bustest.Eventually(t, wait, func() bool { return e.node("n1") != nil }, "node created")
	n := e.node("n1")
	if n.GetMetadata().GetUid() == "" || n.GetStatus().GetCapacity()["cpu"] != "4" || n.GetSpec().GetPodCidr() != "10.42.1.0/24" {
		t.Fatalf("created node %v", n)
	}
	if _, _, err := bus.Mutate(context.Background(), e.nodes, bus.NodeKey("n1"), func() *pb.Node { return &pb.Node{} }, 5, func(n *pb.Node) (bool, error) {
		n.Metadata.Labels["team"] = "blue"
		n.Spec.Unschedulable = true
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The bus dates heartbeats: one sent after its agent's clock stepped back an hour is the newest.
	later := heartbeat("n1", now.Add(-time.Hour))
	later.Node.Status.Capacity["cpu"] = "8"
	e.beat(later)
	bustest.Eventually(t, wait, func() bool { return e.node("n1").GetStatus().GetCapacity()["cpu"] == "8" }, "newer heartbeat applied")
	bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamHeartbeats, bus.ConsumerHeartbeats) }, "heartbeats handled")
	if at := heartbeatTime(e.node("n1")); now.Sub(at) > time.Minute {
		t.Errorf("heartbeat time %v: the agent's clock, not the bus's", at)
	}
	// One the stream stored before (a redelivery, a replay) is stale, whatever its agent's clock says.
	stale := heartbeat("n1", now)
	stale.Node.Status.Capacity["cpu"] = "2"
	data, err := proto.Marshal(stale)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svcs[0].handleHeartbeat(context.Background(), &bus.Msg{Subject: bus.SubjHeartbeat("n1"), Data: data, Time: now.Add(-30 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if cpu := e.node("n1").GetStatus().GetCapacity()["cpu"]; cpu != "8" {
		t.Fatalf("cpu %s, want 8 (the stale heartbeat must be ignored)", cpu)
	}
	got := e.node("n1")
	want := map[string]string{"kubernetes.io/hostname": "n1", "team": "blue"}
	if diff := cmp.Diff(want, got.GetMetadata().GetLabels()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if !got.GetSpec().GetUnschedulable() || got.GetMetadata().GetUid() != n.GetMetadata().GetUid() {
		t.Errorf("spec or uid not kept: %v", got)
	}
	if !podutil.NodeCondition(got, podutil.NodeReady).GetLastTransitionTime().AsTime().Equal(
		podutil.NodeCondition(n, podutil.NodeReady).GetLastTransitionTime().AsTime()) {
		t.Error("lastTransitionTime changed while Ready stayed True")
	}
}

func TestNodeMonitorMarksSilentNodesUnknown(t *testing.T) {
	e := newEnv(t, 2) // two replicas race; the CAS lets one win
	e.beat(heartbeat("n1", time.Now()))
	var n *pb.Node
	bustest.Eventually(t, wait, func() bool {
		n = e.node("n1")
		return n != nil && podutil.NodeCondition(n, podutil.NodeReady).GetStatus() == podutil.Unknown
	}, "silent node marked Unknown")
	c := podutil.NodeCondition(n, podutil.NodeReady)
	want := &pb.NodeCondition{Type: podutil.NodeReady, Status: podutil.Unknown, Reason: "NodeStatusUnknown",
		Message: "Kubelet stopped posting node status."}
	if diff := cmp.Diff(want, c, protocmp.Transform(), protocmp.IgnoreFields(c, "last_heartbeat_time", "last_transition_time")); diff != "" {
		t.Errorf("Ready condition (-want +got):\n%s", diff)
	}
	bustest.Eventually(t, wait, func() bool { return e.lastMsg(bus.StreamEvents, bus.SubjEvent("", "n1")) != nil }, "NodeNotReady event")

	// A fresh heartbeat makes it Ready again.
	e.beat(heartbeat("n1", time.Now()))
	bustest.Eventually(t, wait, func() bool {
		return podutil.NodeCondition(e.node("n1"), podutil.NodeReady).GetStatus() == podutil.True
	}, "node Ready again")
}

// A report's status merges into each read of the pod as it would into the first: a compare-and-set
// that lost merges the same report into a newer read, whose control-plane fields may differ.
func TestMergeStatus(t *testing.T) {
	noSched := testPod("web", "u1")
	noSched.Status = &pb.PodStatus{Phase: "Pending"}
	other := testPod("web", "u1")
	other.Status.NominatedNodeName, other.Status.QosClass = "", "Burstable"
	other.Status.Conditions[0].Message = "another binder"
	tests := []struct {
		name string
		pod  *pb.Pod
		want *pb.PodStatus
	}{
		{"scheduled, nominated, qos", testPod("web", "u1"), &pb.PodStatus{Phase: "Running", PodIp: "10.42.1.7",
			QosClass: "BestEffort", NominatedNodeName: "n9", Conditions: []*pb.PodCondition{
				{Type: podutil.PodReady, Status: podutil.True},
				{Type: podutil.PodScheduled, Status: podutil.True, Message: "binder"}}}},
		{"none of them stored", noSched, &pb.PodStatus{Phase: "Running", PodIp: "10.42.1.7",
			QosClass: "Guaranteed", Conditions: []*pb.PodCondition{
				{Type: podutil.PodReady, Status: podutil.True},
				{Type: podutil.PodScheduled, Status: podutil.True, Message: "agent"}}}},
		{"others stored", other, &pb.PodStatus{Phase: "Running", PodIp: "10.42.1.7",
			QosClass: "Burstable", Conditions: []*pb.PodCondition{
				{Type: podutil.PodReady, Status: podutil.True},
				{Type: podutil.PodScheduled, Status: podutil.True, Message: "another binder"}}}},
	}
	// One report merged into every pod in turn, as compare-and-set attempts do.
	rep := report("web", "u1", 9, "Running")
	rep.Status.QosClass = "Guaranteed"
	sent := rep.GetStatus().GetConditions()
	st := reported(rep)
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}} {
		for _, k := range order {
			tt := tests[k]
			pod := proto.Clone(tt.pod).(*pb.Pod)
			mergeStatus(pod, st)
			if diff := cmp.Diff(tt.want, pod.GetStatus(), protocmp.Transform()); diff != "" {
				t.Errorf("order %v, %s: merged status (-want +got):\n%s", order, tt.name, diff)
			}
			if pod.GetInternal().GetReportSeq() != 9 {
				t.Errorf("order %v, %s: report seq %d", order, tt.name, pod.GetInternal().GetReportSeq())
			}
		}
	}
	// The conditions as the agent sent them are left alone.
	if got := sent[1].GetMessage(); len(sent) != 2 || got != "agent" {
		t.Errorf("the report's conditions were changed: %v", sent)
	}
}

// Taints an agent registers with apply once; afterwards users own the spec and their own labels, and the
// agent wins only for the label keys it posts.
func TestHeartbeatKeepsUserTaintsAndLabels(t *testing.T) {
	e := newEnvQuiet(t)
	now := time.Now()
	first := heartbeat("n1", now)
	first.Node.Metadata.Labels["pool"] = "general"
	first.Node.Spec.Taints = []*pb.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}
	e.beat(first)
	bustest.Eventually(t, wait, func() bool { return e.node("n1") != nil }, "node registered")
	n := e.node("n1")
	if len(n.GetSpec().GetTaints()) != 1 || n.GetMetadata().GetAnnotations()[podutil.AnnotationAgent] != "true" {
		t.Fatalf("registered node %v", n)
	}
	// A user removes the registered taint, adds another, labels the node and overwrites an agent label.
	if _, _, err := bus.Mutate(context.Background(), e.nodes, bus.NodeKey("n1"), func() *pb.Node { return &pb.Node{} }, 5, func(n *pb.Node) (bool, error) {
		n.Spec.Taints = []*pb.Taint{{Key: "maintenance", Effect: "NoExecute"}}
		n.Spec.Unschedulable = true
		n.Metadata.Labels["team"] = "blue"
		n.Metadata.Labels["pool"] = "mine"
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	later := heartbeat("n1", now.Add(time.Second))
	later.Node.Metadata.Labels["pool"] = "general"
	later.Node.Spec.Taints = first.Node.Spec.Taints
	later.Node.Status.Capacity["cpu"] = "16"
	e.beat(later)
	bustest.Eventually(t, wait, func() bool { return e.node("n1").GetStatus().GetCapacity()["cpu"] == "16" }, "heartbeat applied")
	got := e.node("n1")
	wantTaints := []*pb.Taint{{Key: "maintenance", Effect: "NoExecute"}}
	if diff := cmp.Diff(wantTaints, got.GetSpec().GetTaints(), protocmp.Transform()); diff != "" || !got.GetSpec().GetUnschedulable() {
		t.Errorf("spec not kept (-want +got):\n%s", diff)
	}
	wantLabels := map[string]string{"kubernetes.io/hostname": "n1", "pool": "general", "team": "blue"}
	if diff := cmp.Diff(wantLabels, got.GetMetadata().GetLabels()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

// A node registered without an agent (kwok-style) is never marked Unknown: nobody heartbeats for it.
func TestNodeMonitorLeavesAgentlessNodes(t *testing.T) {
	e := newEnv(t, 1)
	old := heartbeat("kwok-1", time.Now().Add(-time.Hour)).Node
	if _, err := bus.Create(context.Background(), e.nodes, bus.NodeKey("kwok-1"), old); err != nil {
		t.Fatal(err)
	}
	// An agent node that goes silent is marked; by then the monitor has looked at kwok-1 as well.
	e.beat(heartbeat("n1", time.Now()))
	bustest.Eventually(t, wait, func() bool {
		n := e.node("n1")
		return n != nil && podutil.NodeCondition(n, podutil.NodeReady).GetStatus() == podutil.Unknown
	}, "silent agent node marked Unknown")
	if s := podutil.NodeCondition(e.node("kwok-1"), podutil.NodeReady).GetStatus(); s != podutil.True {
		t.Errorf("agentless node is %s, want True", s)
	}
}

// Reports an agent may not send are refused, counted and parked, and leave the pod as it was; honest
// reports still apply, also to a pod frozen by a seq from the future stored before such seqs were refused.
func TestForgedReportsRefused(t *testing.T) {
	e := newEnv(t, 1)
	on := func(name, uid, node string, seq uint64) *pb.Pod {
		p := testPod(name, uid)
		p.Spec.NodeName = node
		p.Internal.ReportSeq = seq
		e.put(p)
		return p
	}
	on("web", "u1", "n1", 0)
	on("other", "u3", "n3", 0)
	on("free", "u4", "", 0)
	on("frozen", "u5", "n1", math.MaxUint64)
	now := reportseq.Next(reportseq.Boot(time.Now(), 0))
	forReport := func(name, uid, node string, seq uint64) *pb.PodStatusReport {
		r := report(name, uid, seq, "Failed")
		r.Node = node
		r.Status.Reason = "Forged"
		return r
	}
	forged := []struct {
		name    string
		subject string
		rep     *pb.PodStatusReport
		why     string
	}{
		{"another node's pod on my subject", bus.SubjPodStatus("n1"), forReport("other", "u3", "n3", now), "subject"},
		{"another node's pod named as mine", bus.SubjPodStatus("n1"), forReport("other", "u3", "n1", now), "not_bound"},
		{"an unbound pod", bus.SubjPodStatus("n1"), forReport("free", "u4", "n1", now), "not_bound"},
		{"seq from the future", bus.SubjPodStatus("n1"), forReport("web", "u1", "n1", math.MaxUint64), "future"},
		{"seq of a boot beyond the clock skew", bus.SubjPodStatus("n1"),
			forReport("web", "u1", "n1", reportseq.Next(reportseq.Boot(time.Now().Add(time.Hour), 0))), "future"},
	}
	for i, f := range forged {
		before := metrics.Counter("status.refused." + f.why)
		// Each forged report is parked before the next is sent, so the subject's last parked message is
		// the one just sent (its correlation says so: two of them are about the same pod).
		corr := fmt.Sprintf("forged-%d", i)
		meta := bus.Meta{MsgID: corr, Correlation: corr, PodUID: f.rep.Uid, Key: "default/" + f.rep.Name}
		if err := e.pub.Publish(context.Background(), f.subject, f.rep, meta); err != nil {
			t.Fatal(err)
		}
		bustest.Eventually(t, wait, func() bool {
			m := e.lastMsg(bus.StreamDead, bus.SubjDeadPrefix+f.subject)
			return m != nil && m.Header.Get(bus.HdrCorrelation) == corr && m.Header.Get(bus.HdrMsgID) == "" &&
				m.Header.Get(bus.HdrPodUID) == f.rep.Uid && strings.Contains(m.Header.Get(bus.HdrDeadReason), ErrRefused.Error())
		}, "%s parked", f.name)
		if got := metrics.Counter("status.refused."+f.why) - before; got != 1 {
			t.Errorf("%s: status.refused.%s counted %d, want 1", f.name, f.why, got)
		}
	}
	for _, name := range []string{"web", "other", "free"} {
		if p := e.get(name); p.GetStatus().GetPhase() != "Pending" || p.GetInternal().GetReportSeq() != 0 {
			t.Errorf("%s: phase %s seq %d after forged reports, want Pending 0", name, p.GetStatus().GetPhase(), p.GetInternal().GetReportSeq())
		}
	}

	// Honest reports, with the agents' clocks.
	e.send(forReport("web", "u1", "n1", now))
	e.send(forReport("other", "u3", "n3", now))
	e.send(forReport("frozen", "u5", "n1", now))
	for _, name := range []string{"web", "other", "frozen"} {
		bustest.Eventually(t, wait, func() bool { return e.get(name).GetInternal().GetReportSeq() == now }, "%s: honest report applied", name)
	}
}

// A heartbeat dated beyond the clock skew is refused and parked; real heartbeats keep the node current,
// also one whose stored heartbeat time came from the future before such heartbeats were refused.
func TestHeartbeatFromTheFutureRefused(t *testing.T) {
	e := newEnv(t, 1)
	future := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	before := metrics.Counter("status.refused.future")
	forged := heartbeat("n2", future)
	forged.Node.Status.Capacity["cpu"] = "100000"
	e.beat(forged)
	bustest.Eventually(t, wait, func() bool {
		m := e.lastMsg(bus.StreamDead, bus.SubjDeadPrefix+bus.SubjHeartbeat("n2"))
		return m != nil && strings.Contains(m.Header.Get(bus.HdrDeadReason), ErrRefused.Error())
	}, "forged heartbeat parked")
	if got := metrics.Counter("status.refused.future") - before; got != 1 {
		t.Errorf("status.refused.future counted %d, want 1", got)
	}
	if e.node("n2") != nil {
		t.Fatal("a refused heartbeat registered its node")
	}
	e.beat(heartbeat("n2", time.Now()))
	bustest.Eventually(t, wait, func() bool { return e.node("n2").GetStatus().GetCapacity()["cpu"] == "4" }, "real heartbeat applied")

	// A node stored with a heartbeat time of year 9999 takes the next real heartbeat.
	if _, err := bus.Create(context.Background(), e.nodes, bus.NodeKey("n3"), heartbeat("n3", future).Node); err != nil {
		t.Fatal(err)
	}
	e.beat(heartbeat("n3", time.Now()))
	bustest.Eventually(t, wait, func() bool { return e.node("n3").GetStatus().GetCapacity()["cpu"] == "4" }, "real heartbeat replaces one from the future")
}

// An agent sends its node's reports in groups (bus.Batcher): every report of a group is applied.
func TestReportsInGroupsApplied(t *testing.T) {
	e := newEnv(t, 1)
	const n = 40
	for i := range n {
		e.put(testPod(fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i)))
	}
	reports := bus.NewBatcher(e.conn.JS, "test/agent")
	var acks []jetstream.PubAckFuture
	for i := range n {
		r := report(fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i), 100, "Running")
		f, err := reports.PublishAsync(bus.SubjPodStatus(r.Node), r, bus.Meta{MsgID: fmt.Sprintf("st-%s-%d", r.Uid, r.Seq), PodUID: r.Uid, Key: r.Namespace + "/" + r.Name})
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
	}
	if err := bus.Wait(context.Background(), acks...); err != nil {
		t.Fatal(err)
	}
	if st, err := e.conn.JS.Stream(context.Background(), bus.StreamStatus); err == nil {
		if info, err := st.Info(context.Background()); err == nil {
			t.Logf("%d reports stored as %d messages", n, info.State.Msgs)
		}
	}
	bustest.Eventually(t, wait, func() bool {
		for i := range n {
			if e.get(fmt.Sprintf("p%d", i)).GetStatus().GetPhase() != "Running" {
				return false
			}
		}
		return true
	}, "every report applied")
}
