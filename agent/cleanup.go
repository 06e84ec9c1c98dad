package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// DefaultCleanupInterval is how often a node's agent compares what it runs with the store (see
// cleanupLoop). The kubelet's housekeeping runs every 2 s against its informer's cache; this one reads
// the store, one key per pod.
const DefaultCleanupInterval = 10 * time.Second

// cleanupLoop is the agent's housekeeping, as the kubelet's HandlePodCleanups: now and then it stops
// the pods this agent runs, and removes the sandboxes the runtime holds without a worker, whose pod
// left the store (deleted, replaced by another of its name, or being deleted there). Terminations and
// reconcile at start cover the usual ways a pod goes; this covers whatever slipped between them (a
// termination handled by an earlier run while a binding of the pod was still to be redelivered, a
// crash between the runtime's calls), so that a node never keeps a deleted pod's containers.
func (a *Agent) cleanupLoop(ctx context.Context) {
	if a.cfg.CleanupInterval <= 0 || a.podStore == nil {
		return
	}
	t := time.NewTimer(jitter(a.cfg.CleanupInterval))
	defer t.Stop()
	suspects := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, err := a.cleanup(ctx, suspects)
		if err != nil && ctx.Err() == nil {
			a.log.Warn("housekeeping", "err", err)
		}
		suspects = next
		t.Reset(jitter(a.cfg.CleanupInterval))
	}
}

// cleanupCandidate is a pod the agent runs (w) or a sandbox it does not (sb).
type cleanupCandidate struct {
	uid, namespace, name string
	w                    *podWorker
	sb                   *SandboxInfo
}

// cleanup makes one pass. A pod is acted on only when it was found gone from the store in the pass
// before too (suspects, by uid), so that a termination already on its way is left to finish; it
// returns the uids found gone in this pass and not acted on.
func (a *Agent) cleanup(ctx context.Context, suspects map[string]bool) (map[string]bool, error) {
	infos, err := a.rt.ListSandboxes(ctx)
	if err != nil {
		return suspects, fmt.Errorf("list sandboxes: %w", err)
	}
	var cands []cleanupCandidate
	a.mu.Lock()
	for uid, w := range a.pods {
		md := w.pod.GetMetadata()
		cands = append(cands, cleanupCandidate{uid: uid, namespace: md.GetNamespace(), name: md.GetName(), w: w})
	}
	for i, info := range infos {
		if _, ok := a.pods[info.PodUID]; !ok {
			cands = append(cands, cleanupCandidate{uid: info.PodUID, namespace: info.Namespace, name: info.Name, sb: &infos[i]})
		}
	}
	a.mu.Unlock()

	next := map[string]bool{}
	var errs []error
	for _, c := range cands {
		stored, err := a.storedPod(ctx, c.namespace, c.name)
		if err != nil {
			return next, err
		}
		if !left(stored, c.uid) {
			continue
		}
		if !suspects[c.uid] {
			next[c.uid] = true
			continue
		}
		if err := a.dropLeftPod(ctx, c, stored); err != nil {
			errs = append(errs, err)
		}
	}
	return next, errors.Join(errs...)
}

// dropLeftPod stops a worker's pod, or removes a sandbox without one, whose pod left the store; stored
// is what the store holds under the pod's name.
func (a *Agent) dropLeftPod(ctx context.Context, c cleanupCandidate, stored *pb.Pod) error {
	term := &pb.PodTermination{Uid: c.uid, Namespace: c.namespace, Name: c.name, Node: a.cfg.Node}
	// Still stored under its uid: being deleted, and it waits for the gone report.
	deleting := stored != nil && stored.GetMetadata().GetUid() == c.uid
	if c.w != nil {
		c.w.mu.Lock()
		busy := c.w.terminating
		c.w.mu.Unlock()
		if busy || a.worker(c.uid) != c.w {
			return nil // a termination is under way, or done
		}
		if deleting {
			term.GracePeriodSeconds = stored.GetMetadata().GetDeletionGracePeriodSeconds()
		}
		a.log.Info("stopping a pod that left the store", "pod", c.namespace+"/"+c.name, "uid", c.uid)
		return a.terminate(ctx, term)
	}
	a.mu.Lock()
	if _, ok := a.pods[c.uid]; ok {
		a.mu.Unlock()
		return nil // started since the pass began: its worker owns the sandbox
	}
	// A binding of the pod delivered later must not start it again.
	a.remember(c.uid)
	a.mu.Unlock()
	a.log.Info("removing the sandbox of a pod that left the store", "pod", c.namespace+"/"+c.name, "uid", c.uid)
	if err := a.removeLeftover(ctx, *c.sb); err != nil {
		return err
	}
	if !deleting {
		return nil
	}
	return a.reportGone(ctx, term)
}

// storedPod is the pod the store holds under namespace/name, nil if none.
func (a *Agent) storedPod(ctx context.Context, namespace, name string) (*pb.Pod, error) {
	var p pb.Pod
	_, err := bus.Get(ctx, a.podStore, bus.PodKey(namespace, name), &p)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pod %s/%s: %v", namespace, name, err) // not wrapped: not the fault of the message being handled
	}
	return &p, nil
}
