// Package podfields names the fields of a stored pod that the wire readers (the API's watch cache
// index, the workload and metadata controllers' caches, the scheduler's watch of pods waiting for a
// node, the node lifecycle controller's cache) read with bus.NextField, by their numbers from the
// messages' descriptors, so that each reader does not declare them again.
package podfields

import (
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Pod's fields.
var (
	PodMeta     = bus.FieldNumber(&pb.Pod{}, "metadata")
	PodSpec     = bus.FieldNumber(&pb.Pod{}, "spec")
	PodStatus   = bus.FieldNumber(&pb.Pod{}, "status")
	PodInternal = bus.FieldNumber(&pb.Pod{}, "internal")
)

// ObjectMeta's fields.
var (
	MetaName       = bus.FieldNumber(&pb.ObjectMeta{}, "name")
	MetaNamespace  = bus.FieldNumber(&pb.ObjectMeta{}, "namespace")
	MetaUID        = bus.FieldNumber(&pb.ObjectMeta{}, "uid")
	MetaLabels     = bus.FieldNumber(&pb.ObjectMeta{}, "labels")
	MetaFinalizers = bus.FieldNumber(&pb.ObjectMeta{}, "finalizers")
	MetaOwners     = bus.FieldNumber(&pb.ObjectMeta{}, "owner_references")
	MetaCreated    = bus.FieldNumber(&pb.ObjectMeta{}, "creation_timestamp")
	MetaDeleted    = bus.FieldNumber(&pb.ObjectMeta{}, "deletion_timestamp")
)

// OwnerReference's fields.
var (
	OwnerAPIVersion = bus.FieldNumber(&pb.OwnerReference{}, "api_version")
	OwnerKind       = bus.FieldNumber(&pb.OwnerReference{}, "kind")
	OwnerName       = bus.FieldNumber(&pb.OwnerReference{}, "name")
	OwnerUID        = bus.FieldNumber(&pb.OwnerReference{}, "uid")
	OwnerController = bus.FieldNumber(&pb.OwnerReference{}, "controller")
	OwnerBlock      = bus.FieldNumber(&pb.OwnerReference{}, "block_owner_deletion")
)

// PodSpec's and PodInternal's fields.
var (
	SpecNode            = bus.FieldNumber(&pb.PodSpec{}, "node_name")
	SpecRestart         = bus.FieldNumber(&pb.PodSpec{}, "restart_policy")
	SpecScheduler       = bus.FieldNumber(&pb.PodSpec{}, "scheduler_name")
	SpecServiceAccount  = bus.FieldNumber(&pb.PodSpec{}, "service_account_name")
	SpecHostNetwork     = bus.FieldNumber(&pb.PodSpec{}, "host_network")
	InternalCorrelation = bus.FieldNumber(&pb.PodInternal{}, "correlation_id")
)

// PodStatus's fields and those of its conditions and container statuses.
var (
	StatusPhase       = bus.FieldNumber(&pb.PodStatus{}, "phase")
	StatusPodIP       = bus.FieldNumber(&pb.PodStatus{}, "pod_ip")
	StatusNominated   = bus.FieldNumber(&pb.PodStatus{}, "nominated_node_name")
	StatusConditions  = bus.FieldNumber(&pb.PodStatus{}, "conditions")
	StatusContainers  = bus.FieldNumber(&pb.PodStatus{}, "container_statuses")
	ConditionType     = bus.FieldNumber(&pb.PodCondition{}, "type")
	ConditionStatus   = bus.FieldNumber(&pb.PodCondition{}, "status")
	ConditionAt       = bus.FieldNumber(&pb.PodCondition{}, "last_transition_time")
	ContainerRestarts = bus.FieldNumber(&pb.ContainerStatus{}, "restart_count")
)

// Interned is f as a UTF-8-checked string from the global intern table: for values that pods share
// (namespaces, nodes, phases, owners), which then cost no allocation once known.
func Interned(f bus.WireField) (string, bool) {
	b, ok := f.StringBytes()
	return intern.Bytes(b), ok
}
