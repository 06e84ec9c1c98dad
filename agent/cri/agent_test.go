package cri_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The real agent on the real runtime: a bound pod becomes Ready through an httpGet readiness probe,
// answers on its IP, shows its logs over NATS, and is gone (with its sandbox) after termination; a
// crashing command reaches CrashLoopBackOff, a failing exec liveness probe restarts its container, a
// missing image shows ErrImagePull then ImagePullBackOff.
func TestAgentRunsRealPod(t *testing.T) {
	r := startRealAgent(t, agent.Config{BackoffBase: 400 * time.Millisecond, BackoffMax: 2 * time.Second})
	ctx, conn, pub, bind, getPod, rt, node, busybox := r.ctx, r.conn, r.pub, r.bind, r.pod, r.rt, r.node, r.busybox

	web := webServer(busybox)
	web.Command[2] = "echo serving; " + web.Command[2]
	web.Ports = []*pb.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: "TCP"}}
	web.ReadinessProbe = &pb.Probe{HttpGet: &pb.HTTPGetAction{Path: "/index.html", Port: "http"}, PeriodSeconds: 1}
	get := func() *pb.Pod { return getPod("web") }
	waiting := func(name string) (string, string) {
		cs := getPod(name).GetStatus().GetContainerStatuses()
		if len(cs) == 0 {
			return "", ""
		}
		return cs[0].GetState().GetWaiting().GetReason(), cs[0].GetState().GetWaiting().GetMessage()
	}

	p := newPod("web", web)
	bind(p)
	// A command that crashes, a liveness probe (exec, through the runtime) that fails, an image that
	// does not exist.
	crash := newPod("crash", ctr("crash", busybox, "sh", "-c", "echo boom; exit 1"))
	sick := ctr("sick", busybox, "sleep", "3600")
	sick.LivenessProbe = &pb.Probe{Exec: &pb.ExecAction{Command: []string{"cat", "/tmp/healthy"}}, PeriodSeconds: 1,
		FailureThreshold: 1, TerminationGracePeriodSeconds: proto.Int64(0)}
	missing := newPod("missing", ctr("missing", strings.Replace(busybox, "busybox:latest", "nothing:here", 1)))
	for _, q := range []*pb.Pod{crash, newPod("sick", sick), missing} {
		bind(q)
	}

	var got *pb.Pod
	bustest.Eventually(t, 20*time.Second, func() bool {
		got = get()
		c := podutil.PodCondition(got, podutil.PodReady)
		return got.GetStatus().GetPhase() == "Running" && c.GetStatus() == podutil.True
	}, "pod Running and Ready")
	st := got.GetStatus()
	if cs := st.GetContainerStatuses(); len(cs) != 1 || !strings.HasPrefix(cs[0].GetContainerId(), "containerd://") {
		t.Errorf("container statuses %v", cs)
	}
	if body, err := httpGet("http://" + st.GetPodIp() + ":8080/"); err != nil || !strings.Contains(body, "hello from podbus") {
		t.Errorf("GET the pod: %q, %v", body, err)
	}

	req, _ := json.Marshal(agent.LogRequest{Namespace: "default", Name: "web", Container: "web"})
	reply, err := conn.NC.Request(bus.SubjLogs(node), req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var logs agent.LogResponse
	if err := json.Unmarshal(reply.Data, &logs); err != nil || !strings.Contains(logs.Logs, "serving") {
		t.Errorf("logs %+v, %v", logs, err)
	}

	bustest.Eventually(t, 20*time.Second, func() bool {
		reason, _ := waiting("crash")
		cs := getPod("crash").GetStatus().GetContainerStatuses()
		return reason == "CrashLoopBackOff" && cs[0].GetRestartCount() >= 1 && cs[0].GetLastState().GetTerminated().GetExitCode() == 1
	}, "crash: CrashLoopBackOff after exit 1")
	req, _ = json.Marshal(agent.LogRequest{Namespace: "default", Name: "crash", Previous: true})
	if reply, err = conn.NC.Request(bus.SubjLogs(node), req, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(reply.Data, &logs); err != nil || logs.Logs != "boom\n" {
		t.Errorf("previous logs of crash: %+v, %v", logs, err)
	}
	bustest.Eventually(t, 20*time.Second, func() bool {
		return getPod("sick").GetStatus().GetContainerStatuses()[0].GetRestartCount() >= 2
	}, "sick: restarted by its liveness probe")
	var sawErrImagePull bool
	bustest.Eventually(t, 20*time.Second, func() bool {
		reason, msg := waiting("missing")
		sawErrImagePull = sawErrImagePull || reason == "ErrImagePull"
		return sawErrImagePull && reason == "ImagePullBackOff" && strings.Contains(msg, "not found")
	}, "missing: ErrImagePull, then ImagePullBackOff saying not found")

	// busybox httpd as PID 1 ignores SIGTERM: the grace period ends with SIGKILL.
	term := &pb.PodTermination{Uid: p.Metadata.Uid, Namespace: "default", Name: "web", Node: node, GracePeriodSeconds: 1, DeletionTimestamp: timestamppb.Now()}
	if err := pub.Publish(ctx, bus.SubjPodTerminate(node), term, bus.Meta{MsgID: "term-" + p.Metadata.Uid, PodUID: p.Metadata.Uid, Key: "default/web"}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 20*time.Second, func() bool { return get() == nil }, "pod gone from the store")
	sbs, err := rt.ListSandboxes(ctx)
	if err != nil || len(sbs) != 3 {
		t.Errorf("sandboxes after terminating web: %v, %v; want those of the 3 others", sbs, err)
	}
}
