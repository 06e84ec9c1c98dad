package agent_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestInitContainerStatuses(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	t.Run("a long-running init container completes at once in the fake", func(t *testing.T) {
		p := newPod("init-fake")
		p.Spec.InitContainers = []*pb.Container{
			{Name: "one", Image: "busybox", Command: []string{"sh", "-c", "do-setup"}},
			{Name: "two", Image: "busybox"},
		}
		e.create(p)
		got := e.until(p, "Running and Ready", isRunningReady)
		for _, ics := range got.GetStatus().GetInitContainerStatuses() {
			if ics.GetState().GetTerminated().GetReason() != "Completed" {
				t.Errorf("init container %s: %v", ics.GetName(), ics.GetState())
			}
		}
	})
	t.Run("a failing init container blocks the app and crash-loops", func(t *testing.T) {
		p := newPod("init-crash")
		p.Spec.InitContainers = []*pb.Container{
			{Name: "one", Image: "busybox"},
			{Name: "two", Image: "busybox", Command: []string{"sh", "-c", "exit 3"}},
		}
		e.create(p)
		got := e.until(p, "second init container in CrashLoopBackOff", func(q *pb.Pod) bool {
			ics := q.GetStatus().GetInitContainerStatuses()
			return len(ics) == 2 && ics[1].GetState().GetWaiting().GetReason() == "CrashLoopBackOff"
		})
		st := got.GetStatus()
		if st.GetPhase() != "Pending" {
			t.Errorf("phase %s, want Pending", st.GetPhase())
		}
		if last := st.GetInitContainerStatuses()[1].GetLastState().GetTerminated(); last.GetExitCode() != 3 || last.GetReason() != "Error" {
			t.Errorf("lastState of the failing init container: %v", last)
		}
		if w := st.GetContainerStatuses()[0].GetState().GetWaiting(); w.GetReason() != "PodInitializing" {
			t.Errorf("app container %v, want waiting PodInitializing", st.GetContainerStatuses()[0].GetState())
		}
		if c := podutil.PodCondition(got, podutil.PodInitialized); c.GetStatus() != podutil.False || !strings.Contains(c.GetMessage(), "[two]") {
			t.Errorf("Initialized condition %v", c)
		}
	})
}

func TestInitContainersWaitInPodInitializing(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{Images: []string{}}) // no image present: nothing starts
	p := newPod("init-wait")
	p.Spec.InitContainers = []*pb.Container{{Name: "one", Image: "busybox", ImagePullPolicy: "Never"}, {Name: "two", Image: "busybox"}}
	e.create(p)
	got := e.until(p, "first init container failing", func(q *pb.Pod) bool {
		ics := q.GetStatus().GetInitContainerStatuses()
		return len(ics) == 2 && ics[0].GetState().GetWaiting().GetReason() == "ErrImageNeverPull"
	})
	if w := got.GetStatus().GetInitContainerStatuses()[1].GetState().GetWaiting(); w.GetReason() != "PodInitializing" {
		t.Errorf("second init container %v, want waiting PodInitializing", w)
	}
}

// hookProber fails the hooks named in fail and records every hook it ran.
type hookProber struct {
	mu   sync.Mutex
	fail map[agent.ProbeKind]bool
	ran  []agent.ProbeKind
}

func (h *hookProber) probe(t agent.ProbeTarget) agent.ProbeResult {
	if t.Kind != agent.PostStartHook && t.Kind != agent.PreStopHook {
		return agent.ProbeResult{Success: true}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ran = append(h.ran, t.Kind)
	if h.fail[t.Kind] {
		return agent.ProbeResult{Output: "hook says no"}
	}
	return agent.ProbeResult{Success: true}
}

func (h *hookProber) hooks() []agent.ProbeKind {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ran)
}

func withHooks(p *pb.Pod) {
	p.Spec.Containers[0].Lifecycle = &pb.Lifecycle{
		PostStart: &pb.LifecycleHandler{Exec: &pb.ExecAction{Command: []string{"touch", "/started"}}},
		PreStop:   &pb.LifecycleHandler{HttpGet: &pb.HTTPGetAction{Path: "/quit", Port: "8080"}},
	}
}

func TestLifecycleHooks(t *testing.T) {
	t.Run("postStart then preStop on delete", func(t *testing.T) {
		hp := &hookProber{}
		e := newEnv(t, testConfig(), fake.Config{Probe: hp.probe})
		p := newPod("hooks", withHooks)
		e.create(p)
		e.until(p, "Running and Ready", isRunningReady)
		if got := hp.hooks(); !slices.Equal(got, []agent.ProbeKind{agent.PostStartHook}) {
			t.Errorf("hooks after start %v, want postStart", got)
		}
		e.terminate(p, 5)
		want := []agent.ProbeKind{agent.PostStartHook, agent.PreStopHook}
		for deadline := time.Now().Add(wait); !slices.Equal(hp.hooks(), want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("hooks %v, want postStart then preStop", hp.hooks())
			}
		}
	})
	t.Run("a failing postStart kills the container", func(t *testing.T) {
		hp := &hookProber{fail: map[agent.ProbeKind]bool{agent.PostStartHook: true}}
		e := newEnv(t, testConfig(), fake.Config{Probe: hp.probe})
		p := newPod("poststart-fails", withHooks, withPolicy("Never"))
		e.create(p)
		got := e.until(p, "Failed", func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == "Failed" })
		if term := got.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated(); term == nil || term.GetExitCode() == 0 {
			t.Errorf("container state %v, want terminated with a non-zero code", got.GetStatus().GetContainerStatuses()[0].GetState())
		}
		reasons := strings.Join(e.eventReasons(p), ",")
		if !strings.Contains(reasons, "FailedPostStartHook") || !strings.Contains(reasons, "Killing") {
			t.Errorf("events %s, want FailedPostStartHook and Killing", reasons)
		}
	})
}

func TestPrivilegedRefusedUnlessAllowed(t *testing.T) {
	privileged := func(p *pb.Pod) {
		yes := true
		p.Spec.Containers[0].SecurityContext = &pb.SecurityContext{Privileged: &yes}
	}
	t.Run("refused", func(t *testing.T) {
		e := newEnv(t, testConfig(), fake.Config{})
		p := newPod("priv", privileged)
		e.create(p)
		got := e.until(p, "Failed", func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == "Failed" })
		if st := got.GetStatus(); st.GetReason() != agent.ReasonPrivilegedDisallowed || !strings.Contains(st.GetMessage(), `privileged container "app"`) {
			t.Errorf("status reason %q message %q", st.GetReason(), st.GetMessage())
		}
	})
	t.Run("allowed", func(t *testing.T) {
		cfg := testConfig()
		cfg.AllowPrivileged = true
		e := newEnv(t, cfg, fake.Config{})
		p := newPod("priv", privileged)
		e.create(p)
		e.until(p, "Running and Ready", isRunningReady)
	})
}
