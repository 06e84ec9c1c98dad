package workloads

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rsState is a ReplicaSet as a Deployment replica reads it: replicas, the pods its status counted and
// the creations claimed with that status.
func rsState(name string, spec, status int32, creates ...string) *rsEntry {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{Replicas: &spec},
		Status: appsv1.ReplicaSetStatus{Replicas: status}}
	if len(creates) > 0 {
		cl := readClaims(rs)
		for _, n := range creates {
			cl.Create[n] = 1
		}
		cl.PodsRev = 7
		setAnnotation(&rs.ObjectMeta, AnnotationExpected, cl.annotation())
	}
	return &rsEntry{obj: rs}
}

// The interleaving of TestDeploymentControllerReplicas (e2e) with two replicas of the controller,
// replicas 20, maxSurge 3: replica A's ReplicaSet sync claims two replacement pods for the old
// ReplicaSet at replicas 11; replica B's Deployment sync then lowers that ReplicaSet to 9, and a
// Deployment sync must not give the new ReplicaSet room for pods A's creations are about to take.
func TestRollingRoomCountsClaimedCreations(t *testing.T) {
	const want, surge = 20, 3
	for _, tc := range []struct {
		name     string
		newRS    *rsEntry
		old      []*rsEntry
		wantRoom int32 // the pods the new ReplicaSet may be scaled up by
	}{
		{"settled", rsState("new", 12, 12), []*rsEntry{rsState("old", 9, 9)}, 2},
		{"deletions on their way", rsState("new", 12, 12), []*rsEntry{rsState("old", 9, 11)}, 0},
		{"replacements claimed, then scaled down", rsState("new", 12, 12), []*rsEntry{rsState("old", 9, 9, "old-a", "old-b")}, 0},
		{"replacements claimed within replicas", rsState("new", 12, 12), []*rsEntry{rsState("old", 11, 9, "old-a", "old-b")}, 0},
		{"new ReplicaSet's own claims", rsState("new", 12, 10, "new-a", "new-b"), []*rsEntry{rsState("old", 9, 9)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &dsync{newRS: tc.newRS, old: tc.old}
			if room := max(0, want+surge-x.total()); room != tc.wantRoom {
				t.Errorf("room to scale up %d, want %d (total %d)", room, tc.wantRoom, x.total())
			}
		})
	}
}
