package binder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/audit/check"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The history checker catches a deliberately broken binder: with its compare-and-set on the alloc
// bucket replaced by a plain write, binder replicas handling decisions for the same node at once
// overcommit it, and the checker names the pod, node and revision. The same runs with the
// compare-and-set are clean.
func TestCheckerCatchesPlainAllocWrites(t *testing.T) {
	for _, broken := range []bool{false, true} {
		name := map[bool]string{false: "compare-and-set", true: "plain writes"}[broken]
		t.Run(name, func(t *testing.T) {
			h := setup(t)
			brokenPlainWrites = broken
			t.Cleanup(func() { brokenPlainWrites = false }) // after the binders stop (cleanups run last first)
			for i := range 4 {
				h.run(fmt.Sprint("b", i))
			}
			ctx := context.Background()
			// Rounds until the broken binder overcommits (a race: it usually does in the first).
			var res check.Result
			var err error
			for round := range 5 {
				n := node(fmt.Sprint("n", round), "1", true) // room for two pods of 400m
				h.addNode(n)
				var pods []*pb.Pod
				for i := range 24 {
					p := pod(fmt.Sprintf("u%d-%d", round, i), fmt.Sprintf("p%d-%d", round, i), "400m")
					h.addPod(p)
					pods = append(pods, p)
				}
				var wg sync.WaitGroup
				for i, p := range pods {
					wg.Go(func() {
						md := p.GetMetadata()
						h.publishDecision(decision(md.GetUid(), md.GetName(), n.GetMetadata().GetName()), fmt.Sprintf("sched-%s-%d", md.GetUid(), i))
					})
				}
				wg.Wait()
				h.quiesce()
				bustest.Eventually(t, 10*time.Second, func() bool {
					ok, err := check.CaughtUp(ctx, h.conn.JS, "")
					return err == nil && ok
				}, "audit log never caught up")
				res, err = check.Check(ctx, h.conn.JS, check.Options{})
				if err != nil {
					break
				}
			}
			for _, v := range res.Violations {
				t.Log(v)
			}
			if !broken {
				if err != nil {
					t.Fatalf("a correct binder: %v", err)
				}
				if res.Pods == 0 {
					t.Fatal("the checker read no pods")
				}
				return
			}
			if !errors.Is(err, check.ErrViolations) {
				t.Fatalf("broken binder not caught: %v (%d records, %d pods)", err, res.Records, res.Pods)
			}
			for _, v := range res.Violations {
				if v.Kind != check.KindOvercommit || v.Pod == "" || v.Node == "" || v.Revision == 0 {
					t.Errorf("violation %v: want an overcommit naming pod, node and revision", v)
				}
			}
		})
	}
}

// A batch of decisions stored twice (sent again in a group the stream's de-duplication cannot
// recognise) binds each pod once: one binding, one pod.bound, one reservation.
func TestDuplicatedDecisionBatchBindsOnce(t *testing.T) {
	h := setup(t)
	h.addNode(node("n1", "2", true))
	var batch pb.Batch
	for _, name := range []string{"web", "db"} {
		uid := "u-" + name
		h.addPod(pod(uid, name, "500m"))
		data, err := proto.Marshal(decision(uid, name, "n1"))
		if err != nil {
			t.Fatal(err)
		}
		batch.Entries = append(batch.Entries, &pb.BatchEntry{Data: data, Headers: map[string]string{
			bus.HdrMsgID: "sched-" + uid + "-1", bus.HdrPodUID: uid, bus.HdrKey: "default/" + name,
		}})
	}
	data, err := proto.Marshal(&batch)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		msg := &nats.Msg{Subject: bus.SubjPodScheduled, Data: data, Header: nats.Header{bus.HdrBatch: {"2"}, bus.HdrActor: {"scheduler/test"}}}
		if _, err := h.conn.JS.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	h.run("b1")
	h.run("b2")
	h.quiesce()
	bound := map[string]int{}
	for _, m := range h.msgs(bus.StreamPods, bus.SubjPodBound("n1")) {
		bound[m.Header.Get(bus.HdrPodUID)]++
	}
	for _, name := range []string{"web", "db"} {
		uid := "u-" + name
		if p := h.getPod(name); p.GetSpec().GetNodeName() != "n1" {
			t.Errorf("%s bound to %q", name, p.GetSpec().GetNodeName())
		}
		if bound[uid] != 1 {
			t.Errorf("%s: %d pod.bound messages, want 1", name, bound[uid])
		}
	}
	if got := h.allocPods("n1"); len(got) != 2 {
		t.Errorf("alloc/n1 holds %v, want the two pods", got)
	}
}
