package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func typesUID(s string) types.UID { return types.UID(s) }

// createPod hands a new pod to the store, as the API's create does. The store refuses a second pod of
// the same name (AlreadyExists), which is how replicas racing to create the same pod end up with one.
func (s *Service) createPod(ctx context.Context, p *pb.Pod, user string) error {
	md := p.GetMetadata()
	uid := md.GetUid()
	err := s.pub.Publish(ctx, bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, Pod: p, User: user}, bus.Meta{
		MsgID: "create-" + uid, Correlation: p.GetInternal().GetCorrelationId(), PodUID: uid,
		Key: md.GetNamespace() + "/" + md.GetName(), User: user,
	})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	return nil
}

// deletePod asks the store to delete a pod (this uid only), as the API's delete does; grace nil: the
// pod's own. reason says why, in the audit timeline. One message per pod and controller however often
// and by however many replicas it is sent.
func (s *Service) deletePod(ctx context.Context, p *pb.Pod, grace *int64, user, why, reason string) error {
	md := p.GetMetadata()
	uid := md.GetUid()
	cmd := &pb.PodCommand{Op: pb.PodCommand_OP_DELETE, PreconditionUid: uid, GracePeriodSeconds: grace, User: user, Reason: reason,
		Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Name: md.GetName(), Namespace: md.GetNamespace(), Uid: uid}}}
	err := s.pub.Publish(ctx, bus.SubjPodDelete, cmd, bus.Meta{
		MsgID: why + "-delete-" + uid, Correlation: p.GetInternal().GetCorrelationId(), PodUID: uid,
		Key: md.GetNamespace() + "/" + md.GetName(), User: user,
	})
	if err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	return nil
}

// updatePod asks the store to replace a pod's metadata and spec at revision rev (compare-and-set).
func (s *Service) updatePod(ctx context.Context, p *pb.Pod, rev uint64, user, why string) error {
	md := p.GetMetadata()
	uid := md.GetUid()
	err := s.pub.Publish(ctx, bus.SubjPodUpdate, &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: p, ExpectedRevision: rev, User: user}, bus.Meta{
		MsgID: fmt.Sprintf("%s-update-%s-%d", why, uid, rev), Correlation: p.GetInternal().GetCorrelationId(), PodUID: uid,
		Key: md.GetNamespace() + "/" + md.GetName(), User: user,
	})
	if err != nil {
		return fmt.Errorf("update pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	return nil
}
