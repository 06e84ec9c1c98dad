package convert

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const classesYAML = `
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high
value: 1000
description: batch that matters
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: standard
value: 100
globalDefault: true
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: polite
value: 5000
preemptionPolicy: Never
`

func TestAdmitPriority(t *testing.T) {
	user, err := ParsePriorityClasses([]byte(classesYAML))
	if err != nil {
		t.Fatal(err)
	}
	prio := func(v int32) *int32 { return &v }
	never, lower := corev1.PreemptNever, corev1.PreemptLowerPriority
	tests := []struct {
		name      string
		classes   *PriorityClasses
		ns        string // "": kube-system
		class     string
		priority  *int32
		policy    *corev1.PreemptionPolicy
		wantClass string
		want      int32
		wantPol   corev1.PreemptionPolicy
		wantErr   string
	}{
		{name: "no class, no default: 0", want: 0, wantPol: lower},
		{name: "built-in cluster critical", class: "system-cluster-critical", want: 2000000000, wantClass: "system-cluster-critical", wantPol: lower},
		{name: "built-in node critical", class: "system-node-critical", want: 2000001000, wantClass: "system-node-critical", wantPol: lower},
		{name: "node critical outside kube-system", ns: "default", class: "system-node-critical",
			wantErr: "pods with system-node-critical priorityClass is not permitted in default namespace"},
		{name: "cluster critical outside kube-system", ns: "team-a", class: "system-cluster-critical",
			wantErr: "pods with system-cluster-critical priorityClass is not permitted in team-a namespace"},
		{name: "user class outside kube-system", ns: "default", classes: user, class: "high", want: 1000, wantClass: "high", wantPol: lower},
		{name: "unknown class", class: "gold", wantErr: "no PriorityClass with name gold was found"},
		{name: "user class", classes: user, class: "high", want: 1000, wantClass: "high", wantPol: lower},
		{name: "global default applies when none is named", classes: user, want: 100, wantClass: "standard", wantPol: lower},
		{name: "class with preemptionPolicy Never", classes: user, class: "polite", want: 5000, wantClass: "polite", wantPol: never},
		{name: "matching priority is accepted", classes: user, class: "high", priority: prio(1000), want: 1000, wantClass: "high", wantPol: lower},
		{name: "priority without a class, not matching", priority: prio(7),
			wantErr: "the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name"},
		{name: "preemptionPolicy disagreeing with the class", classes: user, class: "high", policy: &never,
			wantErr: "the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority admission controller computed PreemptLowerPriority from the given PriorityClass name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := tt.ns
			if ns == "" {
				ns = metav1.NamespaceSystem
			}
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: corev1.PodSpec{PriorityClassName: tt.class, Priority: tt.priority, PreemptionPolicy: tt.policy}}
			err := tt.classes.AdmitPod(p)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrPriorityClass) || err.Error() != "priority admission: "+tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *p.Spec.Priority != tt.want || p.Spec.PriorityClassName != tt.wantClass || *p.Spec.PreemptionPolicy != tt.wantPol {
				t.Errorf("got %d %q %s, want %d %q %s", *p.Spec.Priority, p.Spec.PriorityClassName, *p.Spec.PreemptionPolicy, tt.want, tt.wantClass, tt.wantPol)
			}
		})
	}
}

func TestParsePriorityClassesRejects(t *testing.T) {
	tests := map[string]string{
		"reserved prefix": "kind: PriorityClass\nmetadata: {name: system-mine}\nvalue: 1\n",
		"value too high":  "kind: PriorityClass\nmetadata: {name: big}\nvalue: 1000000001\n",
		"two defaults":    "kind: PriorityClass\nmetadata: {name: a}\nvalue: 1\nglobalDefault: true\n---\nkind: PriorityClass\nmetadata: {name: b}\nvalue: 2\nglobalDefault: true\n",
		"duplicate":       "kind: PriorityClass\nmetadata: {name: a}\nvalue: 1\n---\nkind: PriorityClass\nmetadata: {name: a}\nvalue: 2\n",
		"bad policy":      "kind: PriorityClass\nmetadata: {name: a}\nvalue: 1\npreemptionPolicy: Sometimes\n",
		"wrong kind":      "kind: Pod\nmetadata: {name: a}\n",
		"unknown field":   "kind: PriorityClass\nmetadata: {name: a}\nvalue: 1\npriority: 3\n",
		"not a DNS name":  "kind: PriorityClass\nmetadata: {name: Big_One}\nvalue: 1\n",
	}
	for name, doc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePriorityClasses([]byte(doc)); !errors.Is(err, ErrPriorityClassConfig) {
				t.Errorf("err = %v, want ErrPriorityClassConfig", err)
			}
		})
	}
	l, err := ParsePriorityClasses([]byte("apiVersion: v1\nkind: List\nitems:\n- kind: PriorityClass\n  metadata: {name: a}\n  value: 3\n"))
	if err != nil || l.Get("a").Value != 3 || len(l.List()) != 3 {
		t.Errorf("List: %v %v", err, l.List())
	}
}
