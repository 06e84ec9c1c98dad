package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/status"
)

const (
	node    = "n1"
	podCIDR = "10.42.1.0/24"
	wait    = 10 * time.Second
)

// env is one embedded server with a status service and one node agent on a fake runtime.
type env struct {
	t     *testing.T
	conn  *bus.Conn
	pods  jetstream.KeyValue
	nodes jetstream.KeyValue
	rt    *fake.Runtime
	pub   *bus.Publisher

	stopAgent func()
	// wrap, when set, is the runtime the agent is given around rt.
	wrap func(*fake.Runtime) agent.Runtime
}

func testConfig() agent.Config {
	return agent.Config{
		Node: node, PodCIDR: podCIDR, CPU: "4", Memory: "8Gi", MaxPods: 110,
		Labels:            map[string]string{"topology.kubernetes.io/zone": "z1"},
		HeartbeatInterval: 100 * time.Millisecond,
		BackoffBase:       150 * time.Millisecond,
		BackoffMax:        600 * time.Millisecond,
	}
}

func newEnv(t *testing.T, cfg agent.Config, fcfg fake.Config) *env {
	t.Helper()
	return newEnvWrapped(t, cfg, fcfg, nil)
}

// newEnvWrapped is newEnv with the agent given wrap(rt) as its runtime (nil: rt).
func newEnvWrapped(t *testing.T, cfg agent.Config, fcfg fake.Config, wrap func(*fake.Runtime) agent.Runtime) *env {
	t.Helper()
	_, conn := bustest.Start(t)
	b, err := bus.OpenBuckets(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	if fcfg.PodCIDR == "" {
		fcfg.PodCIDR = podCIDR
	}
	rt, err := fake.New(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, conn: conn, pods: b.Pods, nodes: b.Nodes, rt: rt, pub: bus.NewPublisher(conn.JS, "test/"+t.Name()), wrap: wrap}
	svc, err := status.New(status.Config{ID: "s1", NodeMonitorGracePeriod: 500 * time.Millisecond, MonitorInterval: 50 * time.Millisecond}, conn)
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, svc.Run)
	e.startAgent(cfg)
	return e
}

// leaseRenewedAfter says whether the node's lease was renewed after t.
func (e *env) leaseRenewedAfter(t time.Time) bool {
	ctx := context.Background()
	kv, err := bus.OpenBucket(ctx, e.conn.JS, bus.BucketLeases)
	if err != nil {
		e.t.Fatal(err)
	}
	var l pb.NodeLease
	_, err = bus.Get(ctx, kv, bus.LeaseKey(node), &l)
	return err == nil && l.GetRenewTime().AsTime().After(t)
}

// run runs f until the test ends, and checks it returns nil.
func (e *env) run(t *testing.T, f func(context.Context) error) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (e *env) startAgent(cfg agent.Config) {
	var rt agent.Runtime = e.rt
	if e.wrap != nil {
		rt = e.wrap(e.rt)
	}
	a, err := agent.New(cfg, e.conn, rt)
	if err != nil {
		e.t.Fatal(err)
	}
	e.stopAgent = e.run(e.t, a.Run)
}

type podOpt func(*pb.Pod)

func withCommand(cmd ...string) podOpt {
	return func(p *pb.Pod) { p.Spec.Containers[0].Command = cmd }
}

func withPolicy(policy string) podOpt { return func(p *pb.Pod) { p.Spec.RestartPolicy = policy } }

func withCPU(q string) podOpt {
	return func(p *pb.Pod) { p.Spec.Containers[0].Resources.Requests[podutil.CPU] = q }
}

func newPod(name string, opts ...podOpt) *pb.Pod {
	created := timestamppb.New(time.Now().Add(-time.Minute))
	p := &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: name, Namespace: "default", Uid: uuid.NewString(), CreationTimestamp: created},
		Spec: &pb.PodSpec{
			Containers: []*pb.Container{{
				Name: "app", Image: "nginx:1.27", ImagePullPolicy: "IfNotPresent",
				Resources: &pb.ResourceRequirements{Requests: map[string]string{podutil.CPU: "100m", podutil.Memory: "64Mi"}},
			}},
			RestartPolicy: "Always",
			NodeName:      node,
		},
		Status: &pb.PodStatus{
			Phase:    "Pending",
			QosClass: "Burstable",
			Conditions: []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.True, LastTransitionTime: created,
				Message: "set by the binder"}},
		},
		Internal: &pb.PodInternal{CorrelationId: "corr-" + name},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// create stores the pod and hands it to the agent as the binder would.
