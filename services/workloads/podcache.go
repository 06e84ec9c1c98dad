package workloads

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// podMask is what the controllers read of a pod: the cache keeps only that of every pod of the
// cluster, in a cachedPod (see decodeCached). A field read from a cached pod must be named here, kept
// by cachedPod, and varied in TestPodMaskKeepsWhatControllersRead; what needs the whole pod
// (setController) reads it from the bucket.
var podMask = bus.NewMask(&pb.Pod{},
	"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.owner_references",
	"metadata.creation_timestamp", "metadata.deletion_timestamp",
	"spec.node_name",
	"status.phase", "status.conditions.type", "status.conditions.status", "status.conditions.last_transition_time",
	"status.container_statuses.restart_count",
	"internal.correlation_id")

// cachedPod is a pod as the cache keeps it: podMask's fields, and of the conditions only the first
// Ready one, the one podutil.PodCondition finds, in one flat value. Generated messages cost their
// protoimpl state and an allocation each; every pod of the cluster stays in the cache. The values
// shared among the pods of a ReplicaSet or node are interned. A cachedPod is never changed once
// cached; pod() gives it back as a message for the controllers' decisions.
type cachedPod struct {
	// ids is the pod's name, uid and correlation id, one after the other in one allocation.
	ids             string
	nameLen, uidLen uint32
	namespace       string
	labels          map[string]string
	// owner is the first owner reference (when has&hasOwner), moreOwners the others, in order.
	owner      cachedOwner
	moreOwners []cachedOwner
	created    stamp
	deleted    stamp
	node       string
	phase      string
	// The Ready condition.
	readyStatus string
	readyAt     stamp
	// restarts holds each container status's restart count, in order.
	restarts []int32
	// rev is the pods-bucket revision the pod was read at, set as it is cached.
	rev uint64
	has presence
}

// presence records which messages the pod holds, so that pod() gives back empty ones too.
type presence uint16

const (
	hasMeta presence = 1 << iota
	hasSpec
	hasStatus
	hasInternal
	hasCreated
	hasDeleted
	hasReady
	hasReadyAt
	hasOwner
)

// stamp is a Timestamp's fields.
type stamp struct {
	sec  int64
	nsec int32
}

func stampOf(t *timestamppb.Timestamp) stamp { return stamp{t.GetSeconds(), t.GetNanos()} }

// optBool is an optional bool: unset, false or true.
type optBool uint8

const (
	boolUnset optBool = iota
	boolFalse
	boolTrue
)

func optBoolOf(b *bool) optBool {
	switch {
	case b == nil:
		return boolUnset
	case *b:
		return boolTrue
	}
	return boolFalse
}

// ptr returns a pointer to the bool, *at set to it, or nil when unset.
func (o optBool) ptr(at *bool) *bool {
	if o == boolUnset {
		return nil
	}
	*at = o == boolTrue
	return at
}

// cachedOwner is an OwnerReference's fields. The strings are those of the owner, shared by its pods.
type cachedOwner struct {
	apiVersion, kind, name, uid    string
	controller, blockOwnerDeletion optBool
}

func cachedOwnerOf(r *pb.OwnerReference) cachedOwner {
	return cachedOwner{
		apiVersion: intern.String(r.GetApiVersion()), kind: intern.String(r.GetKind()),
		name: intern.String(r.GetName()), uid: intern.String(r.GetUid()),
		controller: optBoolOf(r.Controller), blockOwnerDeletion: optBoolOf(r.BlockOwnerDeletion),
	}
}

// decodeCached is a pods-bucket value as the cache keeps it. False when the value is malformed.
func decodeCached(data []byte) (*cachedPod, bool) {
	if c, ok := wireCached(data); ok {
		return c, true
	}
	return decodeProto(data)
}

// decodeProto is decodeCached through the generated decoder, which takes any form of the pod.
func decodeProto(data []byte) (*cachedPod, bool) {
	pruned, ok := bus.Prune(data, podMask)
	p := &pb.Pod{}
	if !ok || proto.Unmarshal(pruned, p) != nil {
		return nil, false
	}
	return compactPod(p), true
}

// decodePod is a pods-bucket value as the controllers read a cached pod. False when the value is
// malformed.
func decodePod(data []byte) (*pb.Pod, bool) {
	c, ok := decodeCached(data)
	if !ok {
		return nil, false
	}
	return c.pod(), true
}

