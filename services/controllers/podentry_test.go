package controllers

import (
	"cmp"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// cached is p as the cache keeps it, and p as the store holds it, decoded again.
func cached(t *testing.T, c *cache, p *pb.Pod) (pe *podEntry, full *pb.Pod) {
	t.Helper()
	data, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	pe, _, ok := c.newPodEntry(data, 7)
	if !ok {
		t.Fatalf("pod %s not cached", p.GetMetadata().GetName())
	}
	full = &pb.Pod{}
	if err := proto.Unmarshal(data, full); err != nil {
		t.Fatal(err)
	}
	return pe, full
}

type podOpt func(p *pb.Pod)

func daemonSetPod(i int, opts ...podOpt) *pb.Pod {
	p := runningPod(i)
	yes := true
	p.Metadata.OwnerReferences = []*pb.OwnerReference{{ApiVersion: "apps/v1", Kind: "DaemonSet", Name: "logs", Uid: "ds-uid",
		Controller: &yes, BlockOwnerDeletion: &yes}}
	p.Metadata.Namespace = "default"
	p.Metadata.Labels = map[string]string{"app": "logs", labelRevisionHash: "current"}
	p.Metadata.Finalizers = []string{"example.com/hold"}
	p.Metadata.Annotations = map[string]string{"note": "not read"}
	p.Spec.Affinity = &pb.Affinity{NodeAffinity: &pb.NodeAffinity{Required: &pb.NodeSelector{Terms: []*pb.NodeSelectorTerm{{
		MatchFields: []*pb.NodeSelectorRequirement{{Key: "metadata.name", Operator: "In", Values: []string{p.Spec.NodeName}}}}}}}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func onNode(n string) podOpt {
	return func(p *pb.Pod) {
		p.Spec.NodeName = n
		p.Spec.Affinity.NodeAffinity.Required.Terms[0].MatchFields[0].Values = []string{n}
	}
}
func unbound(p *pb.Pod) { p.Spec.NodeName = ""; p.Status.Phase = "Pending"; p.Status.Conditions = nil }
func failed(p *pb.Pod)  { p.Status.Phase = "Failed" }
func notReady(p *pb.Pod) {
	p.Status.Conditions[2].Status = "False"
}
func deletingPod(p *pb.Pod) { p.Metadata.DeletionTimestamp = timestamppb.Now() }
func oldHash(p *pb.Pod)     { p.Metadata.Labels[labelRevisionHash] = "old" }
func createdAt(d time.Duration) podOpt {
	return func(p *pb.Pod) {
		p.Metadata.CreationTimestamp = timestamppb.New(p.Metadata.CreationTimestamp.AsTime().Add(d))
	}
}
func readyAt(at time.Time) podOpt {
	return func(p *pb.Pod) { p.Status.Conditions[2].LastTransitionTime = timestamppb.New(at) }
}

// TestPodEntryKeepsReadFields: a cached pod decodes to the fields the controllers read, exactly as the
// stored pod has them (owners' optional booleans included), and nothing else; of the conditions, Ready.
func TestPodEntryKeepsReadFields(t *testing.T) {
	c := newCache()
	no := false
	p := daemonSetPod(3, deletingPod)
	p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, &pb.OwnerReference{ApiVersion: "v1", Kind: "ConfigMap",
		Name: "cm", Uid: "cm-uid", Controller: &no})
	pe, full := cached(t, &c, p)
	read := bus.NewMask(&pb.Pod{}, "metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels",
		"metadata.owner_references", "metadata.creation_timestamp", "metadata.deletion_timestamp", "spec.node_name",
		"spec.affinity.node_affinity.required.terms.match_fields", "status.phase", "status.conditions.type",
		"status.conditions.status", "status.conditions.last_transition_time", "internal.correlation_id")
	data, _ := proto.Marshal(full)
	pruned, _ := bus.Prune(data, read)
	want := &pb.Pod{}
	if err := proto.Unmarshal(pruned, want); err != nil {
		t.Fatal(err)
	}
	want.Status.Conditions = slices.DeleteFunc(want.Status.Conditions, func(c *pb.PodCondition) bool { return c.GetType() != "Ready" })
	if len(want.Status.Conditions) != 1 {
		t.Fatalf("the pod has %d Ready conditions, want 1", len(want.Status.Conditions))
	}
	if d := gocmp.Diff(want, pe.pod(), protocmp.Transform()); d != "" {
		t.Errorf("cached pod (-read fields +cached):\n%s", d)
	}
	if !pe.controlledBy("ds-uid") || pe.controlledBy("cm-uid") {
		t.Errorf("controlledBy: want the DaemonSet only")
	}
}

// TestPodEntryDecisions: the DaemonSets, budgets and the collector decide on cached pods as on the
// stored pods.
func TestPodEntryDecisions(t *testing.T) {
	now := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	long := now.Add(-time.Hour)
	c := newCache()
	var entries []*podEntry
	var fulls []*pb.Pod
	for i, p := range []*pb.Pod{
		daemonSetPod(1, onNode("n1"), readyAt(long)),
		daemonSetPod(2, onNode("n1"), createdAt(-time.Minute)), // duplicate, older: kept
		daemonSetPod(3, onNode("n2")),                          // node not eligible
		daemonSetPod(4, onNode("n3"), failed),
		daemonSetPod(5, onNode("n4"), unbound), // pinned by matchFields
		daemonSetPod(6, onNode("gone")),
		daemonSetPod(7, onNode("n5"), oldHash, readyAt(long)),
		daemonSetPod(8, onNode("n6"), oldHash, notReady),
		daemonSetPod(9, onNode("n7"), deletingPod),
		daemonSetPod(10, onNode("n8"), readyAt(now.Add(-time.Second))), // not yet available
	} {
		p.Metadata.Name = p.Metadata.Name + "-" + string(rune('a'+i))
		pe, full := cached(t, &c, p)
		entries = append(entries, pe)
		fulls = append(fulls, full)
	}
	cachedPods := func() (ps []*pb.Pod) {
		for _, pe := range entries {
			ps = append(ps, pe.pod())
		}
		return ps
	}

	t.Run("daemonset", func(t *testing.T) {
		nodes := map[string]*pb.Node{}
		for _, n := range []string{"n1", "n3", "n4", "n5", "n6", "n7", "n8", "n9"} {
			nodes[n] = node(n, nil)
		}
		nodes["n2"] = node("n2", nil, &pb.Taint{Key: "dedicated", Effect: "NoExecute"})
		maxU := intstr.FromInt32(2)
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "logs", Namespace: "default", UID: "ds-uid"},
			Spec: appsv1.DaemonSetSpec{MinReadySeconds: 10, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "a", Image: "a"}}}},
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxU}}}}
		for _, pe := range entries {
			if !pe.controlledBy(string(ds.UID)) || pe.ns != ds.Namespace {
				t.Fatalf("pod %s not selected", pe.name)
			}
		}
		type deletion struct{ UID, Name, NS, Correlation, Why string }
		summary := func(plan daemonPlan) (ds []deletion, create []string, st appsv1.DaemonSetStatus) {
			for _, d := range plan.deletes {
				md := d.pod.GetMetadata()
				why := d.why
				if d.grace != nil {
					why += " grace 0"
				}
				ds = append(ds, deletion{md.GetUid(), md.GetName(), md.GetNamespace(), d.pod.GetInternal().GetCorrelationId(), why})
			}
			slices.SortFunc(ds, func(a, b deletion) int { return cmp.Compare(a.UID, b.UID) })
			slices.Sort(plan.create)
			return ds, plan.create, plan.status
		}
		tpl := daemonPod(ds)
		wantDel, wantCreate, wantSt := summary(planDaemonSet(ds, tpl, "current", nodes, fulls, now))
		gotDel, gotCreate, gotSt := summary(planDaemonSet(ds, tpl, "current", nodes, cachedPods(), now))
		if len(wantDel) < 5 || len(wantCreate) != 1 || wantSt.NumberAvailable == 0 || wantSt.NumberReady == 0 {
			t.Fatalf("the case decides too little: deletes %v create %v status %+v", wantDel, wantCreate, wantSt)
		}
		if d := gocmp.Diff(wantDel, gotDel); d != "" {
			t.Errorf("deletions (-stored pods +cached):\n%s", d)
		}
		if d := gocmp.Diff(wantCreate, gotCreate); d != "" {
			t.Errorf("creations (-stored pods +cached):\n%s", d)
		}
		if d := gocmp.Diff(wantSt, gotSt); d != "" {
			t.Errorf("status (-stored pods +cached):\n%s", d)
		}
	})

	t.Run("budget", func(t *testing.T) {
		for _, expr := range []string{"app=logs", "app in (logs),controller-revision-hash!=old", "!missing", "controller-revision-hash=old"} {
			sel, err := labels.Parse(expr)
			if err != nil {
				t.Fatal(err)
			}
			var want, got []*pb.Pod
			for i, pe := range entries {
				if sel.Matches(labels.Set(fulls[i].GetMetadata().GetLabels())) {
					want = append(want, fulls[i])
				}
				if sel.Matches(pe.labels) {
					got = append(got, pe.pod())
				}
			}
			if len(want) != len(got) {
				t.Fatalf("%s: %d cached pods selected, want %d", expr, len(got), len(want))
			}
			minA := intstr.FromString("50%")
			pdb := &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minA},
				Status: policyv1.PodDisruptionBudgetStatus{DisruptedPods: map[string]metav1.Time{
					fulls[0].GetMetadata().GetName(): metav1.NewTime(now), fulls[8].GetMetadata().GetName(): metav1.NewTime(now)}}}
			if d := gocmp.Diff(pdbStatus(pdb, want, now), pdbStatus(pdb, got, now)); d != "" {
				t.Errorf("%s: status (-stored pods +cached):\n%s", expr, d)
			}
		}
	})
}

