package agent_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// volumeRuntime is the fake runtime mounting volumes: SetupVolumes returns what the test sets.
type volumeRuntime struct {
	*fake.Runtime
	mu    sync.Mutex
	err   error
	calls int
}

func (v *volumeRuntime) SetupVolumes(context.Context, *pb.Pod, agent.ObjectGetter) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls++
	return v.err
}

func (v *volumeRuntime) set(err error) {
	v.mu.Lock()
	v.err = err
	v.mu.Unlock()
}

func withConfigMapVolume(p *pb.Pod) {
	p.Spec.Volumes = []*pb.Volume{{Name: "cfg", Source: []byte(`{"configMap":{"name":"absent"}}`)}}
	p.Spec.Containers[0].VolumeMounts = []*pb.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}}
}

// TestSimulatedAgentAcceptsVolumes: the fake runtime mounts nothing, so a pod naming a ConfigMap that
// does not exist runs.
func TestSimulatedAgentAcceptsVolumes(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	p := newPod("vols", withConfigMapVolume)
	e.create(p)
	e.until(p, "Running and Ready", isRunningReady)
}

// TestVolumeLifecycle: a mount failure keeps the pod ContainerCreating with FailedMount events until it
// succeeds; an emptyDir over its limit later evicts the pod (Failed, Evicted, sandbox released); a
// refused volume fails the pod with the runtime's reason.
func TestVolumeLifecycle(t *testing.T) {
	cfg := testConfig()
	cfg.VolumeSyncPeriod = 50 * time.Millisecond
	e := newEnv(t, cfg, fake.Config{})
	// The agent on the plain fake runtime is replaced once it has registered its node.
	bustest.Eventually(t, wait, func() bool {
		_, err := e.nodes.Get(context.Background(), bus.NodeKey(node))
		return err == nil
	}, "node registered")
	e.stopAgent()
	vrt := &volumeRuntime{Runtime: e.rt}
	vrt.set(fmt.Errorf("configmap %q: %w", "absent", agent.ErrNotFound))
	a, err := agent.New(cfg, e.conn, vrt)
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, a.Run)

	p := newPod("mount", withConfigMapVolume)
	e.create(p)
	got := e.until(p, "FailedMount while ContainerCreating", func(q *pb.Pod) bool {
		cs := q.GetStatus().GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetState().GetWaiting().GetReason() == "ContainerCreating" &&
			slices.Contains(e.eventReasons(p), "FailedMount")
	})
	if ph := got.GetStatus().GetPhase(); ph != "Pending" {
		t.Errorf("phase %s while mounts fail", ph)
	}
	vrt.set(nil)
	e.until(p, "Running once mounted", isRunningReady)

	const msg = `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi".`
	vrt.set(&agent.EvictionError{Message: msg})
	got = e.until(p, "Evicted", func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == "Failed" })
	if got.GetStatus().GetReason() != "Evicted" || got.GetStatus().GetMessage() != msg {
		t.Errorf("reason %q message %q", got.GetStatus().GetReason(), got.GetStatus().GetMessage())
	}
	bustest.Eventually(t, wait, func() bool { return slices.Contains(e.eventReasons(p), "Evicted") }, "Evicted event")
	bustest.Eventually(t, wait, func() bool { return e.rt.IPsInUse() == 0 }, "sandbox of the evicted pod removed")

	vrt.set(&agent.VolumeRefusedError{Reason: "HostPathNotAllowed", Message: `volume "h": hostPath volumes are not allowed`})
	q := newPod("hostpath", withConfigMapVolume)
	e.create(q)
	got = e.until(q, "refused", func(q *pb.Pod) bool { return q.GetStatus().GetPhase() == "Failed" })
	if got.GetStatus().GetReason() != "HostPathNotAllowed" {
		t.Errorf("refused pod: reason %q message %q", got.GetStatus().GetReason(), got.GetStatus().GetMessage())
	}
	bustest.Eventually(t, wait, func() bool { return e.rt.IPsInUse() == 0 }, "sandbox of the refused pod removed")
}