func (e *env) create(p *pb.Pod) {
	e.t.Helper()
	ctx := context.Background()
	rev, err := bus.Create(ctx, e.pods, bus.PodKey(p.Metadata.Namespace, p.Metadata.Name), p)
	if err != nil {
		e.t.Fatal(err)
	}
	e.bind(p, rev, "bound-"+p.Metadata.Uid)
}

func (e *env) bind(p *pb.Pod, rev uint64, msgID string) {
	e.t.Helper()
	err := e.pub.Publish(context.Background(), bus.SubjPodBound(node), &pb.PodBinding{Pod: p, Revision: rev, Node: node},
		e.meta(p, msgID))
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) meta(p *pb.Pod, msgID string) bus.Meta {
	return bus.Meta{MsgID: msgID, Correlation: p.GetInternal().GetCorrelationId(), PodUID: p.Metadata.Uid,
		Key: p.Metadata.Namespace + "/" + p.Metadata.Name}
}

func (e *env) terminate(p *pb.Pod, grace int64) {
	e.t.Helper()
	term := &pb.PodTermination{Uid: p.Metadata.Uid, Namespace: p.Metadata.Namespace, Name: p.Metadata.Name, Node: node,
		GracePeriodSeconds: grace, DeletionTimestamp: timestamppb.Now()}
	if err := e.pub.Publish(context.Background(), bus.SubjPodTerminate(node), term, e.meta(p, "term-"+p.Metadata.Uid)); err != nil {
		e.t.Fatal(err)
	}
}

