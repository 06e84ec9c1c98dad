package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podbus/podbus/internal/convert"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/plugins/nodeaffinity"
)

func node(name string, labels map[string]string, taints ...*pb.Taint) *pb.Node {
	return &pb.Node{Metadata: &pb.ObjectMeta{Name: name, Labels: labels}, Spec: &pb.NodeSpec{Taints: taints}}
}

func TestEligibility(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default"}, Spec: appsv1.DaemonSetSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"},
			Containers: []corev1.Container{{Name: "a", Image: "a"}}}}}}
	tpl, _ := convert.PodToPB(daemonPod(ds))
	req := nodeaffinity.GetRequired(tpl)
	ssd := map[string]string{"disk": "ssd"}
	for _, tc := range []struct {
		name      string
		node      *pb.Node
		run, stay bool
	}{
		{"selected", node("a", ssd), true, true},
		{"not selected", node("b", map[string]string{"disk": "hdd"}), false, false},
		{"unreachable: stays, no new pod", node("c", ssd, &pb.Taint{Key: podutil.TaintNodeUnreachable, Effect: "NoExecute"},
			&pb.Taint{Key: podutil.TaintNodeUnreachable, Effect: "NoSchedule"}), false, true},
		{"not ready NoExecute alone tolerated", node("d", ssd, &pb.Taint{Key: podutil.TaintNodeNotReady, Effect: "NoExecute"}), true, true},
		{"cordoned tolerated", node("e", ssd, &pb.Taint{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"}), true, true},
		{"foreign NoExecute evicts", node("f", ssd, &pb.Taint{Key: "dedicated", Value: "db", Effect: "NoExecute"}), false, false},
		{"PreferNoSchedule ignored", node("g", ssd, &pb.Taint{Key: "x", Effect: "PreferNoSchedule"}), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, stay := eligibility(tpl, req, tc.node)
			if run != tc.run || stay != tc.stay {
				t.Errorf("eligibility = run %v stay %v, want %v %v", run, stay, tc.run, tc.stay)
			}
		})
	}
}

func TestDaemonPodNameAndNode(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "logs", UID: "u1"}}
	a, b := daemonPodName(ds, "n1"), daemonPodName(ds, "n2")
	if a == b || a != daemonPodName(ds, "n1") {
		t.Errorf("names %q %q: want one stable name per node", a, b)
	}
	pinned := &pb.Pod{Spec: &pb.PodSpec{Affinity: &pb.Affinity{NodeAffinity: &pb.NodeAffinity{Required: &pb.NodeSelector{
		Terms: []*pb.NodeSelectorTerm{{MatchFields: []*pb.NodeSelectorRequirement{{Key: "metadata.name", Operator: "In", Values: []string{"n1"}}}}}}}}}}
	if got := podNode(pinned); got != "n1" {
		t.Errorf("podNode(pending) = %q", got)
	}
	pinned.Spec.NodeName = "n1"
	if got := podNode(pinned); got != "n1" {
		t.Errorf("podNode(bound) = %q", got)
	}
}

func readyPod(name string, ready bool) *pb.Pod {
	st := podutil.False
	if ready {
		st = podutil.True
	}
	return &pb.Pod{Metadata: &pb.ObjectMeta{Name: name}, Status: &pb.PodStatus{Phase: "Running",
		Conditions: []*pb.PodCondition{{Type: "Ready", Status: st}}}}
}

func TestPDBStatus(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	terminating := readyPod("t", true)
	terminating.Metadata.DeletionTimestamp = timestamppb.New(now)
	pods := []*pb.Pod{readyPod("a", true), readyPod("b", true), readyPod("c", true), readyPod("d", false), terminating}
	i := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	for _, tc := range []struct {
		name      string
		spec      policyv1.PodDisruptionBudgetSpec
		disrupted map[string]metav1.Time
		want      [4]int32 // expected, healthy, desired, allowed
	}{
		{"minAvailable", policyv1.PodDisruptionBudgetSpec{MinAvailable: i(2)}, nil, [4]int32{5, 3, 2, 1}},
		{"minAvailable percent rounds up", policyv1.PodDisruptionBudgetSpec{MinAvailable: pct("50%")}, nil, [4]int32{5, 3, 3, 0}},
		{"maxUnavailable", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: i(3)}, nil, [4]int32{5, 3, 2, 1}},
		{"an eviction not yet seen is not healthy", policyv1.PodDisruptionBudgetSpec{MinAvailable: i(2)},
			map[string]metav1.Time{"a": metav1.NewTime(now)}, [4]int32{5, 2, 2, 0}},
		{"an expired eviction is", policyv1.PodDisruptionBudgetSpec{MinAvailable: i(2)},
			map[string]metav1.Time{"a": metav1.NewTime(now.Add(-3 * time.Minute))}, [4]int32{5, 3, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: tc.spec,
				Status: policyv1.PodDisruptionBudgetStatus{DisruptedPods: tc.disrupted}}
			st := pdbStatus(pdb, pods, now)
			got := [4]int32{st.ExpectedPods, st.CurrentHealthy, st.DesiredHealthy, st.DisruptionsAllowed}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("expected, healthy, desired, allowed (-want +got):\n%s", d)
			}
			if st.ObservedGeneration != 2 || len(st.Conditions) != 1 {
				t.Errorf("status %+v", st)
			}
		})
	}
}