func TestLabelSet(t *testing.T) {
	c := newCache()
	ls := c.labelSet(map[string]string{"b": "2", "a": "1", "c": ""})
	for _, tc := range []struct {
		key, value string
		ok         bool
	}{{"a", "1", true}, {"b", "2", true}, {"c", "", true}, {"", "", false}, {"aa", "", false}, {"d", "", false}} {
		if v, ok := ls.Lookup(tc.key); v != tc.value || ok != tc.ok || ls.Has(tc.key) != tc.ok || ls.Get(tc.key) != tc.value {
			t.Errorf("Lookup(%q) = %q %v, want %q %v", tc.key, v, ok, tc.value, tc.ok)
		}
	}
	if _, ok := labelSet(nil).Lookup("a"); ok {
		t.Errorf("empty set has a label")
	}
	same := c.labelSet(map[string]string{"c": "", "a": "1", "b": "2"})
	if !slices.Equal(same, ls) || &same[0] != &ls[0] {
		t.Errorf("equal label sets not shared: %v, %v", same, ls)
	}
	other := c.labelSet(map[string]string{"b": "2", "a": "1", "c": "x"})
	if v := other.Get("c"); v != "x" || ls.Get("c") != "" {
		t.Errorf("different label sets: c = %q in the second, %q in the first", v, ls.Get("c"))
	}
}