// get returns the stored pod, or nil when it is not in the bucket.
func (e *env) get(p *pb.Pod) *pb.Pod {
	e.t.Helper()
	var got pb.Pod
	_, err := bus.Get(context.Background(), e.pods, bus.PodKey(p.Metadata.Namespace, p.Metadata.Name), &got)
	if errors.Is(err, bus.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return &got
}

// until polls the stored pod until cond holds, and returns it.
func (e *env) until(p *pb.Pod, what string, cond func(*pb.Pod) bool) *pb.Pod {
	e.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		last := e.get(p)
		if last != nil && cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pod %s: timed out waiting for %s; last status %v", p.Metadata.Name, what, last.GetStatus())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isRunningReady(p *pb.Pod) bool {
	c := podutil.PodCondition(p, podutil.PodReady)
	return p.GetStatus().GetPhase() == "Running" && c != nil && c.GetStatus() == podutil.True
}

// drained reports whether a durable consumer has handled everything on its stream.
func (e *env) drained(stream, durable string) bool {
	return bustest.Drained(e.conn, stream, durable)
}

// lastMsg returns the last message on subject in stream, or nil.
func (e *env) lastMsg(stream, subject string) *jetstream.RawStreamMsg {
	return bustest.LastMsg(e.t, e.conn, stream, subject)
}

// eventReasons lists the reasons of the events recorded about a pod.
func (e *env) eventReasons(p *pb.Pod) []string {
	e.t.Helper()
	var out []string
	for _, m := range bustest.Messages(e.t, e.conn, bus.StreamEvents, bus.SubjEvent(p.Metadata.Namespace, p.Metadata.Name)) {
		out = append(out, bustest.Decode(e.t, m, &pb.Event{}).GetReason())
	}
	return out
}

func TestPodRunsThenTerminates(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	p := newPod("web")
	e.create(p)

	got := e.until(p, "Running and Ready", isRunningReady)
	st := got.GetStatus()
	if !strings.HasPrefix(st.GetPodIp(), "10.42.1.") || len(st.GetPodIps()) != 1 || st.GetHostIp() != "127.0.0.1" {
		t.Errorf("pod ip %q ips %v host %q", st.GetPodIp(), st.GetPodIps(), st.GetHostIp())
	}
	if st.GetStartTime() == nil {
		t.Error("no startTime")
	}
	if st.GetQosClass() != "Burstable" {
		t.Errorf("qosClass %q not kept", st.GetQosClass())
	}
	if c := podutil.PodCondition(got, podutil.PodScheduled); c.GetMessage() != "set by the binder" {
		t.Errorf("PodScheduled not kept from the store: %v", c)
	}
	for _, typ := range []string{podutil.PodInitialized, podutil.ContainersReady} {
		if c := podutil.PodCondition(got, typ); c.GetStatus() != podutil.True {
			t.Errorf("condition %s = %v", typ, c)
		}
	}
	cs := st.GetContainerStatuses()
	if len(cs) != 1 || !cs[0].GetReady() || !cs[0].GetStarted() || cs[0].GetState().GetRunning().GetStartedAt() == nil ||
		!strings.HasPrefix(cs[0].GetContainerId(), "fake://") {
		t.Errorf("container status %v", cs)
	}
	if got.GetInternal().GetReportSeq() == 0 {
		t.Error("report_seq not recorded")
	}
	bustest.Eventually(t, wait, func() bool {
		r := strings.Join(e.eventReasons(p), ",")
		return strings.Contains(r, "Pulled") && strings.Contains(r, "Created") && strings.Contains(r, "Started")
	}, "events Pulled, Created, Started")

	// Logs are served over core NATS.
	logs := func(req agent.LogRequest) agent.LogResponse {
		data, _ := json.Marshal(req)
		reply, err := e.conn.NC.Request(bus.SubjLogs(node), data, wait)
		if err != nil {
			t.Fatal(err)
		}
		var resp agent.LogResponse
		if err := json.Unmarshal(reply.Data, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := logs(agent.LogRequest{Namespace: "default", Name: "web", UID: p.Metadata.Uid, Container: "app"}); r.Error != "" || !strings.Contains(r.Logs, "started") {
		t.Errorf("logs: %+v", r)
	}
	if r := logs(agent.LogRequest{Namespace: "default", Name: "nope"}); r.Code != 404 {
		t.Errorf("logs of an unknown pod: %+v", r)
	}

	// A redelivered binding is answered with a fresh report, nothing else changes.
	e.bind(p, 1, "bound-again-"+p.Metadata.Uid)
	seq := got.GetInternal().GetReportSeq()
	again := e.until(p, "reported again", func(q *pb.Pod) bool { return q.GetInternal().GetReportSeq() > seq })
	if again.GetStatus().GetPodIp() != st.GetPodIp() || e.rt.IPsInUse() != 1 {
		t.Errorf("redelivery changed the pod: ip %s (was %s), %d IPs in use", again.GetStatus().GetPodIp(), st.GetPodIp(), e.rt.IPsInUse())
	}

	e.terminate(p, 30)
	bustest.Eventually(t, wait, func() bool { return e.get(p) == nil }, "pod leaves the bucket")
	bustest.Eventually(t, wait, func() bool {
		m := e.lastMsg(bus.StreamPods, bus.SubjPodDeleted)
		return m != nil && m.Header.Get(bus.HdrMsgID) == "deleted-"+p.Metadata.Uid
	}, "pod.deleted published")
	if n := e.rt.IPsInUse(); n != 0 {
		t.Errorf("%d IPs still in use", n)
	}
	bustest.Eventually(t, wait, func() bool { return strings.Contains(strings.Join(e.eventReasons(p), ","), "Killing") },
		"Killing event")

	// A binding redelivered after the termination does not bring the pod back.
	e.bind(p, 1, "bound-late-"+p.Metadata.Uid)
	bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamPods, bus.ConsumerAgent(node)) }, "late binding handled")
	if n := e.rt.IPsInUse(); n != 0 || e.get(p) != nil {
		t.Errorf("terminated pod revived: %d IPs in use", n)
	}

	// Terminating an unknown pod reports it gone: the store entry goes away.
	ghost := newPod("ghost")
	if _, err := bus.Create(context.Background(), e.pods, bus.PodKey("default", "ghost"), ghost); err != nil {
		t.Fatal(err)
	}
	e.terminate(ghost, 0)
	bustest.Eventually(t, wait, func() bool { return e.get(ghost) == nil }, "unknown pod reported gone")
}

func TestRestartPolicies(t *testing.T) {
	tests := []struct {
		name      string
		policy    string
		cmd       []string
		wantPhase string
		wantCode  int32
	}{
		{"never, exit 0", "Never", []string{"sh", "-c", "exit 0"}, "Succeeded", 0},
		{"never, exit 2", "Never", []string{"sh", "-c", "exit 2"}, "Failed", 2},
		{"on failure, sleep then exit 0", "OnFailure", []string{"sleep", "0.1"}, "Succeeded", 0},
	}
	e := newEnv(t, testConfig(), fake.Config{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPod("job-"+string(rune('a'+i)), withPolicy(tt.policy), withCommand(tt.cmd...))
			e.create(p)
			got := e.until(p, "phase "+tt.wantPhase, func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == tt.wantPhase })
			cs := got.GetStatus().GetContainerStatuses()
			if len(cs) != 1 || cs[0].GetState().GetTerminated() == nil || cs[0].GetState().GetTerminated().GetExitCode() != tt.wantCode {
				t.Fatalf("container status %v", cs)
			}
			if cs[0].GetRestartCount() != 0 {
				t.Errorf("restart count %d", cs[0].GetRestartCount())
			}
			if c := podutil.PodCondition(got, podutil.PodReady); c.GetStatus() != podutil.False || c.GetReason() != "PodCompleted" {
				t.Errorf("Ready condition %v", c)
			}
		})
	}
	bustest.Eventually(t, wait, func() bool { return e.rt.IPsInUse() == 0 }, "finished pods release their IPs")
}

