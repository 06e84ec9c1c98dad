package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/internal/podstream"
)

// Streamer is a runtime that serves kubectl exec, attach and port-forward. A runtime without it refuses
// them (the simulated one).
type Streamer interface {
	// ExecStream runs cmd in the container with s and returns its exit code.
	ExecStream(ctx context.Context, id ContainerID, cmd []string, s podstream.Streams) (int, error)
	// AttachStream connects s to the container's main process until it exits or ctx ends.
	AttachStream(ctx context.Context, id ContainerID, s podstream.Streams) error
	// PortForward copies between conn and port in sb's network namespace until the pod's side ends.
	PortForward(ctx context.Context, sb Sandbox, port int32, conn io.ReadWriter) error
}

// subscribeStreams serves the node's exec, attach and port-forward sessions until ctx ends; the caller
// unsubscribes when it is done.
func (a *Agent) subscribeStreams(ctx context.Context) (*nats.Subscription, error) {
	return podstream.Serve(ctx, a.conn.NC, a.cfg.Node, streamHandler{a})
}

// streamHandler is the agent as podstream.Handler.
type streamHandler struct{ a *Agent }

var _ podstream.Handler = streamHandler{}

func (h streamHandler) Check(o podstream.Open) error {
	_, _, _, err := h.target(o)
	return err
}

func (h streamHandler) Exec(ctx context.Context, o podstream.Open, s podstream.Streams) (podstream.Exit, error) {
	st, id, _, err := h.target(o)
	if err != nil {
		return podstream.Exit{}, err
	}
	if o.Kind == podstream.KindAttach {
		return podstream.Exit{}, st.AttachStream(ctx, id, s)
	}
	code, err := st.ExecStream(ctx, id, o.Command, s)
	return podstream.Exit{Code: code}, err
}

func (h streamHandler) PortForward(ctx context.Context, o podstream.Open, conn io.ReadWriter) error {
	st, _, sb, err := h.target(o)
	if err != nil {
		return err
	}
	return st.PortForward(ctx, sb, o.Port, conn)
}

// target finds what a session is about: the running container (exec, attach) or the pod's sandbox.
func (h streamHandler) target(o podstream.Open) (Streamer, ContainerID, Sandbox, error) {
	a := h.a
	st, ok := a.rt.(Streamer)
	if !ok {
		return nil, "", Sandbox{}, &podstream.RefusedError{Code: http.StatusNotImplemented,
			Message: fmt.Sprintf("the runtime of node %s does not support %s", a.cfg.Node, o.Kind)}
	}
	a.mu.Lock()
	var w *podWorker
	for _, p := range a.pods {
		md := p.pod.GetMetadata()
		if md.GetNamespace() == o.Namespace && md.GetName() == o.Name && (o.UID == "" || md.GetUid() == o.UID) {
			w = p
			break
		}
	}
	a.mu.Unlock()
	if w == nil {
		return nil, "", Sandbox{}, &podstream.RefusedError{Code: http.StatusNotFound,
			Message: fmt.Sprintf("pod %s/%s is not running on node %s", o.Namespace, o.Name, a.cfg.Node)}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sandbox == nil || w.terminating || w.finished {
		return nil, "", Sandbox{}, &podstream.RefusedError{Code: http.StatusBadRequest,
			Message: fmt.Sprintf("pod %s/%s has no running sandbox", o.Namespace, o.Name)}
	}
	if o.Kind == podstream.KindPortForward {
		return st, "", *w.sandbox, nil
	}
	for _, c := range append(append([]*ctr{}, w.ctrs...), w.init...) {
		if c.spec.GetName() != o.Container {
			continue
		}
		if c.id == "" || c.state.GetRunning() == nil {
			return nil, "", Sandbox{}, &podstream.RefusedError{Code: http.StatusBadRequest,
				Message: fmt.Sprintf("container %s is not running", o.Container)}
		}
		return st, c.id, *w.sandbox, nil
	}
	return nil, "", Sandbox{}, &podstream.RefusedError{Code: http.StatusBadRequest,
		Message: fmt.Sprintf("container %s is not valid for pod %s", o.Container, o.Name)}
}
