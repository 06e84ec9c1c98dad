package workloads

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/workload"
)

// rsSizes maps each stored ReplicaSet's image to its replicas.
func rsSizes(t *testing.T, c *bus.Conn) map[string]int32 {
	t.Helper()
	kv, err := c.JS.KeyValue(context.Background(), bus.BucketReplicaSets)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, k := range replicaSetNames(t, c) {
		e, err := kv.Get(context.Background(), k)
		if err != nil {
			continue
		}
		rs := &appsv1.ReplicaSet{}
		if _, err := workload.Decode(e.Value(), rs); err != nil {
			t.Fatal(err)
		}
		out[rs.Spec.Template.Spec.Containers[0].Image] = ptrOr(rs.Spec.Replicas, 1)
	}
	return out
}

// A Deployment scaled while its rollout is stuck (the new pods never become Ready) gives each of its
// ReplicaSets a share by size, as kube's deployment controller does: old 8 and new 5 (10 + maxSurge 3)
// become 15 and 10 (20 + maxSurge 5), and back to 8 and 5 at 10; the rollout goes on from there.
func TestDeploymentScaledMidRollout(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	fs := runFakeStore(t, c)
	startReplicas(t, c, url, 2)
	putDeployment(t, c, webDeployment(10, "app:1", appsv1.RollingUpdateDeploymentStrategyType))
	bustest.Eventually(t, 30*time.Second, rolled(t, c, "app:1", 10), "not rolled: %+v", getDeployment(t, c).Status)

	fs.mu.Lock()
	fs.notReady = true
	fs.mu.Unlock()
	putDeployment(t, c, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "app:2" })
	for _, step := range []struct {
		replicas   int32
		old, fresh int32
	}{
		{10, 8, 5}, // the rollout stuck: 2 unavailable allowed, 3 surge
		{20, 15, 10},
		{10, 8, 5},
	} {
		putDeployment(t, c, func(d *appsv1.Deployment) { d.Spec.Replicas = &step.replicas })
		want := fmt.Sprint(map[string]int32{"app:1": step.old, "app:2": step.fresh})
		bustest.Eventually(t, 30*time.Second, func() bool { return fmt.Sprint(rsSizes(t, c)) == want },
			"at %d replicas: ReplicaSets %v, want %s", step.replicas, rsSizes(t, c), want)
	}

	fs.mu.Lock()
	fs.notReady = false
	fs.mu.Unlock()
	// The new pods made before stay not Ready in the fake store; deleting them lets the rollout finish.
	pods, err := c.JS.KeyValue(context.Background(), bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	kl, err := pods.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for k := range kl.Keys() {
		_ = pods.Delete(context.Background(), k)
	}
	bustest.Eventually(t, 60*time.Second, rolled(t, c, "app:2", 10), "not rolled after the pods became Ready: %+v", getDeployment(t, c).Status)
}
