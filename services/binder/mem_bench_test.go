package binder

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podtest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// memEntry is an alloc or nodes bucket entry as a watch delivers it.
type memEntry struct {
	key   string
	value []byte
	rev   uint64
}

func (e memEntry) Bucket() string                  { return "" }
func (e memEntry) Key() string                     { return e.key }
func (e memEntry) Value() []byte                   { return e.value }
func (e memEntry) Revision() uint64                { return e.rev }
func (e memEntry) Created() time.Time              { return time.Time{} }
func (e memEntry) Delta() uint64                   { return 0 }
func (e memEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// BenchmarkAllocMemory reports what the binder keeps per committed pod (B/pod and objects/pod, live heap after a GC)
// once its watch took in 50,000 alloc keys over 500 nodes: pods 100m/64Mi, the labels of their
// ReplicaSet of 50. "pending": no commit check read the view yet (no pod has inter-pod constraints);
// "flushed": one did, so the view's cache holds them all. "written": the keys are this replica's own
// writes, which the cache takes from the pods it decoded, not from the watch. Run it with
// -benchtime=1x.
func BenchmarkAllocMemory(b *testing.B) {
	const pods, nodes, replica = 50_000, 500, 50
	for _, mode := range []string{"pending", "flushed", "written"} {
		flush, written := mode == "flushed", mode == "written"
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				s := &Service{}
				v, err := newCommitView()
				if err != nil {
					b.Fatal(err)
				}
				s.view = v
				rev := uint64(0)
				for n := range nodes {
					nd := node(fmt.Sprintf("node-%03d", n), "1000", true)
					data, err := proto.Marshal(nd)
					if err != nil {
						b.Fatal(err)
					}
					rev++
					v.applyNode(memEntry{key: bus.NodeKey(nd.Metadata.Name), value: data, rev: rev})
				}
				if written {
					s.alloc.sync()
				}
				before, beforeObjs := podtest.LiveHeap()
				for i := range pods {
					rs := i / replica
					p := pod(fmt.Sprintf("uid-%08d", i), fmt.Sprintf("web-%d-%05d", rs, i), "100m", func(p *pb.Pod) {
						p.Metadata.Labels = map[string]string{"app": fmt.Sprintf("web-%d", rs),
							"pod-template-hash": fmt.Sprintf("%08x", rs*7919), "tier": "frontend"}
						p.Metadata.CreationTimestamp = timestamppb.New(time.Unix(1_700_000_000+int64(i), 0))
						p.Spec.SchedulerName = "default-scheduler"
						p.Spec.Containers[0].Resources.Requests["memory"] = "64Mi"
					})
					if written {
						// As reserve does: the pod as read from the bucket, then its key written.
						data, err := proto.Marshal(p)
						if err != nil {
							b.Fatal(err)
						}
						read := &pb.Pod{}
						if err := proto.Unmarshal(data, read); err != nil {
							b.Fatal(err)
						}
						node := fmt.Sprintf("node-%03d", i%nodes)
						rev++
						s.alloc.wrote(node, s.alloc.rev(node), rev, read.Metadata.Uid, podAllocation(read, podutil.PodRequests(read)), nil)
						continue
					}
					data, err := proto.Marshal(podAllocation(p, podutil.PodRequests(p)))
					if err != nil {
						b.Fatal(err)
					}
					rev++
					e := memEntry{key: bus.AllocPodKey(fmt.Sprintf("node-%03d", i%nodes), p.Metadata.Uid), value: data, rev: rev}
					// As watchView does.
					if c, ok := v.applyAlloc(e); ok {
						s.alloc.observe(c.node, c.uid, c.pa, c.meta, c.rev)
					}
					s.alloc.advance(rev)
				}
				if flush {
					v.snapshot()
				}
				after, afterObjs := podtest.LiveHeap()
				runtime.KeepAlive(s)
				b.ReportMetric(float64(after-before)/pods, "B/pod")
				b.ReportMetric(float64(afterObjs-beforeObjs)/pods, "objects/pod")
			}
		})
	}
}
