package cache

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/podtest"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

// memPods and memNodes size BenchmarkAllocMemory: the pods the binder committed, spread over the nodes.
const (
	memPods    = 50_000
	memNodes   = 500
	memReplica = 50 // pods per ReplicaSet, which share their labels
)

// memPod is pod i as the API holds it: 100m/64Mi, the labels of its ReplicaSet.
func memPod(i int) *pb.Pod {
	rs := i / memReplica
	p := st.Pod(fmt.Sprintf("web-%d-%05d", rs, i), fmt.Sprintf("uid-%08d", i)).Req("100m", "64Mi").
		Labels("app", fmt.Sprintf("web-%d", rs), "pod-template-hash", fmt.Sprintf("%08x", rs*7919), "tier", "frontend").Obj()
	p.Metadata.CreationTimestamp = timestamppb.New(time.Unix(1_700_000_000+int64(i), 0))
	p.Spec.SchedulerName = "default-scheduler"
	return p
}

// memAlloc is the alloc key the binder writes for pi, encoded.
func memAlloc(b *testing.B, pi *framework.PodInfo) []byte {
	md := pi.Pod.GetMetadata()
	data, err := proto.Marshal(&pb.PodAllocation{Namespace: md.GetNamespace(), Name: md.GetName(), Requests: pi.Requests,
		Labels: md.GetLabels(), CreationTimestamp: md.GetCreationTimestamp(), SchedulerName: pi.Pod.GetSpec().GetSchedulerName()})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkAllocMemory reports what the cache keeps per committed pod (B/pod, live heap after a GC):
// "own" pods were assumed by this replica first, as a lone scheduler's all are; "others" come only
// through the alloc watch (another replica's, or the binder's commit view). Run it with -benchtime=1x.
func BenchmarkAllocMemory(b *testing.B) {
	for _, own := range []bool{true, false} {
		b.Run(map[bool]string{true: "own", false: "others"}[own], func(b *testing.B) {
			for range b.N {
				c, _ := newTestCache()
				for n := range memNodes {
					c.UpsertNode(st.Node(fmt.Sprintf("node-%03d", n)).Capacity("1000", "4000Gi", 1000).Obj(), uint64(n+1))
				}
				before, beforeObjs := podtest.LiveHeap()
				rev := uint64(memNodes)
				for i := range memPods {
					node := fmt.Sprintf("node-%03d", i%memNodes)
					pi := framework.NewPodInfo(memPod(i))
					data := memAlloc(b, pi)
					if own {
						if err := c.Assume(pi, node, uint64(i+1)); err != nil {
							b.Fatal(err)
						}
					}
					pa := &pb.PodAllocation{}
					if err := proto.Unmarshal(data, pa); err != nil {
						b.Fatal(err)
					}
					intern.PodAllocation(pa) // as services/scheduler decodes it
					rev++
					c.ApplyPodAlloc(node, pi.UID(), pa, rev)
				}
				if c.NumAssumed() != 0 {
					b.Fatalf("%d pods still assumed", c.NumAssumed())
				}
				after, afterObjs := podtest.LiveHeap()
				runtime.KeepAlive(c)
				b.ReportMetric(float64(after-before)/memPods, "B/pod")
				b.ReportMetric(float64(afterObjs-beforeObjs)/memPods, "objects/pod")
			}
		})
	}
}
