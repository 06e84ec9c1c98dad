package cri_test

import (
	"context"
	"testing"
	"time"
)

// BenchmarkPodStart measures create→Running of one pod (image present): sandbox (netns + CNI ADD),
// container create, task start; teardown is not timed.
func BenchmarkPodStart(b *testing.B) {
	requireContainerd(b)
	_, busybox := startRegistry(b)
	r := newRuntime(b, testNode(), testCIDR(), testNamespace(), "")
	ctx := context.Background()
	if _, err := r.PullImage(ctx, busybox, "IfNotPresent"); err != nil {
		b.Fatal(err)
	}
	var sandbox, create, start time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := newPod("bench", ctr("sleeper", busybox, "sleep", "3600"))
		t0 := time.Now()
		sb, err := r.RunSandbox(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		id, err := r.CreateContainer(ctx, sb, p.Spec.Containers[0], 0)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := r.StartContainer(ctx, id); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		sandbox, create, start = sandbox+t1.Sub(t0), create+t2.Sub(t1), start+t3.Sub(t2)
		b.StopTimer()
		if err := r.RemoveSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(sandbox.Milliseconds())/n, "sandbox-ms/op")
	b.ReportMetric(float64(create.Milliseconds())/n, "create-ms/op")
	b.ReportMetric(float64(start.Milliseconds())/n, "start-ms/op")
}
