package binder

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podtest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// BenchmarkReserve reserves a pod on a node that holds 0 or 110 pods already and releases it again, so
// every iteration finds the node as it was: the cost of a binding's reservation should not depend on
// how full the node is, nor on how many pods came and went before.
func BenchmarkReserve(b *testing.B) {
	for _, tc := range []struct{ placed, departed int }{{0, 0}, {110, 0}, {0, 1000}} {
		placed := tc.placed
		b.Run(fmt.Sprintf("pods=%d,departed=%d", placed, tc.departed), func(b *testing.B) {
			ctx := context.Background()
			_, url := bustest.Server(b)
			conn := bustest.Conn(b, url, "bench")
			s, err := New(Config{ID: "bench"}, conn)
			if err != nil {
				b.Fatal(err)
			}
			s.now = func() time.Time { return fixedNow }
			if err := s.open(ctx); err != nil {
				b.Fatal(err)
			}
			n := node("n1", "1000", true)
			n.Status.Allocatable["pods"] = "1000"
			if _, err := bus.Create(ctx, s.b.Nodes, bus.NodeKey("n1"), n); err != nil {
				b.Fatal(err)
			}
			labelled := func(p *pb.Pod) {
				p.Metadata.Labels = map[string]string{"app": "web", "tier": "frontend", "team": "checkout"}
			}
			for i := range placed {
				p := pod(fmt.Sprintf("placed-%03d", i), fmt.Sprintf("placed-%03d", i), "100m", labelled)
				if res, _, err := s.reserve(ctx, "n1", p); err != nil || res != reservationAdded {
					b.Fatalf("place pod %d: %v %v", i, res, err)
				}
			}
			for i := range tc.departed {
				uid := fmt.Sprintf("departed-%04d", i)
				if res, _, err := s.reserve(ctx, "n1", pod(uid, uid, "100m", labelled)); err != nil || res != reservationAdded {
					b.Fatalf("reserve: %v %v", res, err)
				}
				if err := s.release(ctx, "n1", uid); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				// One uid throughout: the node keeps the same keys, placed pods and one more.
				uid := "bench"
				if res, _, err := s.reserve(ctx, "n1", pod(uid, uid, "100m", labelled)); err != nil || res != reservationAdded {
					b.Fatalf("reserve: %v %v", res, err)
				}
				if err := s.release(ctx, "n1", uid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecisionNode is the routing of one decision carrying a running pod: the binder's first read
// of every decision.
func BenchmarkDecisionNode(b *testing.B) {
	d := decision("u1", "web", "n1")
	d.Pod = podtest.RunningPod(1)
	data, err := proto.Marshal(d)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if decisionNode(&bus.Msg{Data: data}) != "n1" {
			b.Fatal("wrong node")
		}
	}
}