func TestInitContainers(t *testing.T) {
	tests := []struct {
		name      string
		policy    string
		initCmd   []string
		wantPhase string
		wantInit  string // init container's terminated reason
	}{
		{"init succeeds", "Always", []string{"sh", "-c", "exit 0"}, "Running", "Completed"},
		{"init fails, never restart", "Never", []string{"sh", "-c", "exit 7"}, "Failed", "Error"},
	}
	e := newEnv(t, testConfig(), fake.Config{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPod("init-"+string(rune('a'+i)), withPolicy(tt.policy))
			p.Spec.InitContainers = []*pb.Container{{Name: "setup", Image: "busybox", Command: tt.initCmd}}
			e.create(p)
			got := e.until(p, "phase "+tt.wantPhase, func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == tt.wantPhase })
			ics := got.GetStatus().GetInitContainerStatuses()
			if len(ics) != 1 || ics[0].GetState().GetTerminated().GetReason() != tt.wantInit {
				t.Errorf("init container statuses %v", ics)
			}
			initialized := podutil.PodCondition(got, podutil.PodInitialized).GetStatus() == podutil.True
			if initialized != (tt.wantPhase == "Running") {
				t.Errorf("Initialized condition %v", podutil.PodCondition(got, podutil.PodInitialized))
			}
		})
	}
}

func TestCrashLoopBackOff(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	p := newPod("crash", withCommand("sh", "-c", "exit 1"))
	e.create(p)
	var sawBackOff atomic.Bool
	got := e.until(p, "restarted 3 times after a CrashLoopBackOff", func(q *pb.Pod) bool {
		cs := q.GetStatus().GetContainerStatuses()
		if len(cs) != 1 {
			return false
		}
		if w := cs[0].GetState().GetWaiting(); w.GetReason() == "CrashLoopBackOff" && strings.Contains(w.GetMessage(), "back-off") {
			sawBackOff.Store(true)
		}
		return sawBackOff.Load() && cs[0].GetRestartCount() >= 3
	})
	if ph := got.GetStatus().GetPhase(); ph != "Running" {
		t.Errorf("phase %s, want Running (restartPolicy Always)", ph)
	}
	last := got.GetStatus().GetContainerStatuses()[0].GetLastState().GetTerminated()
	if last.GetExitCode() != 1 || last.GetReason() != "Error" {
		t.Errorf("lastState %v", last)
	}
	if !strings.Contains(strings.Join(e.eventReasons(p), ","), "BackOff") {
		t.Error("no BackOff event")
	}
}

func TestAdmissionRejectsOverCapacity(t *testing.T) {
	cfg := testConfig()
	cfg.CPU = "1"
	e := newEnv(t, cfg, fake.Config{})
	fits := newPod("fits", withCPU("800m"))
	e.create(fits)
	e.until(fits, "running", isRunningReady)

	big := newPod("big", withCPU("500m"))
	e.create(big)
	got := e.until(big, "rejected", func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == "Failed" })
	want := "Pod was rejected: Node didn't have enough resource: cpu, requested: 500, used: 800, capacity: 1000"
	if got.GetStatus().GetReason() != "OutOfcpu" || got.GetStatus().GetMessage() != want {
		t.Errorf("reason %q message %q", got.GetStatus().GetReason(), got.GetStatus().GetMessage())
	}
	if e.rt.IPsInUse() != 1 {
		t.Errorf("rejected pod got a sandbox")
	}
	e.terminate(big, 0)
	bustest.Eventually(t, wait, func() bool { return e.get(big) == nil }, "rejected pod deleted")
}

