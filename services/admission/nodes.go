package admission

import (
	"errors"
	"strconv"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Nodes have no pipeline: the generic handlers write the nodes bucket with compare-and-set on the
// revision read, and the status service merges heartbeats into the same records the same way (see
// docs/design.md, "Nodes"). A node created through the API (as kwok does) keeps the spec and status it
// was given; it has no agent, and the status service's monitor leaves it alone until an agent
// heartbeats for it (see status.AnnotationHeartbeat). Deleting a node leaves its pods and its
// allocation record alone (kube's pod garbage collector would delete the pods later; podbus has none),
// so a node re-registered under the same name still counts them.
var nodeKind = &kind{
	version: "v1", kind: "Node", resource: "nodes", singular: "node", shortNames: []string{"no"},
	newObject: func() runtime.Object { return &corev1.Node{} },
	columns:   nodeColumns,
	cells:     func(o runtime.Object) []any { return nodeRow(o.(*corev1.Node)) },
	fields: func(o runtime.Object) fields.Set {
		n := o.(*corev1.Node)
		return fields.Set{"metadata.name": n.Name, "spec.unschedulable": strconv.FormatBool(n.Spec.Unschedulable)}
	},
	subresources: []subresourceInfo{{name: "status", kind: "Node", verbs: []string{"get", "patch", "update"}}},
	storage: &kvStorage{
		spec:     bus.BucketSpec{Name: bus.BucketNodes},
		pipeline: true,
		encode: func(o runtime.Object) ([]byte, error) {
			return proto.Marshal(convert.NodeToPB(o.(*corev1.Node)))
		},
		decode: func(data []byte) (runtime.Object, error) {
			n := &pb.Node{}
			if err := proto.Unmarshal(data, n); err != nil {
				return nil, errors.Join(bus.ErrMalformed, err)
			}
			return convert.NodeFromPB(n, 0), nil
		},
	},
	strategy: strategy{
		validate: func(o runtime.Object) field.ErrorList { return convert.ValidateNode(o.(*corev1.Node)) },
		// The main resource keeps the stored status; the status subresource keeps metadata and spec.
		prepareForUpdate: func(o, old runtime.Object, sub string) {
			n, on := o.(*corev1.Node), old.(*corev1.Node)
			if sub == "status" {
				n.ObjectMeta, n.Spec = on.ObjectMeta, on.Spec
			} else {
				n.Status = on.Status
			}
		},
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			return convert.ValidateNodeUpdate(o.(*corev1.Node), old.(*corev1.Node))
		},
	},
}
