package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/podbus/podbus/internal/podlogs"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/bus"
)

// LogRequest and LogResponse are the wire format of bus.SubjLogs, shared with the other side.
type (
	LogRequest  = podlogs.LogRequest
	LogResponse = podlogs.LogResponse
)

// subscribeLogs answers log requests until ctx ends; the caller unsubscribes when it is done.
func (a *Agent) subscribeLogs(ctx context.Context) (*nats.Subscription, error) {
	sub, err := a.conn.NC.QueueSubscribe(bus.SubjLogs(a.cfg.Node), podlogs.QueueLogs, func(m *nats.Msg) {
		go a.answerLogs(ctx, m)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", bus.SubjLogs(a.cfg.Node), err)
	}
	return sub, nil
}

func (a *Agent) answerLogs(ctx context.Context, m *nats.Msg) {
	respond := func(r LogResponse) {
		data, _ := json.Marshal(r)
		_ = m.Respond(data)
	}
	var req LogRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		respond(LogResponse{Error: "bad log request: " + err.Error(), Code: http.StatusBadRequest})
		return
	}
	id, previous, err := a.logContainer(req)
	if err != nil {
		respond(LogResponse{Error: err.Error(), Code: http.StatusNotFound})
		return
	}
	opts := LogOptions{Previous: previous}
	if req.TailLines != nil {
		opts.TailLines = *req.TailLines
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var buf bytes.Buffer
	if err := a.rt.ContainerLogs(lctx, id, &buf, opts); err != nil {
		respond(LogResponse{Error: err.Error(), Code: http.StatusInternalServerError})
		return
	}
	logs := buf.Bytes()
	if req.LimitBytes != nil && *req.LimitBytes >= 0 && int64(len(logs)) > *req.LimitBytes {
		logs = logs[:*req.LimitBytes]
	}
	respond(LogResponse{Logs: string(logs)})
}

// logContainer finds the runtime container a log request is about. previous asks the runtime for the
// attempt before that container: the worker knows the previous container only if the restart happened
// since the agent started; otherwise the runtime finds it.
func (a *Agent) logContainer(req LogRequest) (_ ContainerID, previous bool, _ error) {
	a.mu.Lock()
	var w *podWorker
	for _, p := range a.pods {
		md := p.pod.GetMetadata()
		if md.GetNamespace() == req.Namespace && md.GetName() == req.Name && (req.UID == "" || md.GetUid() == req.UID) {
			w = p
			break
		}
	}
	a.mu.Unlock()
	if w == nil {
		return "", false, fmt.Errorf("pod %s/%s is not running on node %s", req.Namespace, req.Name, a.cfg.Node)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range append(append([]*ctr{}, w.ctrs...), w.init...) {
		if req.Container != "" && c.spec.GetName() != req.Container {
			continue
		}
		// A running container's previous attempt may already be removed (the worker removes the last
		// dead container when it starts the next), so the runtime finds it from the current one; while
		// a container waits to restart, the last dead one is still there: its logs are the current ones.
		id := c.id
		switch {
		case req.Previous && id != "":
			previous = true
		case req.Previous:
			id = c.prevID
		case id == "":
			id = c.prevID
		}
		if id == "" {
			return "", false, fmt.Errorf("container %q in pod %s/%s has no logs", c.spec.GetName(), req.Namespace, req.Name)
		}
		return id, previous, nil
	}
	return "", false, fmt.Errorf("container %q is not valid for pod %s/%s", req.Container, req.Namespace, req.Name)
}