// TestAdmissionCountsFreedCapacity: a pod that stops counting (deleted, or finished) leaves its
// requests to the next admission, which keeps a running sum between admissions.
func TestAdmissionCountsFreedCapacity(t *testing.T) {
	tests := []struct {
		name string
		pod  *pb.Pod
		free func(e *env, p *pb.Pod)
	}{
		{"deleted", newPod("first", withCPU("800m")), func(e *env, p *pb.Pod) {
			e.until(p, "running", isRunningReady)
			e.terminate(p, 0)
			bustest.Eventually(t, wait, func() bool { return e.get(p) == nil }, "first pod deleted")
		}},
		{"succeeded", newPod("first", withCPU("800m"), withPolicy("Never"), withCommand("sh", "-c", "exit 0")),
			func(e *env, p *pb.Pod) {
				e.until(p, "succeeded", func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == "Succeeded" })
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.CPU = "1"
			e := newEnv(t, cfg, fake.Config{})
			e.create(tt.pod)
			tt.free(e, tt.pod)
			next := newPod("next", withCPU("800m"))
			e.create(next)
			e.until(next, "running in the freed capacity", isRunningReady)
			third := newPod("third", withCPU("300m"))
			e.create(third)
			got := e.until(third, "rejected", func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == "Failed" })
			if got.GetStatus().GetReason() != "OutOfcpu" {
				t.Errorf("third pod: reason %q, want OutOfcpu (the running pod still counts)", got.GetStatus().GetReason())
			}
		})
	}
}

func TestReadinessProbe(t *testing.T) {
	var healthy atomic.Bool
	e := newEnv(t, testConfig(), fake.Config{Probe: func(pt agent.ProbeTarget) agent.ProbeResult {
		if pt.Kind == agent.Readiness && !healthy.Load() {
			return agent.ProbeResult{Output: "HTTP probe failed with statuscode: 503"}
		}
		return agent.ProbeResult{Success: true}
	}})
	p := newPod("probed")
	p.Spec.Containers[0].ReadinessProbe = &pb.Probe{HttpGet: &pb.HTTPGetAction{Path: "/healthz", Port: "8080"}, PeriodSeconds: 1}
	e.create(p)
	got := e.until(p, "running, not ready", func(q *pb.Pod) bool {
		c := podutil.PodCondition(q, podutil.PodReady)
		return q.GetStatus().GetPhase() == "Running" && c.GetStatus() == podutil.False && c.GetReason() == "ContainersNotReady"
	})
	if cs := got.GetStatus().GetContainerStatuses()[0]; cs.GetReady() || !cs.GetStarted() {
		t.Errorf("container ready=%v started=%v", cs.GetReady(), cs.GetStarted())
	}
	healthy.Store(true)
	e.until(p, "ready once the probe succeeds", isRunningReady)
	if !strings.Contains(strings.Join(e.eventReasons(p), ","), "Unhealthy") {
		t.Error("no Unhealthy event")
	}
}

