package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/podbus/podbus/internal/podlogs"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/podbus/podbus/bus"
)

// LogRequest and LogResponse are the wire format of bus.SubjLogs, shared with the other side.
type (
	LogRequest  = podlogs.LogRequest
	LogResponse = podlogs.LogResponse
)

const logTimeout = 10 * time.Second

func (s *Service) podLogs(w http.ResponseWriter, r *http.Request, req request) {
	o, _, err := s.getEntry(r.Context(), podKind, req.ns, req.name)
	if err != nil {
		writeStatus(w, err)
		return
	}
	pod := o.(*corev1.Pod)
	lr := LogRequest{Namespace: req.ns, Name: req.name, UID: string(pod.UID), Container: req.q.Get("container")}
	if lr.Container == "" {
		if len(pod.Spec.Containers) != 1 {
			names := make([]string, len(pod.Spec.Containers))
			for i, c := range pod.Spec.Containers {
				names[i] = c.Name
			}
			writeStatus(w, badRequest("a container name must be specified for pod %s, choose one of: %v", req.name, names))
			return
		}
		lr.Container = pod.Spec.Containers[0].Name
	}
	lr.Previous = req.q.Get("previous") == "true"
	lr.Timestamps = req.q.Get("timestamps") == "true"
	for name, dst := range map[string]**int64{"tailLines": &lr.TailLines, "sinceSeconds": &lr.SinceSeconds, "limitBytes": &lr.LimitBytes} {
		if v := req.q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				writeStatus(w, badRequest("invalid %s %q", name, v))
				return
			}
			*dst = &n
		}
	}
	node := pod.Spec.NodeName
	if node == "" {
		writeStatus(w, badRequest("pod %s does not have a host assigned", req.name))
		return
	}
	data, _ := json.Marshal(lr)
	ctx, cancel := context.WithTimeout(r.Context(), logTimeout)
	defer cancel()
	msg, err := s.conn.NC.RequestWithContext(ctx, bus.SubjLogs(node), data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("the agent of node %q does not serve logs (no responders on %s)", node, bus.SubjLogs(node))))
		return
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		writeStatus(w, apierrors.NewTimeoutError(fmt.Sprintf("the agent of node %q did not answer the log request", node), 0))
		return
	case err != nil:
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("log request to node %q: %v", node, err)))
		return
	}
	var resp LogResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("malformed log response from node %q: %w", node, err)))
		return
	}
	if resp.Error != "" {
		code := resp.Code
		if code == 0 {
			code = http.StatusInternalServerError
		}
		writeStatus(w, apierrors.NewGenericServerResponse(code, "get", grPods, req.name, resp.Error, 0, false))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(resp.Logs))
}
