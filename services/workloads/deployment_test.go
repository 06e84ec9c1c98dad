package workloads

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// putDeployment creates the Deployment "web" or changes it with f, as an API write would (the template
// converted beside it, the generation bumped).
func putDeployment(t *testing.T, c *bus.Conn, f func(d *appsv1.Deployment)) {
	t.Helper()
	putWeb(t, c, bus.BucketDeployments, func(d *appsv1.Deployment) (*appsv1.Deployment, *pb.Pod) {
		if d == nil {
			d = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "d-uid"}}
		}
		f(d)
		d.Generation++
		tmpl := &d.Spec.Template
		pt := &pb.Pod{Metadata: &pb.ObjectMeta{Labels: tmpl.Labels}, Spec: &pb.PodSpec{}}
		for _, ct := range tmpl.Spec.Containers {
			pt.Spec.Containers = append(pt.Spec.Containers, &pb.Container{Name: ct.Name, Image: ct.Image})
		}
		return d, pt
	})
}

func getDeployment(t *testing.T, c *bus.Conn) *appsv1.Deployment {
	t.Helper()
	return getWeb[appsv1.Deployment](t, c, bus.BucketDeployments)
}

func webDeployment(replicas int32, image string, strategy appsv1.DeploymentStrategyType) func(d *appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		limit, deadline := int32(1), int32(600)
		d.Spec = appsv1.DeploymentSpec{
			Replicas: &replicas, RevisionHistoryLimit: &limit, ProgressDeadlineSeconds: &deadline,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Strategy: appsv1.DeploymentStrategy{Type: strategy},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}},
		}
	}
}

func rolled(t *testing.T, c *bus.Conn, image string, replicas int32) func() bool {
	return func() bool {
		d := getDeployment(t, c)
		st := d.Status
		return d.Spec.Template.Spec.Containers[0].Image == image && st.ObservedGeneration == d.Generation &&
			st.UpdatedReplicas == replicas && st.Replicas == replicas && st.AvailableReplicas == replicas
	}
}

func replicaSetNames(t *testing.T, c *bus.Conn) []string {
	t.Helper()
	kv, err := c.JS.KeyValue(context.Background(), bus.BucketReplicaSets)
	if err != nil {
		t.Fatal(err)
	}
	kl, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = kl.Stop() }()
	var out []string
	for k := range kl.Keys() {
		out = append(out, k)
	}
	return out
}

// Recreate: no pod of the new template is created while a pod of the old one is left; old ReplicaSets
// beyond revisionHistoryLimit (1) are deleted; revisions count up.
func TestDeploymentRecreateAndHistory(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	fs := runFakeStore(t, c)
	pods, err := c.JS.KeyValue(context.Background(), bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var overlaps []string
	fs.onCreate = func(p *pb.Pod) {
		// Called with the fake store's lock held: read the bucket, not the store.
		img := p.GetSpec().GetContainers()[0].GetImage()
		kl, err := pods.ListKeys(context.Background())
		if err != nil {
			return
		}
		defer func() { _ = kl.Stop() }()
		for k := range kl.Keys() {
			cur := &pb.Pod{}
			if _, err := bus.Get(context.Background(), pods, k, cur); err == nil && cur.GetSpec().GetContainers()[0].GetImage() != img {
				mu.Lock()
				overlaps = append(overlaps, p.GetMetadata().GetName()+" beside "+cur.GetMetadata().GetName())
				mu.Unlock()
			}
		}
	}
	startReplicas(t, c, url, 2)

	putDeployment(t, c, webDeployment(3, "app:1", appsv1.RecreateDeploymentStrategyType))
	bustest.Eventually(t, 30*time.Second, rolled(t, c, "app:1", 3), "not rolled to app:1: %+v", getDeployment(t, c).Status)
	for i, img := range []string{"app:2", "app:3"} {
		putDeployment(t, c, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = img })
		bustest.Eventually(t, 30*time.Second, rolled(t, c, img, 3), "not rolled to %s: %+v", img, getDeployment(t, c).Status)
		if rev := getDeployment(t, c).Annotations[workload.AnnotationRevision]; rev != []string{"2", "3"}[i] {
			t.Errorf("after %s the revision is %q", img, rev)
		}
	}
	mu.Lock()
	if len(overlaps) > 0 {
		t.Errorf("Recreate created pods beside the old template's: %v", overlaps)
	}
	mu.Unlock()
	bustest.Eventually(t, 30*time.Second, func() bool { return len(replicaSetNames(t, c)) == 2 },
		"ReplicaSets %v, want the new one and 1 of history", replicaSetNames(t, c))
	if cond := condition(getDeployment(t, c).Status.Conditions, appsv1.DeploymentProgressing); cond == nil || cond.Reason != reasonNewRSAvailable {
		t.Errorf("Progressing: %+v", cond)
	}
}

// Pods that never become Ready: Progressing turns False with ProgressDeadlineExceeded after
// progressDeadlineSeconds, and Available is False.
func TestDeploymentProgressDeadline(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	fs := runFakeStore(t, c)
	fs.notReady = true
	startReplicas(t, c, url, 1)
	putDeployment(t, c, func(d *appsv1.Deployment) {
		webDeployment(2, "app:1", appsv1.RollingUpdateDeploymentStrategyType)(d)
		one := int32(1)
		d.Spec.ProgressDeadlineSeconds = &one
	})
	bustest.Eventually(t, 30*time.Second, func() bool {
		c := condition(getDeployment(t, c).Status.Conditions, appsv1.DeploymentProgressing)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == reasonTimedOut
	}, "no ProgressDeadlineExceeded: %+v", getDeployment(t, c).Status.Conditions)
	if a := condition(getDeployment(t, c).Status.Conditions, appsv1.DeploymentAvailable); a == nil || a.Status != corev1.ConditionFalse {
		t.Errorf("Available: %+v", a)
	}
}

// A paused Deployment is not rolled by a new template but is scaled; resumed, it rolls.
func TestDeploymentPaused(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	runFakeStore(t, c)
	startReplicas(t, c, url, 1)
	putDeployment(t, c, webDeployment(2, "app:1", appsv1.RollingUpdateDeploymentStrategyType))
	bustest.Eventually(t, 30*time.Second, rolled(t, c, "app:1", 2), "not rolled: %+v", getDeployment(t, c).Status)

	putDeployment(t, c, func(d *appsv1.Deployment) {
		d.Spec.Paused = true
		d.Spec.Template.Spec.Containers[0].Image = "app:2"
		four := int32(4)
		d.Spec.Replicas = &four
	})
	bustest.Eventually(t, 30*time.Second, func() bool {
		d := getDeployment(t, c)
		p := condition(d.Status.Conditions, appsv1.DeploymentProgressing)
		return d.Status.AvailableReplicas == 4 && d.Status.ObservedGeneration == d.Generation && p != nil && p.Reason == reasonPaused
	}, "paused Deployment not scaled to 4: %+v", getDeployment(t, c).Status)
	if n := len(replicaSetNames(t, c)); n != 1 {
		t.Errorf("a paused Deployment rolled: %d ReplicaSets", n)
	}
	putDeployment(t, c, func(d *appsv1.Deployment) { d.Spec.Paused = false })
	bustest.Eventually(t, 30*time.Second, rolled(t, c, "app:2", 4), "not rolled after resume: %+v", getDeployment(t, c).Status)
}