func TestHeartbeatsAndNotReady(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	ctx := context.Background()
	var n pb.Node
	bustest.Eventually(t, wait, func() bool {
		_, err := bus.Get(ctx, e.nodes, bus.NodeKey(node), &n)
		return err == nil
	}, "node registered")
	checks := map[string]string{
		"label hostname": n.GetMetadata().GetLabels()["kubernetes.io/hostname"],
		"label zone":     n.GetMetadata().GetLabels()["topology.kubernetes.io/zone"],
		"label os":       n.GetMetadata().GetLabels()["kubernetes.io/os"],
		"cpu":            n.GetStatus().GetAllocatable()[podutil.CPU],
		"pods":           n.GetStatus().GetCapacity()[podutil.Pods],
		"podCIDR":        n.GetSpec().GetPodCidr(),
		"kubelet":        n.GetStatus().GetNodeInfo().GetKubeletVersion(),
		"runtime":        n.GetStatus().GetNodeInfo().GetContainerRuntimeVersion(),
		"ready":          podutil.NodeCondition(&n, podutil.NodeReady).GetReason(),
	}
	want := map[string]string{
		"label hostname": node, "label zone": "z1", "label os": "linux", "cpu": "4", "pods": "110",
		"podCIDR": podCIDR, "kubelet": agent.KubeletVersion, "runtime": fake.Version, "ready": "KubeletReady",
	}
	for k, w := range want {
		if checks[k] != w {
			t.Errorf("%s = %q, want %q", k, checks[k], w)
		}
	}
	if n.GetMetadata().GetUid() == "" || n.GetMetadata().GetCreationTimestamp() == nil {
		t.Error("node created without uid or creationTimestamp")
	}
	// Each heartbeat carries the digest of its status, by which the status service judges it.
	hb := bustest.Decode(t, e.lastMsg(bus.StreamHeartbeats, bus.SubjHeartbeat(node)), &pb.NodeHeartbeat{})
	if want, ok := podutil.NodeStatusDigest(hb.GetNode()); !ok || string(hb.GetStatusDigest()) != string(want[:]) {
		t.Errorf("heartbeat digest %x, want %x", hb.GetStatusDigest(), want)
	}

	// A label and a taint set through the API survive the next heartbeats.
	if _, _, err := bus.Mutate(ctx, e.nodes, bus.NodeKey(node), func() *pb.Node { return &pb.Node{} }, 10, func(n *pb.Node) (bool, error) {
		n.Metadata.Labels["team"] = "blue"
		n.Spec.Taints = []*pb.Taint{{Key: "dedicated", Value: "blue", Effect: "NoSchedule"}}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	// An unchanged status renews the node's lease alone.
	mutated := time.Now()
	bustest.Eventually(t, wait, func() bool {
		var m pb.Node
		_, err := bus.Get(ctx, e.nodes, bus.NodeKey(node), &m)
		return err == nil && e.leaseRenewedAfter(mutated) &&
			m.GetMetadata().GetLabels()["team"] == "blue" && len(m.GetSpec().GetTaints()) == 1
	}, "heartbeat keeps user label and taint")

	e.stopAgent()
	var m pb.Node
	bustest.Eventually(t, wait, func() bool {
		_, err := bus.Get(ctx, e.nodes, bus.NodeKey(node), &m)
		c := podutil.NodeCondition(&m, podutil.NodeReady)
		return err == nil && c.GetStatus() == podutil.Unknown
	}, "node becomes Unknown once heartbeats stop")
	if c := podutil.NodeCondition(&m, podutil.NodeReady); c.GetReason() != "NodeStatusUnknown" || c.GetMessage() != "Kubelet stopped posting node status." {
		t.Errorf("Ready condition %v", c)
	}
	bustest.Eventually(t, wait, func() bool { return e.lastMsg(bus.StreamEvents, bus.SubjEvent("", node)) != nil }, "NodeNotReady event")
}

func TestReconcileAfterRestart(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	keep, drop := newPod("keep"), newPod("drop")
	e.create(keep)
	e.create(drop)
	ip := e.until(keep, "running", isRunningReady).GetStatus().GetPodIp()
	e.until(drop, "running", isRunningReady)

	e.stopAgent()
	if e.rt.Running() != 2 {
		t.Fatalf("containers must survive the agent: %d running", e.rt.Running())
	}
	// While the agent is down, "drop" leaves the store.
	var cur pb.Pod
	rev, err := bus.Get(context.Background(), e.pods, bus.PodKey("default", "drop"), &cur)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Delete(context.Background(), e.pods, bus.PodKey("default", "drop"), rev); err != nil {
		t.Fatal(err)
	}
	seq := e.get(keep).GetInternal().GetReportSeq()

	e.startAgent(testConfig())
	got := e.until(keep, "re-adopted and reported", func(q *pb.Pod) bool {
		return q.GetInternal().GetReportSeq() > seq && isRunningReady(q)
	})
	if got.GetStatus().GetPodIp() != ip {
		t.Errorf("ip changed across the restart: %s -> %s", ip, got.GetStatus().GetPodIp())
	}
	bustest.Eventually(t, wait, func() bool { return e.rt.Running() == 1 && e.rt.IPsInUse() == 1 }, "leftover pod removed")

	e.terminate(keep, 0)
	bustest.Eventually(t, wait, func() bool { return e.get(keep) == nil && e.rt.IPsInUse() == 0 }, "re-adopted pod terminated")
}

// --register-with-taints applies at registration only; extended resources show in the capacity.
func TestRegisterWithTaintsAndExtendedResources(t *testing.T) {
	cfg := testConfig()
	cfg.Taints = []*pb.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}
	cfg.Extended = map[string]string{"example.com/gpu": "2"}
	e := newEnv(t, cfg, fake.Config{})
	ctx := context.Background()
	var n pb.Node
	bustest.Eventually(t, wait, func() bool {
		_, err := bus.Get(ctx, e.nodes, bus.NodeKey(node), &n)
		return err == nil
	}, "node registered")
	if got := n.GetSpec().GetTaints(); len(got) != 1 || got[0].GetKey() != "dedicated" || got[0].GetEffect() != "NoSchedule" {
		t.Errorf("registered taints %v", got)
	}
	if g := n.GetStatus().GetCapacity()["example.com/gpu"]; g != "2" {
		t.Errorf("gpu capacity %q", g)
	}
	if a := n.GetMetadata().GetLabels()["kubernetes.io/arch"]; a != runtime.GOARCH {
		t.Errorf("arch label %q", a)
	}
	// A user removes the taint: later heartbeats do not bring it back.
	if _, _, err := bus.Mutate(ctx, e.nodes, bus.NodeKey(node), func() *pb.Node { return &pb.Node{} }, 10, func(n *pb.Node) (bool, error) {
		n.Spec.Taints = nil
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	mutated := time.Now()
	bustest.Eventually(t, wait, func() bool { return e.leaseRenewedAfter(mutated.Add(150 * time.Millisecond)) }, "two more heartbeats")
	var m pb.Node
	if _, err := bus.Get(ctx, e.nodes, bus.NodeKey(node), &m); err != nil || len(m.GetSpec().GetTaints()) != 0 {
		t.Errorf("taints after heartbeats: %v (%v)", m.GetSpec().GetTaints(), err)
	}
}

// CNI CHECK: a pod whose network fails its check is Running but not Ready, with the check's error in the
// Ready condition and a FailedCNICheck event, whether the check fails before the pod was ever Ready or
// later; once the check passes again the pod is Ready again.
func TestNetworkCheck(t *testing.T) {
	cfg := testConfig()
	cfg.NetworkCheckInterval = 100 * time.Millisecond
	e := newEnv(t, cfg, fake.Config{})
	broken := errors.New("veth of the pod is gone")
	notReady := func(q *pb.Pod) bool {
		c := podutil.PodCondition(q, podutil.PodReady)
		cr := podutil.PodCondition(q, podutil.ContainersReady)
		return q.GetStatus().GetPhase() == "Running" && c.GetStatus() == podutil.False &&
			c.GetReason() == "NetworkNotReady" && strings.Contains(c.GetMessage(), broken.Error()) &&
			cr.GetStatus() == podutil.True
	}
	tests := []struct {
		name        string
		breakBefore bool // the check fails from the start: the pod is never Ready until repaired
	}{
		{"fails before first ready", true},
		{"fails after ready", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPod(strings.ReplaceAll(tt.name, " ", "-"))
			if tt.breakBefore {
				e.rt.SetCheckError(p.Metadata.Uid, broken)
			}
			e.create(p)
			if !tt.breakBefore {
				e.until(p, "ready", isRunningReady)
				e.rt.SetCheckError(p.Metadata.Uid, broken)
			}
			e.until(p, "not ready with the check's error", notReady)
			e.rt.SetCheckError(p.Metadata.Uid, nil)
			e.until(p, "ready again", isRunningReady)
			if !strings.Contains(strings.Join(e.eventReasons(p), ","), "FailedCNICheck") {
				t.Error("no FailedCNICheck event")
			}
		})
	}
}

// An agent restarted after its clock stepped back still has its reports applied: report sequences
// continue after the ones the store holds instead of following the clock.
func TestReportsAppliedAfterClockStepsBack(t *testing.T) {
	var offset atomic.Int64
	cfg := testConfig()
	cfg.Clock = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	e := newEnv(t, cfg, fake.Config{})
	web := newPod("web")
	e.create(web)
	e.until(web, "running", isRunningReady)
	seq := e.get(web).GetInternal().GetReportSeq()

	e.stopAgent()
	offset.Store(int64(-2 * time.Hour))
	e.startAgent(cfg)
	e.until(web, "re-adopted and reported", func(q *pb.Pod) bool { return q.GetInternal().GetReportSeq() > seq })

	// While it runs, the clock steps again: nothing changes for the reports.
	offset.Store(int64(-4 * time.Hour))
	db := newPod("db")
	e.create(db)
	e.until(db, "running", isRunningReady)
	e.terminate(web, 0)
	bustest.Eventually(t, wait, func() bool { return e.get(web) == nil }, "terminated pod reported gone")
}

// A binding sent before the agent's run began is checked against the store: an earlier run may have
// handled the pod's termination, which this run's gone set does not remember.
func TestBindingFromBeforeRunChecksStore(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamPods, bus.ConsumerAgent(node)) }, "agent consuming")
	e.stopAgent()
	ctx := context.Background()

	deleted := newPod("deleted-meanwhile")
	key := bus.PodKey(deleted.Metadata.Namespace, deleted.Metadata.Name)
	e.create(deleted)
	if err := e.pods.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	replaced := newPod("replaced-meanwhile")
	e.create(replaced)
	again := newPod("replaced-meanwhile") // same name, another uid
	data, err := proto.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pods.Put(ctx, bus.PodKey(again.Metadata.Namespace, again.Metadata.Name), data); err != nil {
		t.Fatal(err)
	}
	alive := newPod("still-stored")
	e.create(alive)

	e.startAgent(testConfig())
	e.until(alive, "Running", func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == "Running" })
	bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamPods, bus.ConsumerAgent(node)) }, "bindings handled")
	if n := e.rt.IPsInUse(); n != 1 {
		t.Errorf("%d pods have IPs, want 1 (only the pod still stored)", n)
	}
	if got := e.get(again); got == nil || got.GetMetadata().GetUid() != again.Metadata.Uid || got.GetStatus().GetPhase() == "Running" {
		t.Errorf("the pod that replaced a bound one was touched: %v", got.GetStatus())
	}
}

