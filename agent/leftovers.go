package agent

import (
	"context"

	"golang.org/x/sync/errgroup"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// leftoverRemovals bounds how many leftover sandboxes reconcile removes at once. Each removal mostly
// waits on the runtime (kill, task and snapshot deletion, CNI DEL), and the node sends no heartbeat
// until reconcile ends: after an outage, a node whose pods were all evicted stays tainted until then.
const leftoverRemovals = 8

// removeLeftovers removes the sandboxes whose pod left the store, or is being deleted there, and
// reports the latter gone. bound holds the pods the store has on this node.
func (a *Agent) removeLeftovers(ctx context.Context, infos []SandboxInfo, bound map[string]*pb.Pod) error {
	var g errgroup.Group
	g.SetLimit(leftoverRemovals)
	for _, info := range infos {
		g.Go(func() error {
			a.log.Info("removing leftover sandbox", "pod", info.Namespace+"/"+info.Name, "uid", info.PodUID)
			if err := a.removeLeftover(ctx, info); err != nil {
				return err
			}
			if bound[info.PodUID] == nil {
				return nil
			}
			return a.reportGone(ctx, &pb.PodTermination{Uid: info.PodUID, Namespace: info.Namespace, Name: info.Name, Node: a.cfg.Node})
		})
	}
	return g.Wait()
}
