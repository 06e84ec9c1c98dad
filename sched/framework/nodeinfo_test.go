package framework_test

import (
	"testing"

	st "github.com/podbus/podbus/sched/schedtest"
)

// A node's pods are grouped by label set and its required anti-affinity terms by term, each group
// carrying its key inline: the inter-pod plugins memoise matches by those keys without following the
// group's example pod.
func TestNodeInfoGroupsPodsAndTerms(t *testing.T) {
	web := func(uid string) *st.PodWrapper {
		return st.Pod(uid, uid).Labels("app", "web").PodAntiAffinity(st.AffinityTerm("kubernetes.io/hostname", st.Selector([]string{"app", "web"})))
	}
	n := st.Node("n1").Info().WithPods(web("a").Placed(), web("b").Placed(), st.Pod("c", "c").Labels("app", "db").Placed(), web("d").Placed())
	if len(n.LabelSets) != 2 || n.LabelSets[0].Count != 3 || n.LabelSets[1].Count != 1 {
		t.Fatalf("label sets %+v; want web ×3 and db ×1", n.LabelSets)
	}
	for _, g := range n.LabelSets {
		if g.Key != g.Example.LabelsKey {
			t.Errorf("label set of %s: key %v, example's %v", g.Example.UID, g.Key, g.Example.LabelsKey)
		}
	}
	if len(n.RequiredAntiAffinityTerms) != 1 || n.RequiredAntiAffinityTerms[0].Count != 3 {
		t.Fatalf("anti-affinity terms %+v; want one term held by 3 pods", n.RequiredAntiAffinityTerms)
	}
	if g := n.RequiredAntiAffinityTerms[0]; g.Key != g.Term.Key {
		t.Errorf("term group key %v, term's %v", g.Key, g.Term.Key)
	}
}