// readyOnly cuts the conditions other than Ready out of the wire form: the result decodes as the
// pruned pod decoded with those conditions removed, whatever the conditions and however the status is
// laid out on the wire (several occurrences, merged; a condition whose type appears twice).
func TestReadyOnlyAsDecoded(t *testing.T) {
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cond := func(typ, status string) *pb.PodCondition { return &pb.PodCondition{Type: typ, Status: status} }
	withConds := func(cs ...*pb.PodCondition) []byte {
		p := runningPod(1)
		p.Status.Conditions = cs
		return marshal(p)
	}
	// A condition of type PodScheduled and then Ready, as one message: it decodes as Ready.
	twice := append(marshal(cond("PodScheduled", "False")), marshal(cond("Ready", "True"))...)
	var status []byte
	status = protowire.AppendTag(status, statusCondsNum, protowire.BytesType)
	status = protowire.AppendBytes(status, twice)
	var retyped []byte
	retyped = protowire.AppendTag(retyped, podStatusNum, protowire.BytesType)
	retyped = protowire.AppendBytes(retyped, status)
	for _, tt := range []struct {
		name string
		data []byte
		cut  bool // conditions are cut out (else the pruned bytes come back as they are)
	}{
		{"no status", marshal(&pb.Pod{Metadata: &pb.ObjectMeta{Name: "a"}}), false},
		{"no conditions", withConds(), false},
		{"Ready alone", withConds(cond("Ready", "True")), false},
		{"Ready among others", withConds(cond("PodScheduled", "True"), cond("Ready", "False"), cond("Initialized", "True")), true},
		{"no Ready", withConds(cond("PodScheduled", "True")), true},
		{"two statuses", append(withConds(cond("Initialized", "True"), cond("Ready", "True")),
			marshal(&pb.Pod{Status: &pb.PodStatus{Phase: "Failed", Conditions: []*pb.PodCondition{cond("Ready", "False"), cond("ContainersReady", "False")}}})...), true},
		{"type twice, Ready last", append(withConds(cond("Initialized", "True")), retyped...), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pruned, ok := bus.Prune(tt.data, podDataMask)
			if !ok {
				t.Fatal("prune failed")
			}
			want := &pb.Pod{}
			if err := proto.Unmarshal(pruned, want); err != nil {
				t.Fatal(err)
			}
			if want.Status != nil {
				want.Status.Conditions = slices.DeleteFunc(want.Status.Conditions, func(c *pb.PodCondition) bool { return c.GetType() != "Ready" })
			}
			got, ok := readyOnly(tt.data)
			if !ok {
				t.Fatal("readyOnly refused a well-formed pod")
			}
			dec := &pb.Pod{}
			if err := proto.Unmarshal(got, dec); err != nil {
				t.Fatal(err)
			}
			if d := gocmp.Diff(want, dec, protocmp.Transform()); d != "" {
				t.Errorf("(-decoded and filtered +readyOnly):\n%s", d)
			}
			if cut := len(got) != len(pruned); cut != tt.cut {
				t.Errorf("conditions cut: %v, want %v", cut, tt.cut)
			}
		})
	}
	if _, ok := readyOnly([]byte{0x0a, 0x05, 0x01}); ok {
		t.Error("readyOnly took a truncated message")
	}
}

// BenchmarkReadyOnly: what the controllers' cache keeps of a running pod's bytes, on each of its changes.
func BenchmarkReadyOnly(b *testing.B) {
	data, err := proto.Marshal(runningPod(1))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := readyOnly(data); !ok {
			b.Fatal("refused")
		}
	}
}
