package agent

import (
	"context"
	"maps"
	"runtime"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// heartbeats publishes the node at once and then every HeartbeatInterval until ctx ends.
func (a *Agent) heartbeats(ctx context.Context) {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if err := a.heartbeat(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Agent) heartbeat(ctx context.Context) error {
	now := a.cfg.Clock()
	hb := &pb.NodeHeartbeat{Node: a.node(now), SentAt: timestamppb.New(now), Seq: uint64(now.UnixNano())}
	if d, ok := podutil.NodeStatusDigest(hb.Node); ok {
		hb.StatusDigest = d[:]
	}
	pctx, cancel := context.WithTimeout(ctx, a.cfg.HeartbeatInterval)
	defer cancel()
	return a.pub.Publish(pctx, bus.SubjHeartbeat(a.cfg.Node), hb, bus.Meta{})
}

// node is the Node object as this kubelet posts it.
func (a *Agent) node(now time.Time) *pb.Node {
	labels := maps.Clone(a.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["kubernetes.io/hostname"] = a.cfg.Node
	labels["kubernetes.io/os"] = "linux"
	labels["kubernetes.io/arch"] = runtime.GOARCH
	labels["beta.kubernetes.io/os"] = "linux"
	labels["beta.kubernetes.io/arch"] = runtime.GOARCH

	hbTime := timestamppb.New(now)
	since := timestamppb.New(a.startedAt)
	cond := func(typ, status, reason, msg string) *pb.NodeCondition {
		return &pb.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: hbTime, LastTransitionTime: since}
	}
	// Taints go with every heartbeat, but the status service applies them only when it creates the node.
	var taints []*pb.Taint
	for _, t := range a.cfg.Taints {
		taints = append(taints, &pb.Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: t.GetEffect()})
	}
	addrs, info, network := a.hostDetails(cond)
	conds := append(a.pressureConditions(cond),
		cond(podutil.NodeReady, podutil.True, "KubeletReady", "kubelet is posting ready status"))
	if network != nil {
		conds = append(conds, network)
	}
	n := &pb.Node{
		Metadata: &pb.ObjectMeta{Name: a.cfg.Node, Labels: labels},
		Spec:     &pb.NodeSpec{Taints: taints},
		Status: &pb.NodeStatus{
			Capacity:    capacity(a.cfg),
			Allocatable: capacity(a.cfg),
			Phase:       "Running",
			Conditions:  conds,
			Addresses:   addrs,
			NodeInfo:    info,
		},
	}
	if a.cfg.PodCIDR != "" {
		n.Spec.PodCidr = a.cfg.PodCIDR
		n.Spec.PodCidrs = []string{a.cfg.PodCIDR}
	}
	return n
}
