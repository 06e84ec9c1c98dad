package cache

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
	st "github.com/podbus/podbus/sched/schedtest"
)

// BenchmarkApplyAlloc is what a scheduler does when another replica's pod comes to a node holding 0 or
// 110 pods and leaves again: decode what the alloc watch delivered and apply it. "record" is the node's
// whole record per change, "keys" the pod's own key.
func BenchmarkApplyAlloc(b *testing.B) {
	pa := func(uid string) *pb.PodAllocation {
		return &pb.PodAllocation{Namespace: "default", Name: uid, Labels: map[string]string{"app": "web", "tier": "frontend"},
			Requests: &pb.Resources{MilliCpu: 10, Memory: 1 << 20, Pods: 1}}
	}
	for _, placed := range []int{0, 110} {
		rec := &pb.NodeAllocation{Node: "n", Pods: map[string]*pb.PodAllocation{}, Total: &pb.Resources{}}
		for i := range placed {
			uid := fmt.Sprintf("p%03d", i)
			rec.Pods[uid] = pa(uid)
		}
		without, _ := proto.Marshal(rec)
		rec.Pods["new"] = pa("new")
		with, _ := proto.Marshal(rec)
		one, _ := proto.Marshal(pa("new"))
		setup := func() *Cache {
			c, _ := newTestCache()
			c.UpsertNode(st.Node("n").Capacity("64", "64Gi", 1000).Obj(), 1)
			a := &pb.NodeAllocation{}
			_ = proto.Unmarshal(without, a)
			for uid, p := range a.Pods {
				c.ApplyPodAlloc("n", uid, p, 2)
			}
			return c
		}
		b.Run(fmt.Sprintf("record/pods=%d", placed), func(b *testing.B) {
			c, rev := setup(), uint64(10)
			for range b.N {
				for _, data := range [][]byte{with, without} {
					a := &pb.NodeAllocation{}
					if err := proto.Unmarshal(data, a); err != nil {
						b.Fatal(err)
					}
					rev++
					c.UpsertAlloc("n", a, rev)
				}
			}
		})
		b.Run(fmt.Sprintf("keys/pods=%d", placed), func(b *testing.B) {
			c, rev := setup(), uint64(10)
			for range b.N {
				p := &pb.PodAllocation{}
				if err := proto.Unmarshal(one, p); err != nil {
					b.Fatal(err)
				}
				c.ApplyPodAlloc("n", "new", p, rev+1)
				c.ApplyPodAlloc("n", "new", nil, rev+2)
				rev += 2
			}
		})
	}
}
