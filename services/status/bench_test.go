package status

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// benchPod is a pod as admission stores it for the loadtest's manifest: defaults filled in, bound,
// with its PodScheduled condition.
func benchPod(name string) *pb.Pod {
	seconds := int64(300)
	return &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name,
			Labels: map[string]string{"app": "loadtest", "run": "r1"}},
		Spec: &pb.PodSpec{NodeName: "n1", RestartPolicy: "Always", DnsPolicy: "ClusterFirst",
			SchedulerName: "default-scheduler", ServiceAccountName: "default",
			Containers: []*pb.Container{{Name: "app", Image: "registry.local/pause:3.10", ImagePullPolicy: "IfNotPresent",
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File",
				Resources:    &pb.ResourceRequirements{Requests: map[string]string{"cpu": "10m", "memory": "16Mi"}},
				VolumeMounts: []*pb.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}}},
			Volumes: []*pb.Volume{{Name: "kube-api-access", Source: []byte(`{"projected":{"sources":[{"serviceAccountToken":{"path":"token"}}]}}`)}},
			Tolerations: []*pb.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &seconds},
				{Key: "node.kubernetes.io/unreachable", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &seconds}}},
		Status: &pb.PodStatus{Phase: "Pending", QosClass: "Burstable",
			Conditions: []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.True}}},
		Internal: &pb.PodInternal{CorrelationId: "corr-" + name},
	}
}

// BenchmarkReport applies one agent report to a stored pod, the compare-and-set included: the pod as
// this replica last wrote it (the usual case), and read from the bucket (a pod's first report here).
func BenchmarkReport(b *testing.B) {
	for _, cached := range []bool{true, false} {
		name := "read"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			i := newIdle(b, Config{})
			ctx := context.Background()
			pod := benchPod("web")
			if _, err := bus.Create(ctx, i.s.pods, bus.PodKey("default", "web"), pod); err != nil {
				b.Fatal(err)
			}
			base := uint64(time.Now().Add(-time.Minute).UnixNano())
			rep := func(k int) *pb.PodStatusReport {
				r := report("web", "uid-web", base+uint64(k), "Running")
				r.Status.HostIp, r.Status.PodIps = "10.0.0.1", []string{"10.42.1.7"}
				r.Status.ContainerStatuses = []*pb.ContainerStatus{{Name: "app", Ready: true, Image: "registry.local/pause:3.10",
					ContainerId: fmt.Sprintf("containerd://%064d", k)}}
				return r
			}
			b.ReportAllocs()
			b.ResetTimer()
			for k := range b.N {
				if !cached {
					i.s.last.forget(bus.PodKey("default", "web"))
				}
				if res, _, err := i.s.applyReport(ctx, rep(k+1)); err != nil || res != applied {
					b.Fatalf("report %d: %v, %v", k, res, err)
				}
			}
		})
	}
}
