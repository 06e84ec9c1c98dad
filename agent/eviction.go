package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/internal/usage"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Eviction under node pressure, as the kubelet's eviction manager does it with hard thresholds: at
// each sample past a threshold, one pod is stopped at once (no grace period) and reported Failed with
// reason Evicted; the next sample decides whether another must go.

// ReasonEvicted is the reason of a pod evicted under node pressure.
const ReasonEvicted = "Evicted"

// QoS classes.
const (
	QOSBestEffort = "BestEffort"
	QOSBurstable  = "Burstable"
	QOSGuaranteed = "Guaranteed"
)

// setPressure records the conditions the breaches put under pressure and reports whether any changed.
func (a *Agent) setPressure(breaches []Breach) bool {
	now := map[string]bool{}
	for _, b := range breaches {
		now[b.Condition] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := false
	for _, c := range []string{CondMemoryPressure, CondDiskPressure, CondPIDPressure} {
		if a.pressure[c] != now[c] {
			changed = true
		}
	}
	a.pressure = now
	return changed
}

// pressureConditions are the node's pressure conditions as the kubelet words them.
func (a *Agent) pressureConditions(cond func(typ, status, reason, msg string) *pb.NodeCondition) []*pb.NodeCondition {
	a.mu.Lock()
	p := a.pressure
	a.mu.Unlock()
	pick := func(typ string, no, noMsg, yes, yesMsg string) *pb.NodeCondition {
		if p[typ] {
			return cond(typ, podutil.True, yes, yesMsg)
		}
		return cond(typ, podutil.False, no, noMsg)
	}
	return []*pb.NodeCondition{
		pick(CondMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available",
			"KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
		pick(CondDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure",
			"KubeletHasDiskPressure", "kubelet has disk pressure"),
		pick(CondPIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available",
			"KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
	}
}

// Candidate is a running pod as the eviction ranking sees it.
type Candidate struct {
	Pod    *pb.Pod
	Memory int64 // working set, bytes
}

// QOSClass is the pod's QoS class: the one admission recorded, else derived from its containers.
func QOSClass(p *pb.Pod) string {
	if q := p.GetStatus().GetQosClass(); q != "" {
		return q
	}
	guaranteed, set := true, false
	for _, c := range append(slices.Clone(p.GetSpec().GetInitContainers()), p.GetSpec().GetContainers()...) {
		req, lim := c.GetResources().GetRequests(), c.GetResources().GetLimits()
		if len(req) > 0 || len(lim) > 0 {
			set = true
		}
		for _, r := range []string{podutil.CPU, podutil.Memory} {
			l, ok := lim[r]
			if !ok || (req[r] != "" && req[r] != l) {
				guaranteed = false
			}
		}
	}
	switch {
	case !set:
		return QOSBestEffort
	case guaranteed:
		return QOSGuaranteed
	}
	return QOSBurstable
}

// tier orders candidates for eviction: BestEffort, then Burstable pods using more memory than they
// requested, then Burstable within its requests, then Guaranteed.
func tier(c Candidate) int {
	switch QOSClass(c.Pod) {
	case QOSBestEffort:
		return 0
	case QOSBurstable:
		if c.Memory > podutil.PodRequests(c.Pod).GetMemory() {
			return 1
		}
		return 2
	}
	return 3
}

// RankForEviction orders candidates, first to evict first: by tier, then lower priority, then the
// most memory used beyond the request.
func RankForEviction(cs []Candidate) {
	slices.SortStableFunc(cs, func(x, y Candidate) int {
		if c := cmp.Compare(tier(x), tier(y)); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Pod.GetSpec().GetPriority(), y.Pod.GetSpec().GetPriority()); c != 0 {
			return c
		}
		over := func(c Candidate) int64 { return c.Memory - podutil.PodRequests(c.Pod).GetMemory() }
		return cmp.Compare(over(y), over(x))
	})
}

// evictionMessage says why, as the kubelet's does.
func evictionMessage(b Breach, c Candidate, ctrs []usage.Container) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "The node was low on resource: %s. Threshold quantity: %s, available: %s. ",
		b.Resource(), b.Threshold.text, b.quantityText(b.Available))
	if b.Resource() == podutil.Memory {
		for _, u := range ctrs {
			req := ""
			for _, sc := range c.Pod.GetSpec().GetContainers() {
				if sc.GetName() == u.Name {
					req = sc.GetResources().GetRequests()[podutil.Memory]
				}
			}
			if req == "" {
				req = "0"
			}
			fmt.Fprintf(&sb, "Container %s was using %s, request is %s, has larger consumption of memory. ",
				u.Name, b.quantityText(int64(u.MemoryBytes)), req)
		}
	}
	return strings.TrimSpace(sb.String())
}

// evictOne stops the first pod in eviction order and reports it Evicted.
func (a *Agent) evictOne(ctx context.Context, b Breach, node usage.Node) error {
	used := map[string][]usage.Container{}
	for _, p := range node.Pods {
		used[p.UID] = p.Containers
	}
	a.mu.Lock()
	var cands []Candidate
	byUID := map[string]*podWorker{}
	for uid, w := range a.pods {
		w.mu.Lock()
		live := !w.rejected && !w.finished && !w.terminating
		w.mu.Unlock()
		if !live {
			continue
		}
		var mem int64
		for _, c := range used[uid] {
			mem += int64(c.MemoryBytes)
		}
		cands = append(cands, Candidate{Pod: w.pod, Memory: mem})
		byUID[uid] = w
	}
	a.mu.Unlock()
	if len(cands) == 0 {
		return nil
	}
	RankForEviction(cands)
	victim := cands[0]
	w := byUID[victim.Pod.GetMetadata().GetUid()]
	msg := evictionMessage(b, victim, used[w.uid])
	a.log.Warn("evicting pod under node pressure", "pod", w.key(), "signal", b.Threshold.Signal, "message", msg)
	return w.evict(ctx, msg)
}

// evict stops the pod at once and reports it Failed, reason Evicted; it is not restarted.
func (w *podWorker) evict(ctx context.Context, msg string) error {
	if err := w.terminate(ctx, 0); err != nil {
		return fmt.Errorf("evict pod %s: %w", w.key(), err)
	}
	w.mu.Lock()
	w.finished, w.evicted = true, true
	w.reason, w.message = ReasonEvicted, msg
	w.eventLocked("Warning", ReasonEvicted, msg, "")
	w.mu.Unlock()
	metrics.Count("agent.evictions", 1)
	w.reportRetry(ctx)
	return nil
}
