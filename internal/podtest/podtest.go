// Package podtest makes pods for tests and benchmarks: realistic ones, as the store holds them.
package podtest

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Entry is a watched bucket entry of the pods bucket.
type Entry struct {
	K   string
	V   []byte
	Rev uint64
	Op  jetstream.KeyValueOp
}

func (e *Entry) Bucket() string                  { return bus.BucketPods }
func (e *Entry) Key() string                     { return e.K }
func (e *Entry) Value() []byte                   { return e.V }
func (e *Entry) Revision() uint64                { return e.Rev }
func (e *Entry) Created() time.Time              { return time.Time{} }
func (e *Entry) Delta() uint64                   { return 0 }
func (e *Entry) Operation() jetstream.KeyValueOp { return e.Op }

// RunningPod is a ReplicaSet's pod as the store holds it once it runs: i picks its namespace,
// ReplicaSet and node.
func RunningPod(i int) *pb.Pod {
	ns := fmt.Sprintf("team-%d", i%20)
	rs := fmt.Sprintf("web-%d-7d9f8c6b5", i%100)
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	yes := true
	return &pb.Pod{
		Metadata: &pb.ObjectMeta{
			Name: fmt.Sprintf("%s-%05x", rs, i), GenerateName: rs + "-", Namespace: ns,
			Uid: fmt.Sprintf("0b6c1f5e-2a3d-4e7f-9a1b-%012d", i), Generation: 1,
			Labels:            map[string]string{"app": fmt.Sprintf("web-%d", i%100), "pod-template-hash": "7d9f8c6b5"},
			CreationTimestamp: at,
			OwnerReferences: []*pb.OwnerReference{{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: rs,
				Uid: fmt.Sprintf("5e3a9c1d-7b2f-4c8e-a6d4-%012d", i%100), Controller: &yes, BlockOwnerDeletion: &yes}},
		},
		Spec: &pb.PodSpec{
			Containers: []*pb.Container{{Name: "web", Image: "podbus/demo-web:latest", ImagePullPolicy: "IfNotPresent",
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File"}},
			RestartPolicy: "Always", TerminationGracePeriodSeconds: proto.Int64(30), DnsPolicy: "ClusterFirst",
			ServiceAccountName: "default", NodeName: fmt.Sprintf("node-%04d", i%5000), SchedulerName: "default-scheduler",
			Tolerations: []*pb.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(300)},
				{Key: "node.kubernetes.io/unreachable", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(300)},
			},
			EnableServiceLinks: &yes,
		},
		Status: &pb.PodStatus{
			Phase: "Running", HostIp: "10.1.2.3", PodIp: fmt.Sprintf("10.244.%d.%d", i/250%250, i%250),
			PodIps: []string{fmt.Sprintf("10.244.%d.%d", i/250%250, i%250)}, StartTime: at, QosClass: "BestEffort",
			Conditions: []*pb.PodCondition{
				{Type: "PodReadyToStartContainers", Status: "True", LastTransitionTime: at},
				{Type: "Initialized", Status: "True", LastTransitionTime: at},
				{Type: "Ready", Status: "True", LastTransitionTime: at},
				{Type: "ContainersReady", Status: "True", LastTransitionTime: at},
				{Type: "PodScheduled", Status: "True", LastTransitionTime: at},
			},
			ContainerStatuses: []*pb.ContainerStatus{{Name: "web", Ready: true, Image: "podbus/demo-web:latest",
				ImageId:     "sha256:4f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
				ContainerId: fmt.Sprintf("containerd://%064d", i), Started: &yes,
				State: &pb.ContainerState{Running: &pb.ContainerStateRunning{StartedAt: at}}}},
		},
		Internal: &pb.PodInternal{CorrelationId: fmt.Sprintf("9f8e7d6c-5b4a-4321-8765-%012d", i), ReportSeq: 1767322245000000000},
	}
}

// Entries are n running pods (RunningPod) as puts of the pods bucket, and their stored size.
func Entries(n int) ([]*Entry, int) {
	entries := make([]*Entry, n)
	size := 0
	for i := range entries {
		p := RunningPod(i)
		data, err := proto.Marshal(p)
		if err != nil {
			panic(err)
		}
		size += len(data)
		entries[i] = &Entry{K: bus.ObjectKey(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName()), V: data,
			Rev: uint64(i + 1), Op: jetstream.KeyValuePut}
	}
	return entries, size
}

// HeapAlloc is the live heap, after a collection.
func HeapAlloc() uint64 {
	b, _ := LiveHeap()
	return b
}

// LiveHeap is the live heap's bytes and objects, after a collection: the collector's mark work grows
// with both.
func LiveHeap() (bytes, objects uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapObjects
}

// ReportLiveHeap reports on b what fill keeps of n pods' entries whose stored values are storedBytes
// in all: the live heap's bytes and objects per pod after a GC, measured around fill, which returns
// what holds them.
func ReportLiveHeap(b *testing.B, n, storedBytes int, fill func() any) {
	before, beforeObjs := LiveHeap()
	kept := fill()
	after, afterObjs := LiveHeap()
	b.ReportMetric(float64(after-before)/float64(n), "B/pod")
	b.ReportMetric(float64(afterObjs-beforeObjs)/float64(n), "objects/pod")
	b.ReportMetric(float64(storedBytes)/float64(n), "stored-B/pod")
	runtime.KeepAlive(kept)
}
