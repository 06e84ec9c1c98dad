package admission

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Leases are the nodes' heartbeat leases in kube-node-lease, renewed by the status service on every
// heartbeat (bus.BucketLeases). Served read-only: only the status service writes them. Their watch
// cache starts on first use: until someone lists them, no API replica decodes the renewals. No owner
// reference to their node: the garbage collector does not watch them (kind.hot), so a deleted node's
// lease stays, renewed again if the node registers again.
var leaseKind = &kind{
	group: coordinationv1.GroupName, version: "v1", kind: "Lease", resource: "leases", singular: "lease",
	namespaced: true, verbs: []string{"get", "list", "watch"}, hot: true,
	newObject: func() runtime.Object { return &coordinationv1.Lease{} },
	columns: []metav1.TableColumnDefinition{
		col("Name", "string", "Name must be unique within a namespace.", 0),
		col("Holder", "string", "holderIdentity contains the identity of the holder of a current lease.", 0),
		col("Renewed", "string", "renewTime is the time that the current holder of a lease has last updated the lease.", 0),
	},
	cells: func(o runtime.Object) []any {
		l := o.(*coordinationv1.Lease)
		var holder string
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		var renewed metav1.Time
		if l.Spec.RenewTime != nil {
			renewed = metav1.NewTime(l.Spec.RenewTime.Time)
		}
		return []any{l.Name, holder, since(renewed)}
	},
	storage: &kvStorage{
		spec:     bus.BucketSpec{Name: bus.BucketLeases},
		pipeline: true,
		encode: func(runtime.Object) ([]byte, error) {
			return nil, fmt.Errorf("%w: leases are read-only", bus.ErrPermanent)
		},
		decode: func(data []byte) (runtime.Object, error) {
			l := &pb.NodeLease{}
			if err := proto.Unmarshal(data, l); err != nil {
				return nil, errors.Join(bus.ErrMalformed, err)
			}
			return leaseFromPB(l), nil
		},
	},
}

func leaseFromPB(l *pb.NodeLease) *coordinationv1.Lease {
	out := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.GetNode(), Namespace: bus.NamespaceNodeLease},
	}
	if h := l.GetHolderIdentity(); h != "" {
		out.Spec.HolderIdentity = &h
	}
	if d := l.GetLeaseDurationSeconds(); d != 0 {
		out.Spec.LeaseDurationSeconds = &d
	}
	if t := l.GetRenewTime(); t != nil {
		out.Spec.RenewTime = &metav1.MicroTime{Time: t.AsTime()}
	}
	return out
}
