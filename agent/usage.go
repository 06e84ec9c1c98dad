package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/usage"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Resource usage, as the kubelet's summary API feeds metrics-server:
//
//	real runtime (StatsProvider): every UsageInterval, cumulative CPU and working sets of the node and
//	  its containers ─▶ rates against the previous sample ─▶ usage.Report on bus.SubjUsageNode(node)
//	                 ─▶ eviction thresholds ─▶ pressure conditions (heartbeat) ─▶ evict one pod
//	simulated runtime (UsageEstimator): the Host estimates every node's pods from their requests and
//	  publishes them together, a few messages per interval (bus.SubjUsagePool(host)).

// DefaultUsageInterval is how often usage is measured and published (metrics-server's resolution).
const DefaultUsageInterval = 15 * time.Second

// maxPodsPerReport bounds a pool's usage message (usage.Chunk) well under NATS's payload limit.
const maxPodsPerReport = 2000

// StatsProvider is a runtime that measures the machine and its containers (agent/cri).
type StatsProvider interface {
	Stats(ctx context.Context) (NodeStats, error)
}

// NodeStats is one sample of the node and its running containers.
type NodeStats struct {
	Time time.Time
	// CPUNanos is the CPU time the machine spent busy so far, cumulative.
	CPUNanos    uint64
	MemoryBytes uint64 // in use: capacity minus available
	Signals     Signals
	Containers  []ContainerStats
}

// ContainerStats is one running container's sample.
type ContainerStats struct {
	ID               ContainerID
	PodUID, Name     string // the pod's uid, the container's name in the pod spec
	CPUNanos         uint64 // cumulative
	MemoryWorkingSet uint64
	StartedAt        time.Time // for a first rate when there is no previous sample
}

// UsageEstimator is a runtime with nothing to measure (agent/fake): it makes a running container's
// usage up, plausibly and cheaply.
type UsageEstimator interface {
	EstimateUsage(pod *pb.Pod, c *pb.Container, now time.Time) (cpuNanoCores, memoryBytes uint64)
}

// cpuSample is a cumulative CPU reading.
type cpuSample struct {
	nanos uint64
	at    time.Time
}

// rate is the CPU use between two cumulative readings, in nanocores; 0 when time did not advance or
// the counter went back (a restarted container under the same id).
func rate(prev, cur cpuSample) uint64 {
	dt := cur.at.Sub(prev.at)
	if dt <= 0 || cur.nanos < prev.nanos {
		return 0
	}
	return uint64(float64(cur.nanos-prev.nanos) / dt.Seconds())
}

// usageState is what the measuring loop keeps between samples. Only that loop touches it.
type usageState struct {
	node cpuSample
	ctrs map[ContainerID]cpuSample
}

