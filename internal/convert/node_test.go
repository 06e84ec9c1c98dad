package convert

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

func richNode() *corev1.Node {
	added := ts(1)
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "n-uid", ResourceVersion: "3",
			Labels: map[string]string{"kubernetes.io/hostname": "node-1", "zone": "z1"}, CreationTimestamp: ts(0)},
		Spec: corev1.NodeSpec{
			PodCIDR: "10.1.0.0/24", PodCIDRs: []string{"10.1.0.0/24", "fd00::/64"}, ProviderID: "kind://node-1", Unschedulable: true,
			Taints: []corev1.Taint{
				{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
				{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added},
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    rl("cpu", "4", "memory", "8Gi", "pods", "110", "example.com/gpu", "2"),
			Allocatable: rl("cpu", "3800m", "memory", "7Gi", "pods", "110"),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: ts(2),
				LastTransitionTime: ts(3), Reason: "KubeletReady", Message: "ready"}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "node-1"}},
			NodeInfo: corev1.NodeSystemInfo{MachineID: "m", SystemUUID: "s", BootID: "b", KernelVersion: "6.1", OSImage: "Debian",
				//lint:ignore SA1019 deprecated, but still part of the v1 API
				ContainerRuntimeVersion: "containerd://2.0", KubeletVersion: "podbus-agent/v0.1", KubeProxyVersion: "v0",
				OperatingSystem: "linux", Architecture: "amd64"},
			Images: []corev1.ContainerImage{{Names: []string{"nginx:1.27"}, SizeBytes: 1 << 20}},
		},
	}
}

func TestNodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		node *corev1.Node
	}{
		{"rich", richNode()},
		{"bare", &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NodeFromPB(NodeToPB(tt.node), 3)
			if diff := cmp.Diff(tt.node, got, cmpOpts...); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeToPBQuantities(t *testing.T) {
	n := NodeToPB(richNode())
	if got := n.GetStatus().GetAllocatable()["cpu"]; got != "3800m" {
		t.Errorf("allocatable cpu = %q", got)
	}
	if got := n.GetStatus().GetCapacity()["memory"]; got != "8Gi" {
		t.Errorf("capacity memory = %q", got)
	}
	if NodeToPB(nil) != nil || NodeFromPB(nil, 1) != nil {
		t.Errorf("nil not passed through")
	}
	if got := NodeFromPB(&pb.Node{}, 0); got.Name != "" || got.ResourceVersion != "" {
		t.Errorf("empty node = %+v", got)
	}
}
