package controllers

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

// entry is a watched bucket entry.
type entry struct {
	key   string
	value []byte
	rev   uint64
	op    jetstream.KeyValueOp
}

func (e *entry) Bucket() string                  { return bus.BucketPods }
func (e *entry) Key() string                     { return e.key }
func (e *entry) Value() []byte                   { return e.value }
func (e *entry) Revision() uint64                { return e.rev }
func (e *entry) Created() time.Time              { return time.Time{} }
func (e *entry) Delta() uint64                   { return 0 }
func (e *entry) Operation() jetstream.KeyValueOp { return e.op }

// runningPod is a ReplicaSet's pod as the store holds it once it runs: i picks its namespace,
// ReplicaSet and node.
func runningPod(i int) *pb.Pod {
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

func testService() *Service {
	return &Service{cfg: Config{Kinds: defaultKinds}, cache: newCache(), kv: map[string]jetstream.KeyValue{}, dirtyDS: map[string]bool{},
		dirtyPDB: map[string]bool{}, dirtyGC: map[string]bool{}}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkCachePods is what the cache keeps per pod: the pods' entries are made before the first
// measure, so what grows is the cache alone.
func BenchmarkCachePods(b *testing.B) {
	const n = 20000
	entries := make([]*entry, n)
	size := 0
	for i := range entries {
		p := runningPod(i)
		data, err := proto.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		size += len(data)
		entries[i] = &entry{key: bus.ObjectKey(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName()), value: data,
			rev: uint64(i + 1), op: jetstream.KeyValuePut}
	}
	kb := &defaultKinds[0]
	for b.Loop() {
		before := heapAlloc()
		s := testService()
		for _, e := range entries {
			s.apply(change{kind: kb, entry: e})
		}
		// work would have drained these.
		s.dirtyDS, s.dirtyPDB, s.dirtyGC = map[string]bool{}, map[string]bool{}, map[string]bool{}
		after := heapAlloc()
		b.ReportMetric(float64(after-before)/n, "B/pod")
		b.ReportMetric(float64(size)/n, "stored-B/pod")
		runtime.KeepAlive(s)
	}
	runtime.KeepAlive(entries)
}
