package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/podbus/podbus/internal/ctxtime"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// startProbesLocked starts the probe loops of a freshly started container. They end when the
// container exits (onExit cancels them) or the pod stops. Called with w.mu held.
func (w *podWorker) startProbesLocked(ctx context.Context, c *ctr, id ContainerID) {
	probes := []struct {
		kind ProbeKind
		p    *pb.Probe
	}{{Startup, c.spec.GetStartupProbe()}, {Readiness, c.spec.GetReadinessProbe()}, {Liveness, c.spec.GetLivenessProbe()}}
	if c.init {
		return // init containers are not probed
	}
	var pctx context.Context
	for _, pr := range probes {
		if pr.p == nil {
			continue
		}
		if pctx == nil {
			var cancel context.CancelFunc
			pctx, cancel = context.WithCancel(ctx)
			c.probeCancel = cancel
		}
		w.goPod(func() { w.probeLoop(pctx, c, id, pr.kind, pr.p) })
	}
}

// probeLoop runs one probe of one container instance with the kubelet's timing: initialDelaySeconds,
// periodSeconds (10), timeoutSeconds (1), successThreshold (1), failureThreshold (3). Readiness and
// liveness wait until the startup probe (if any) succeeded.
func (w *podWorker) probeLoop(ctx context.Context, c *ctr, id ContainerID, kind ProbeKind, p *pb.Probe) {
	period := seconds(p.GetPeriodSeconds(), 10)
	timeout := seconds(p.GetTimeoutSeconds(), 1)
	successes := int(max(p.GetSuccessThreshold(), 1))
	failures := int(max(p.GetFailureThreshold(), 1))
	if p.GetFailureThreshold() == 0 {
		failures = 3
	}
	if !ctxtime.Sleep(ctx, seconds(p.GetInitialDelaySeconds(), 0)) {
		return
	}
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	var ok, bad int
	for {
		w.mu.Lock()
		started, ip := c.started, w.ip
		w.mu.Unlock()
		if kind == Startup || started {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			res := w.a.prober.Probe(pctx, ProbeTarget{Kind: kind, PodUID: w.uid, PodIP: ip, Container: c.spec, ContainerID: id}, p)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if res.Success {
				ok, bad = ok+1, 0
			} else {
				ok, bad = 0, bad+1
				w.mu.Lock()
				w.eventLocked("Warning", "Unhealthy", fmt.Sprintf("%s probe failed: %s", kind, res.Output), fieldPath(c))
				w.mu.Unlock()
			}
			switch kind {
			case Readiness:
				switch {
				case ok >= successes:
					w.setReady(ctx, c, id, true)
				case bad >= failures:
					w.setReady(ctx, c, id, false)
				case bad > 0:
					w.reportRetry(ctx) // carries the Unhealthy event
				}
			case Startup:
				if ok >= 1 {
					w.setStarted(ctx, c, id)
					return
				}
				if bad >= failures {
					w.kill(ctx, c, id, "startup")
					return
				}
			case Liveness:
				if bad >= failures {
					w.kill(ctx, c, id, "liveness")
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (w *podWorker) setReady(ctx context.Context, c *ctr, id ContainerID, ready bool) {
	w.mu.Lock()
	changed := c.id == id && c.ready != ready
	if changed {
		c.ready = ready
	}
	w.mu.Unlock()
	if changed {
		w.reportRetry(ctx)
	}
}

func (w *podWorker) setStarted(ctx context.Context, c *ctr, id ContainerID) {
	w.mu.Lock()
	changed := c.id == id && !c.started
	if changed {
		c.started = true
	}
	w.mu.Unlock()
	if changed {
		w.reportRetry(ctx)
	}
}

// kill stops a container that failed its liveness or startup probe; its loop then restarts it.
func (w *podWorker) kill(ctx context.Context, c *ctr, id ContainerID, probe string) {
	w.mu.Lock()
	w.eventLocked("Normal", "Killing", fmt.Sprintf("Container %s failed %s probe, will be restarted", c.spec.GetName(), probe), fieldPath(c))
	w.mu.Unlock()
	grace := podGrace(w.pod)
	var pr *pb.Probe
	if probe == "liveness" {
		pr = c.spec.GetLivenessProbe()
	} else {
		pr = c.spec.GetStartupProbe()
	}
	if pr.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(pr.GetTerminationGracePeriodSeconds()) * time.Second
	}
	if err := w.a.rt.StopContainer(ctx, id, w.preStop(ctx, c, id, grace)); err != nil && !errors.Is(err, ErrNotFound) {
		w.a.log.Warn("stop unhealthy container", "pod", w.key(), "container", c.spec.GetName(), "err", err)
	}
}

func seconds(v int32, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

// Execer runs commands in containers (exec probes).
type Execer interface {
	ExecSync(ctx context.Context, id ContainerID, cmd []string, timeout time.Duration) (ExecResult, error)
}

// NetProber is the kubelet's prober: exec through the runtime, http and tcp from the node to the pod IP.
type NetProber struct {
	Exec   Execer
	Client *http.Client // nil: a client that skips TLS verification, as the kubelet does
}

var _ Prober = (*NetProber)(nil)

// Probe implements Prober.
func (n *NetProber) Probe(ctx context.Context, t ProbeTarget, p *pb.Probe) ProbeResult {
	switch {
	case p.GetExec() != nil:
		timeout := time.Second
		if d, ok := ctx.Deadline(); ok {
			timeout = time.Until(d)
		}
		res, err := n.Exec.ExecSync(ctx, t.ContainerID, p.GetExec().GetCommand(), timeout)
		if err != nil {
			return ProbeResult{Output: err.Error()}
		}
		if res.ExitCode != 0 {
			return ProbeResult{Output: fmt.Sprintf("command %q exited with %d: %s", strings.Join(p.GetExec().GetCommand(), " "), res.ExitCode, res.Output)}
		}
		return ProbeResult{Success: true}
	case p.GetHttpGet() != nil:
		return n.httpGet(ctx, t, p.GetHttpGet())
	case p.GetTcpSocket() != nil:
		port, err := resolvePort(p.GetTcpSocket().GetPort(), t.Container)
		if err != nil {
			return ProbeResult{Output: err.Error()}
		}
		host := p.GetTcpSocket().GetHost()
		if host == "" {
			host = t.PodIP
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return ProbeResult{Output: err.Error()}
		}
		_ = conn.Close()
		return ProbeResult{Success: true}
	}
	return ProbeResult{Success: true}
}

func (n *NetProber) httpGet(ctx context.Context, t ProbeTarget, h *pb.HTTPGetAction) ProbeResult {
	port, err := resolvePort(h.GetPort(), t.Container)
	if err != nil {
		return ProbeResult{Output: err.Error()}
	}
	host := h.GetHost()
	if host == "" {
		host = t.PodIP
	}
	scheme := strings.ToLower(h.GetScheme())
	if scheme == "" {
		scheme = "http"
	}
	path := h.GetPath()
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), path), nil)
	if err != nil {
		return ProbeResult{Output: err.Error()}
	}
	req.Header.Set("User-Agent", "kube-probe/1.32")
	for _, hd := range h.GetHttpHeaders() {
		if strings.EqualFold(hd.GetName(), "Host") {
			req.Host = hd.GetValue()
			continue
		}
		req.Header.Set(hd.GetName(), hd.GetValue())
	}
	client := n.Client
	if client == nil {
		client = &http.Client{
			Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}, //nolint:gosec // kubelet probes skip verification
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return ProbeResult{Output: err.Error()}
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return ProbeResult{Output: fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)}
	}
	return ProbeResult{Success: true}
}

// resolvePort turns an IntOrString port into a number, looking named ports up in the container.
func resolvePort(port string, c *pb.Container) (int, error) {
	if n, err := strconv.Atoi(port); err == nil {
		if n <= 0 || n > 65535 {
			return 0, fmt.Errorf("invalid port %d", n)
		}
		return n, nil
	}
	for _, p := range c.GetPorts() {
		if p.GetName() == port {
			return int(p.GetContainerPort()), nil
		}
	}
	return 0, fmt.Errorf("named port %q not found in container %s", port, c.GetName())
}