// measureLoop samples the real runtime every UsageInterval until ctx ends.
func (a *Agent) measureLoop(ctx context.Context, sp StatsProvider) {
	st := &usageState{ctrs: map[ContainerID]cpuSample{}}
	t := time.NewTicker(a.cfg.UsageInterval)
	defer t.Stop()
	for {
		if err := a.measure(ctx, sp, st); err != nil && ctx.Err() == nil {
			a.log.Warn("measuring usage failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// measure takes one sample: publishes usage, updates the pressure conditions and evicts a pod when a
// threshold is past.
func (a *Agent) measure(ctx context.Context, sp StatsProvider, st *usageState) error {
	ns, err := sp.Stats(ctx)
	if err != nil {
		return err
	}
	rep := a.usageOf(ns, st)
	if err := a.publishUsage(bus.SubjUsageNode(a.cfg.Node), &usage.Report{Nodes: []usage.Node{rep}}); err != nil {
		return err
	}
	breaches := Evaluate(ns.Signals, a.thresholds)
	if a.setPressure(breaches) {
		if err := a.heartbeat(ctx); err != nil {
			a.log.Warn("heartbeat after a pressure change failed", "err", err)
		}
	}
	if len(breaches) > 0 {
		return a.evictOne(ctx, breaches[0], rep)
	}
	return nil
}

// usageOf turns a sample into rates against the previous one, with the pods' names.
func (a *Agent) usageOf(ns NodeStats, st *usageState) usage.Node {
	now := ns.Time
	out := usage.Node{Name: a.cfg.Node, Time: now, MemoryBytes: ns.MemoryBytes,
		WindowMillis: a.cfg.UsageInterval.Milliseconds()}
	cur := cpuSample{nanos: ns.CPUNanos, at: now}
	if st.node.at.IsZero() {
		// First sample: the average since the agent started is no better than a short look.
		out.WindowMillis = 0
	} else {
		out.CPUNanoCores = rate(st.node, cur)
		out.WindowMillis = now.Sub(st.node.at).Milliseconds()
	}
	st.node = cur

	byPod := map[string]*usage.Pod{}
	var order []string
	seen := map[ContainerID]bool{}
	for _, c := range ns.Containers {
		seen[c.ID] = true
		cs := cpuSample{nanos: c.CPUNanos, at: now}
		prev, ok := st.ctrs[c.ID]
		st.ctrs[c.ID] = cs
		if !ok {
			// A container seen for the first time: its average since it started.
			prev = cpuSample{at: c.StartedAt}
			if c.StartedAt.IsZero() {
				prev.at = now
			}
		}
		w := a.worker(c.PodUID)
		if w == nil {
			continue
		}
		p := byPod[c.PodUID]
		if p == nil {
			md := w.pod.GetMetadata()
			p = &usage.Pod{Namespace: md.GetNamespace(), Name: md.GetName(), UID: c.PodUID}
			byPod[c.PodUID] = p
			order = append(order, c.PodUID)
		}
		p.Containers = append(p.Containers, usage.Container{Name: c.Name, CPUNanoCores: rate(prev, cs), MemoryBytes: c.MemoryWorkingSet})
	}
	for id := range st.ctrs {
		if !seen[id] {
			delete(st.ctrs, id)
		}
	}
	if out.WindowMillis == 0 {
		// No node rate yet: the pods' sum is the best floor.
		for _, p := range byPod {
			for _, c := range p.Containers {
				out.CPUNanoCores += c.CPUNanoCores
			}
		}
		out.WindowMillis = a.cfg.UsageInterval.Milliseconds()
	}
	for _, uid := range order {
		out.Pods = append(out.Pods, *byPod[uid])
	}
	return out
}

// publishUsage sends a report on core NATS: usage is worth its latest value only.
func (a *Agent) publishUsage(subject string, r *usage.Report) error {
	data, err := usage.Encode(r)
	if err != nil {
		return err
	}
	if err := a.conn.NC.Publish(subject, data); err != nil {
		return fmt.Errorf("publish usage on %s: %w", subject, err)
	}
	metrics.Count("agent.usage.published", 1)
	return nil
}

// estimate is the node's usage made up by the runtime's estimator, from the pods running here. The
// node's pods and containers are the agent's buffers, reused by the next call: the caller encodes the
// node before it estimates again (estimateLoop, the only caller).
func (a *Agent) estimate(est UsageEstimator, now time.Time) usage.Node {
	out := usage.Node{Name: a.cfg.Node, Time: now, WindowMillis: a.cfg.UsageInterval.Milliseconds()}
	b := &a.usageBuf
	a.mu.Lock()
	b.workers = b.workers[:0]
	for _, w := range a.pods {
		b.workers = append(b.workers, w)
	}
	a.mu.Unlock()
	b.pods, b.ctrs = b.pods[:0], b.ctrs[:0]
	for _, w := range b.workers {
		w.mu.Lock()
		if w.rejected || w.finished || w.terminating {
			w.mu.Unlock()
			continue
		}
		first := len(b.ctrs)
		for _, c := range w.ctrs {
			if c.state.GetRunning() == nil {
				continue
			}
			cpu, mem := est.EstimateUsage(w.pod, c.spec, now)
			b.ctrs = append(b.ctrs, usage.Container{Name: c.spec.GetName(), CPUNanoCores: cpu, MemoryBytes: mem})
			out.CPUNanoCores += cpu
			out.MemoryBytes += mem
		}
		w.mu.Unlock()
		if len(b.ctrs) > first {
			md := w.pod.GetMetadata()
			// No uid: the API does not need it, pools send many. Should b.ctrs grow later, this pod
			// keeps its containers in the array they were written to.
			b.pods = append(b.pods, usage.Pod{Namespace: md.GetNamespace(), Name: md.GetName(),
				Containers: b.ctrs[first:len(b.ctrs):len(b.ctrs)]})
		}
	}
	clear(b.workers) // the workers of pods gone since are not kept alive
	out.Pods = b.pods
	// The system's own share: what a kubelet, a runtime and an OS use on an idle node.
	out.CPUNanoCores += 50_000_000
	out.MemoryBytes += 512 << 20
	return out
}

// usageBuffers are estimate's, kept between intervals.
type usageBuffers struct {
	workers []*podWorker
	pods    []usage.Pod
	ctrs    []usage.Container
}

// estimateLoop publishes the estimated usage of every node of a host whose runtime estimates, all of
// them in a few messages per interval, until ctx ends.
func (h *Host) estimateLoop(ctx context.Context) {
	var est []*Agent
	for _, a := range h.agents {
		_, measured := a.rt.(StatsProvider)
		if _, ok := a.rt.(UsageEstimator); ok && !measured {
			est = append(est, a)
		}
	}
	if len(est) == 0 {
		return
	}
	// A named host runs as its pool's credential (natsauth.PoolRole), whatever its size.
	subject := bus.SubjUsagePool(h.cfg.Name)
	if h.cfg.Name == "" {
		subject = bus.SubjUsageNode(est[0].cfg.Node)
	}
	t := time.NewTicker(est[0].cfg.UsageInterval)
	defer t.Stop()
	for {
		now := time.Now()
		nodes := make([]usage.Node, 0, len(est))
		for _, a := range est {
			nodes = append(nodes, a.estimate(a.rt.(UsageEstimator), now))
		}
		for _, r := range usage.Chunk(nodes, maxPodsPerReport) {
			if err := est[0].publishUsage(subject, r); err != nil && ctx.Err() == nil {
				h.log.Warn("publishing usage failed", "err", err)
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
