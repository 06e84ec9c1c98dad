package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/podbus/podbus/internal/ctxtime"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Container lifecycle hooks, as the kubelet runs them: postStart right after the container started and
// before it counts as running (a failure kills it, and its restart policy decides what follows);
// preStop before a container is stopped, within its grace period, the stop getting what is left of it.

const (
	// postStartTimeout bounds a postStart hook: the kubelet has no bound but the pod's sync, which a
	// hook that never ends blocks for good.
	postStartTimeout = 2 * time.Minute
	// minStopGrace is what a container gets after its preStop hook used up the grace period (kubelet's
	// minimumGracePeriodInSeconds).
	minStopGrace = 2 * time.Second
)

// Kinds of the ProbeTarget a lifecycle hook's action runs with, so a Prober can tell them apart.
const (
	PostStartHook ProbeKind = "PostStart"
	PreStopHook   ProbeKind = "PreStop"
)

// runHook runs one lifecycle handler against container c (id) of the pod.
func (w *podWorker) runHook(ctx context.Context, kind ProbeKind, c *ctr, id ContainerID, h *pb.LifecycleHandler) error {
	if s := h.SleepSeconds; s != nil {
		if !ctxtime.Sleep(ctx, time.Duration(*s)*time.Second) {
			return fmt.Errorf("sleep lifecycle hook interrupted: %w", ctx.Err())
		}
		return nil
	}
	w.mu.Lock()
	ip := w.ip
	w.mu.Unlock()
	target := ProbeTarget{Kind: kind, PodUID: w.uid, PodIP: ip, Container: c.spec, ContainerID: id}
	res := w.a.prober.Probe(ctx, target, &pb.Probe{Exec: h.GetExec(), HttpGet: h.GetHttpGet(), TcpSocket: h.GetTcpSocket()})
	if res.Success {
		return nil
	}
	// The kubelet's messages, which the events carry.
	action, what := "", ""
	switch {
	case h.GetExec() != nil:
		action, what = "Exec", strings.Join(h.GetExec().GetCommand(), " ")
	case h.GetHttpGet() != nil:
		action, what = "HTTP", h.GetHttpGet().GetPath()
	case h.GetTcpSocket() != nil:
		action, what = "TCP", h.GetTcpSocket().GetPort()
	}
	return hookError(fmt.Sprintf("%s lifecycle hook (%s) for Container %q in Pod %q failed - error: %s",
		action, what, c.spec.GetName(), w.podRef(), res.Output))
}

// hookError is a failed hook, its message the kubelet's (which starts with a capital).
type hookError string

func (e hookError) Error() string { return string(e) }

// postStart runs the container's postStart hook, if any. On failure it records the kubelet's events
// and kills the container: the caller then sees it exit.
func (w *podWorker) postStart(ctx context.Context, c *ctr, id ContainerID) error {
	h := c.spec.GetLifecycle().GetPostStart()
	if h == nil {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, postStartTimeout)
	err := w.runHook(hctx, PostStartHook, c, id, h)
	cancel()
	if err == nil || ctx.Err() != nil {
		return err
	}
	w.a.log.Info("postStart hook failed", "pod", w.key(), "container", c.spec.GetName(), "err", err)
	w.mu.Lock()
	w.eventLocked("Warning", "FailedPostStartHook", err.Error(), fieldPath(c))
	w.eventLocked("Normal", "Killing", "FailedPostStartHook", fieldPath(c))
	w.mu.Unlock()
	if serr := w.a.rt.StopContainer(ctx, id, podGrace(w.pod)); serr != nil && !errors.Is(serr, ErrNotFound) {
		w.a.log.Warn("stop container after failed postStart", "pod", w.key(), "container", c.spec.GetName(), "err", serr)
	}
	return err
}

// preStop runs the container's preStop hook, if any, within grace, and returns the grace left for
// stopping it.
func (w *podWorker) preStop(ctx context.Context, c *ctr, id ContainerID, grace time.Duration) time.Duration {
	h := c.spec.GetLifecycle().GetPreStop()
	if h == nil || grace <= 0 {
		return grace
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, grace)
	err := w.runHook(hctx, PreStopHook, c, id, h)
	cancel()
	if err != nil && ctx.Err() == nil {
		w.a.log.Info("preStop hook failed", "pod", w.key(), "container", c.spec.GetName(), "err", err)
		w.mu.Lock()
		w.eventLocked("Warning", "FailedPreStopHook", err.Error(), fieldPath(c))
		w.mu.Unlock()
	}
	return max(grace-time.Since(start), minStopGrace)
}

// configMessage is a container config error's message without the sentinel's prefix, as the kubelet
// shows it in CreateContainerConfigError.
func configMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ErrContainerConfig.Error()+": "); i >= 0 {
		return msg[i+len(ErrContainerConfig.Error())+2:]
	}
	return msg
}
