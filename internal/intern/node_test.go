package intern

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// simNode is node i as a simulated kubelet posts it.
func simNode(i int) *pb.Node {
	name := fmt.Sprintf("node-%05d", i)
	ts := timestamppb.New(timestamppb.Now().AsTime())
	cond := func(typ, status, reason, msg string) *pb.NodeCondition {
		return &pb.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: ts, LastTransitionTime: ts}
	}
	res := map[string]string{"cpu": "32", "memory": "128Gi", "pods": "250", "ephemeral-storage": "100Gi"}
	return &pb.Node{
		Metadata: &pb.ObjectMeta{Name: name, Uid: fmt.Sprintf("uid-%05d", i), Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "pool": "default"}},
		Spec: &pb.NodeSpec{Taints: []*pb.Taint{{Key: "dedicated", Value: "infra", Effect: "NoSchedule"}}},
		Status: &pb.NodeStatus{
			Capacity: res, Allocatable: res, Phase: "Running",
			Conditions: []*pb.NodeCondition{
				cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []*pb.NodeAddress{{Type: "InternalIP", Address: "10.0.0.1"}, {Type: "Hostname", Address: name}},
			NodeInfo: &pb.NodeSystemInfo{MachineId: "m-" + name, KernelVersion: "6.1.0", OsImage: "podbus",
				ContainerRuntimeVersion: "fake://1.0", KubeletVersion: "v1.33.0", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

func decodeNode(t testing.TB, data []byte) *pb.Node {
	t.Helper()
	n := &pb.Node{}
	if err := proto.Unmarshal(data, n); err != nil {
		t.Fatal(err)
	}
	return n
}

func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestNode(t *testing.T) {
	want := simNode(1)
	data, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	a, b := decodeNode(t, data), decodeNode(t, data)
	Node(a)
	Node(b)
	if !proto.Equal(a, want) || !proto.Equal(b, want) {
		t.Fatalf("Node changed the node:\n got %v\nwant %v", a, want)
	}
	shared := []struct {
		name string
		get  func(*pb.Node) string
	}{
		{"label value", func(n *pb.Node) string { return n.Metadata.Labels["kubernetes.io/os"] }},
		{"capacity", func(n *pb.Node) string { return n.Status.Capacity["memory"] }},
		{"allocatable", func(n *pb.Node) string { return n.Status.Allocatable["cpu"] }},
		{"taint", func(n *pb.Node) string { return n.Spec.Taints[0].Value }},
		{"condition reason", func(n *pb.Node) string { return n.Status.Conditions[3].Reason }},
		{"condition message", func(n *pb.Node) string { return n.Status.Conditions[0].Message }},
		{"address type", func(n *pb.Node) string { return n.Status.Addresses[1].Type }},
		{"kubelet version", func(n *pb.Node) string { return n.Status.NodeInfo.KubeletVersion }},
	}
	for _, tc := range shared {
		if !sameString(tc.get(a), tc.get(b)) {
			t.Errorf("%s: two decodes do not share %q", tc.name, tc.get(a))
		}
	}
	// What is the node's own is not put in the table.
	own := []struct {
		name string
		get  func(*pb.Node) string
	}{
		{"name", func(n *pb.Node) string { return n.Metadata.Name }},
		{"hostname label", func(n *pb.Node) string { return n.Metadata.Labels["kubernetes.io/hostname"] }},
		{"address", func(n *pb.Node) string { return n.Status.Addresses[1].Address }},
		{"machine id", func(n *pb.Node) string { return n.Status.NodeInfo.MachineId }},
	}
	for _, tc := range own {
		if sameString(tc.get(a), tc.get(b)) {
			t.Errorf("%s: %q was shared", tc.name, tc.get(a))
		}
	}
	// The maps stay each node's own.
	a.Metadata.Labels["pool"] = "gpu"
	a.Status.Capacity["pods"] = "110"
	if b.Metadata.Labels["pool"] != "default" || b.Status.Capacity["pods"] != "250" {
		t.Errorf("a change to one node's maps reached the other: %v %v", b.Metadata.Labels, b.Status.Capacity)
	}
	Node(nil)
	Node(&pb.Node{})
}

// BenchmarkNodeObjects reports what a cache keeps per node (objects/node and B/node, live heap after a
// GC) of simulated nodes decoded as the services' node caches decode them, with and without Node.
func BenchmarkNodeObjects(b *testing.B) {
	const n = 5000
	data := make([][]byte, n)
	for i := range data {
		var err error
		if data[i], err = proto.Marshal(simNode(i)); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		intern bool
	}{{"decoded", false}, {"interned", true}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				before, beforeObjs := liveHeap()
				nodes := make([]*pb.Node, n)
				for i, d := range data {
					nodes[i] = decodeNode(b, d)
					if tc.intern {
						Node(nodes[i])
					}
				}
				after, afterObjs := liveHeap()
				b.ReportMetric(float64(after-before)/n, "B/node")
				b.ReportMetric(float64(afterObjs-beforeObjs)/n, "objects/node")
				runtime.KeepAlive(nodes)
			}
		})
	}
}

func liveHeap() (bytes, objects uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapObjects
}