// compactPod is what the cache keeps of p, which need not be pruned.
func compactPod(p *pb.Pod) *cachedPod {
	c := &cachedPod{}
	if md := p.GetMetadata(); md != nil {
		c.has |= hasMeta
		c.namespace = intern.String(md.GetNamespace())
		c.labels = intern.Labels(md.GetLabels())
		if refs := md.GetOwnerReferences(); len(refs) > 0 {
			c.has |= hasOwner
			c.owner = cachedOwnerOf(refs[0])
			if len(refs) > 1 {
				c.moreOwners = make([]cachedOwner, len(refs)-1)
				for i, r := range refs[1:] {
					c.moreOwners[i] = cachedOwnerOf(r)
				}
			}
		}
		if t := md.GetCreationTimestamp(); t != nil {
			c.has |= hasCreated
			c.created = stampOf(t)
		}
		if t := md.GetDeletionTimestamp(); t != nil {
			c.has |= hasDeleted
			c.deleted = stampOf(t)
		}
	}
	if sp := p.GetSpec(); sp != nil {
		c.has |= hasSpec
		c.node = intern.String(sp.GetNodeName())
	}
	if st := p.GetStatus(); st != nil {
		c.has |= hasStatus
		c.phase = intern.String(st.GetPhase())
		if ready := podutil.PodCondition(p, "Ready"); ready != nil {
			c.has |= hasReady
			c.readyStatus = intern.String(ready.GetStatus())
			if t := ready.GetLastTransitionTime(); t != nil {
				c.has |= hasReadyAt
				c.readyAt = stampOf(t)
			}
		}
		if cs := st.GetContainerStatuses(); len(cs) > 0 {
			c.restarts = make([]int32, len(cs))
			for i, s := range cs {
				c.restarts[i] = s.GetRestartCount()
			}
		}
	}
	if p.GetInternal() != nil {
		c.has |= hasInternal
	}
	name, uid := p.GetMetadata().GetName(), p.GetMetadata().GetUid()
	c.ids = name + uid + p.GetInternal().GetCorrelationId()
	c.nameLen, c.uidLen = uint32(len(name)), uint32(len(uid))
	return c
}

// podParts are the messages of a pod() with one owner and one container, allocated at once.
type podParts struct {
	pod                       pb.Pod
	meta                      pb.ObjectMeta
	spec                      pb.PodSpec
	status                    pb.PodStatus
	internal                  pb.PodInternal
	created, deleted, readyAt timestamppb.Timestamp
	ready                     pb.PodCondition
	conditions                [1]*pb.PodCondition
	owner                     pb.OwnerReference
	owners                    [1]*pb.OwnerReference
	controller, block         bool
	container                 pb.ContainerStatus
	containers                [1]*pb.ContainerStatus
}

// pod is the pruned pod c keeps, as a message. Its labels are shared: it must not be changed.
func (c *cachedPod) pod() *pb.Pod {
	m := &podParts{}
	p := &m.pod
	if c.has&hasMeta != 0 {
		md := &m.meta
		p.Metadata = md
		md.Name, md.Namespace, md.Uid, md.Labels = c.name(), c.namespace, c.uid(), c.labels
		if c.has&hasOwner != 0 {
			m.owners[0] = c.owner.message(&m.owner, &m.controller, &m.block)
			md.OwnerReferences = m.owners[:]
			if len(c.moreOwners) > 0 {
				md.OwnerReferences = make([]*pb.OwnerReference, 1, 1+len(c.moreOwners))
				md.OwnerReferences[0] = m.owners[0]
				for _, r := range c.moreOwners {
					md.OwnerReferences = append(md.OwnerReferences, r.message(&pb.OwnerReference{}, new(bool), new(bool)))
				}
			}
		}
		if c.has&hasCreated != 0 {
			md.CreationTimestamp = c.created.message(&m.created)
		}
		if c.has&hasDeleted != 0 {
			md.DeletionTimestamp = c.deleted.message(&m.deleted)
		}
	}
	if c.has&hasSpec != 0 {
		p.Spec = &m.spec
		m.spec.NodeName = c.node
	}
	if c.has&hasStatus != 0 {
		st := &m.status
		p.Status = st
		st.Phase = c.phase
		if c.has&hasReady != 0 {
			m.ready.Type, m.ready.Status = "Ready", c.readyStatus
			if c.has&hasReadyAt != 0 {
				m.ready.LastTransitionTime = c.readyAt.message(&m.readyAt)
			}
			m.conditions[0] = &m.ready
			st.Conditions = m.conditions[:]
		}
		switch len(c.restarts) {
		case 0:
		case 1:
			m.container.RestartCount = c.restarts[0]
			m.containers[0] = &m.container
			st.ContainerStatuses = m.containers[:]
		default:
			st.ContainerStatuses = make([]*pb.ContainerStatus, len(c.restarts))
			for i, n := range c.restarts {
				st.ContainerStatuses[i] = &pb.ContainerStatus{RestartCount: n}
			}
		}
	}
	if c.has&hasInternal != 0 {
		p.Internal = &m.internal
		m.internal.CorrelationId = c.correlation()
	}
	return p
}

func (c *cachedPod) name() string { return c.ids[:c.nameLen] }

func (c *cachedPod) uid() string { return c.ids[c.nameLen : c.nameLen+c.uidLen] }

func (c *cachedPod) correlation() string { return c.ids[c.nameLen+c.uidLen:] }

// message fills and returns at.
func (s stamp) message(at *timestamppb.Timestamp) *timestamppb.Timestamp {
	at.Seconds, at.Nanos = s.sec, s.nsec
	return at
}

// message fills and returns at, whose optional bools point to controller and block.
func (r cachedOwner) message(at *pb.OwnerReference, controller, block *bool) *pb.OwnerReference {
	at.ApiVersion, at.Kind, at.Name, at.Uid = r.apiVersion, r.kind, r.name, r.uid
	at.Controller, at.BlockOwnerDeletion = r.controller.ptr(controller), r.blockOwnerDeletion.ptr(block)
	return at
}

// controllerRef is the pod's controller reference, as controllerRefPB finds it; nil when none.
func (c *cachedPod) controllerRef() *cachedOwner {
	if c.has&hasOwner == 0 {
		return nil
	}
	if c.owner.controller == boolTrue {
		return &c.owner
	}
	for i := range c.moreOwners {
		if c.moreOwners[i].controller == boolTrue {
			return &c.moreOwners[i]
		}
	}
	return nil
}