// Housekeeping stops a pod whose deletion never reached the agent, and removes a sandbox the runtime
// holds for a pod the store does not; a pod still stored keeps running.
func TestCleanupRemovesWhatLeftTheStore(t *testing.T) {
	cfg := testConfig()
	cfg.CleanupInterval = 50 * time.Millisecond
	e := newEnv(t, cfg, fake.Config{})
	ctx := context.Background()

	deleted := newPod("deleted-unannounced")
	kept := newPod("kept")
	for _, p := range []*pb.Pod{deleted, kept} {
		e.create(p)
		e.until(p, "Running", isRunningReady)
	}
	// Deleted from the store with no termination sent: only housekeeping can find it.
	if err := e.pods.Delete(ctx, bus.PodKey(deleted.Metadata.Namespace, deleted.Metadata.Name)); err != nil {
		t.Fatal(err)
	}
	// A sandbox no worker owns, of a pod never stored (as a crash between the runtime's calls leaves).
	stray := newPod("stray")
	if _, err := e.rt.RunSandbox(ctx, stray); err != nil {
		t.Fatal(err)
	}

	sandboxes := func() map[string]bool {
		infos, err := e.rt.ListSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, info := range infos {
			out[info.PodUID] = true
		}
		return out
	}
	bustest.Eventually(t, wait, func() bool {
		sb := sandboxes()
		return !sb[deleted.Metadata.Uid] && !sb[stray.Metadata.Uid]
	}, "the deleted pod's and the stray sandbox removed")
	if !sandboxes()[kept.Metadata.Uid] || e.rt.Running() != 1 {
		t.Errorf("the stored pod's sandbox or container went: sandboxes %v, %d containers running", sandboxes(), e.rt.Running())
	}
	if got := e.get(kept); !isRunningReady(got) {
		t.Errorf("the stored pod is no longer Running and Ready: %v", got.GetStatus())
	}
}

