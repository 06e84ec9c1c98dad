package workloads

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	"github.com/podbus/podbus/internal/podtest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// runningPod is a ReplicaSet's pod as the store holds it once it runs: the API's defaults, the
// scheduler's node, the agent's status, the store's bookkeeping.
func runningPod(t testing.TB, i int) *pb.Pod {
	t.Helper()
	rs := fmt.Sprintf("lt-%d-6d4cf56db6", i/100)
	k := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%05d", rs, i), GenerateName: rs + "-", Namespace: "default",
			UID:    types.UID(fmt.Sprintf("0b9c3f5e-7d2a-4c1e-9f00-%012d", i)),
			Labels: map[string]string{"app": fmt.Sprintf("lt-%d", i/100), "loadtest": "deployments", "pod-template-hash": "6d4cf56db6"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "podbus/demo-web:latest",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
			}},
		}}},
	}
	convert.DefaultPod(k)
	p, w := convert.PodToPB(k)
	if len(w) > 0 {
		t.Fatal(w)
	}
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond)
	p.Metadata.CreationTimestamp = timestamppb.New(created)
	p.Metadata.OwnerReferences = []*pb.OwnerReference{ownerRef("apps/v1", "ReplicaSet", rs, "5f1e0c2a-rs-"+rs)}
	p.Spec.NodeName = fmt.Sprintf("node-%04d", i%5000)
	at := timestamppb.New(created.Add(2 * time.Second))
	cond := func(t string) *pb.PodCondition {
		return &pb.PodCondition{Type: t, Status: "True", LastTransitionTime: at}
	}
	started := true
	p.Status = &pb.PodStatus{
		Phase:      "Running",
		Conditions: []*pb.PodCondition{cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")},
		HostIp:     "10.0.19.7", PodIp: fmt.Sprintf("10.%d.%d.%d", 64+i>>16, i>>8&255, i&255),
		PodIps:    []string{fmt.Sprintf("10.%d.%d.%d", 64+i>>16, i>>8&255, i&255)},
		StartTime: timestamppb.New(created.Add(time.Second)), QosClass: "Burstable",
		ContainerStatuses: []*pb.ContainerStatus{{
			Name: "app", Ready: true, Started: &started, Image: "podbus/demo-web:latest",
			ImageId:     "sha256:3f1c0e8d5a9b7c6d4e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d",
			ContainerId: fmt.Sprintf("fake://%064d", i),
			State:       &pb.ContainerState{Running: &pb.ContainerStateRunning{StartedAt: at}},
		}},
	}
	p.Internal = &pb.PodInternal{CorrelationId: fmt.Sprintf("7e4b2c1d-0a9f-4e8d-b7c6-%012d", i), ReportSeq: uint64(created.UnixNano())}
	return p
}

// BenchmarkPodCacheMemory applies 20,000 running pods through onPod and reports the live heap the
// cache keeps per pod.
func BenchmarkPodCacheMemory(b *testing.B) {
	const n = 20000
	entries := make([]*podtest.Entry, n)
	for i := range entries {
		p := runningPod(b, i)
		data, err := proto.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		entries[i] = &podtest.Entry{K: bus.PodKey("default", p.GetMetadata().GetName()), V: data, Rev: uint64(i + 1), Op: jetstream.KeyValuePut}
	}
	var perPod float64
	for b.Loop() {
		s := &Service{c: newCache(), queue: newQueue()}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, e := range entries {
			s.onPod(e)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPod = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		runtime.KeepAlive(s)
		b.Logf("heap %d -> %d bytes", before.HeapAlloc, after.HeapAlloc)
	}
	b.ReportMetric(perPod, "B/pod")
}
