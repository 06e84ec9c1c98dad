package agent

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Pod condition type the kubelet adds once the sandbox is up (beta, on by default since 1.29).
const podReadyToStartContainers = "PodReadyToStartContainers"

// statusLocked builds the pod's status as the kubelet would show it. Called with w.mu held.
func (w *podWorker) statusLocked(now time.Time) *pb.PodStatus {
	st := &pb.PodStatus{
		Phase:    w.phaseLocked(),
		Reason:   w.reason,
		Message:  w.message,
		HostIp:   w.a.cfg.HostIP,
		QosClass: w.pod.GetStatus().GetQosClass(),
	}
	scheduled := w.condLocked(now, podutil.PodScheduled, podutil.True, "", "")
	if w.rejected {
		st.Conditions = []*pb.PodCondition{scheduled}
		return st
	}
	st.StartTime = timestamppb.New(w.startTime)
	if w.ip != "" {
		st.PodIp, st.PodIps = w.ip, []string{w.ip}
	}
	for _, c := range w.init {
		st.InitContainerStatuses = append(st.InitContainerStatuses, w.containerStatusLocked(c))
	}
	for _, c := range w.ctrs {
		st.ContainerStatuses = append(st.ContainerStatuses, w.containerStatusLocked(c))
	}

	sandbox := podutil.False
	if w.sandbox != nil {
		sandbox = podutil.True
	}
	initialized := w.condLocked(now, podutil.PodInitialized, podutil.True, "", "")
	if !w.initDone {
		var pending []string
		for _, c := range w.init {
			if !c.done {
				pending = append(pending, c.spec.GetName())
			}
		}
		initialized = w.condLocked(now, podutil.PodInitialized, podutil.False, "ContainersNotInitialized",
			fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(pending, " ")))
	}
	var unready []string
	for _, c := range w.ctrs {
		if !c.ready {
			unready = append(unready, c.spec.GetName())
		}
	}
	ready := func(t string) *pb.PodCondition {
		switch {
		case w.finished:
			return w.condLocked(now, t, podutil.False, "PodCompleted", "")
		case !w.initDone:
			return w.condLocked(now, t, podutil.False, "ContainersNotInitialized",
				initialized.GetMessage())
		case len(unready) > 0:
			return w.condLocked(now, t, podutil.False, "ContainersNotReady",
				fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " ")))
		case t == podutil.PodReady && !w.netReady:
			// Like a readiness gate: the containers may be ready, the pod is not without its network.
			msg := "pod network not checked yet"
			if w.netErr != "" {
				msg = "pod network check failed: " + w.netErr
			}
			return w.condLocked(now, t, podutil.False, "NetworkNotReady", msg)
		}
		return w.condLocked(now, t, podutil.True, "", "")
	}
	st.Conditions = []*pb.PodCondition{
		w.condLocked(now, podReadyToStartContainers, sandbox, "", ""),
		initialized,
		ready(podutil.PodReady),
		ready(podutil.ContainersReady),
		scheduled,
	}
	return st
}

func (w *podWorker) phaseLocked() string {
	switch {
	case w.rejected, w.evicted:
		return "Failed"
	case w.finished:
		for _, c := range append(append([]*ctr{}, w.init...), w.ctrs...) {
			if t := c.state.GetTerminated(); t == nil || t.GetExitCode() != 0 {
				return "Failed"
			}
		}
		return "Succeeded"
	case !w.initDone:
		return "Pending"
	}
	for _, c := range w.ctrs {
		if !c.hasRun && c.state.GetTerminated() == nil {
			return "Pending" // not started yet (ContainerCreating, image errors)
		}
	}
	return "Running"
}

// condLocked returns a condition, keeping its lastTransitionTime while its status stays the same.
func (w *podWorker) condLocked(now time.Time, typ, status, reason, msg string) *pb.PodCondition {
	cs, ok := w.conds[typ]
	if !ok || cs.status != status {
		cs = condState{status: status, at: now}
		if typ == podutil.PodScheduled {
			cs.at = w.startTime
		}
		w.conds[typ] = cs
	}
	return &pb.PodCondition{Type: typ, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: timestamppb.New(cs.at)}
}

func (w *podWorker) containerStatusLocked(c *ctr) *pb.ContainerStatus {
	started := c.started && c.state.GetRunning() != nil
	cs := &pb.ContainerStatus{
		Name:         c.spec.GetName(),
		State:        proto.Clone(c.state).(*pb.ContainerState),
		LastState:    &pb.ContainerState{},
		Ready:        c.ready && c.state.GetRunning() != nil,
		RestartCount: c.restarts,
		Image:        c.spec.GetImage(),
		ImageId:      c.imageRef,
		ContainerId:  c.idURI,
		Started:      &started,
	}
	if c.last != nil {
		cs.LastState.Terminated = proto.Clone(c.last).(*pb.ContainerStateTerminated)
	}
	return cs
}

// containerURI is the container id as Kubernetes shows it: "<runtime>://<id>".
func (a *Agent) containerURI(id ContainerID) string {
	if id == "" {
		return ""
	}
	return a.runtimeName + "://" + string(id)
}