// waitOnly is the fake runtime without exit callbacks, as the containerd runtime is: its NotifyExit
// shadows the fake's, so that it is no agent.ExitNotifier.
type waitOnly struct{ *fake.Runtime }

func (waitOnly) NotifyExit() {}

// A running pod keeps no goroutine that only waits for its others, and, on a runtime that calls back on
// exits (the simulated one), none at all: the simulated nodes of a load test hold every pod of the
// cluster in one process, and each goroutine's stack is scanned by every GC. On a runtime that only
// hands out wait channels, each container's loop waits in a goroutine. Either way the pods end.
func TestRunningPodGoroutines(t *testing.T) {
	for _, tt := range []struct {
		name   string
		wrap   func(*fake.Runtime) agent.Runtime
		perPod int
	}{
		{"exit callbacks", nil, 0},
		{"wait channels", func(rt *fake.Runtime) agent.Runtime { return waitOnly{rt} }, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.NetworkCheckInterval = -1 // one check at the start, no loop
			e := newEnvWrapped(t, cfg, fake.Config{}, tt.wrap)
			const pods = 40
			var ps []*pb.Pod
			for i := range pods {
				p := newPod(fmt.Sprintf("web-%d", i))
				e.create(p)
				ps = append(ps, p)
			}
			for _, p := range ps {
				e.until(p, "Running and Ready", isRunningReady)
			}
			bustest.Eventually(t, wait, func() bool {
				return podGoroutines(t) == tt.perPod*pods
			}, "not %d goroutines per running pod", tt.perPod)
			for _, p := range ps {
				e.terminate(p, 0)
			}
			bustest.Eventually(t, wait, func() bool {
				return e.rt.Running() == 0 && e.rt.IPsInUse() == 0 && podGoroutines(t) == 0
			}, "the pods did not end: containers, sandboxes or pod goroutines left")
			e.stopAgent() // returns once every pod has ended
		})
	}
}

// podGoroutines counts the goroutines running a pod worker's code.
func podGoroutines(t *testing.T) int {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	n := 0
	// debug=1 groups goroutines by stack: "<count> @ <pcs>" and then the stack's frames.
	for _, g := range strings.Split(b.String(), "\n\n") {
		var count int
		if _, err := fmt.Sscanf(g, "%d @", &count); err == nil && strings.Contains(g, "agent.(*podWorker)") {
			n += count
		}
	}
	return n
}
