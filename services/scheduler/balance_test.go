package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
	st "github.com/podbus/podbus/sched/schedtest"
)

func TestToYield(t *testing.T) {
	now := time.Now()
	mk := func(served ...bool) []*partition {
		parts := make([]*partition, len(served))
		for i, s := range served {
			parts[i] = &partition{spec: bus.ConsumerSpec{Durable: bus.ConsumerSchedulerPartition(i)}}
			if s {
				parts[i].handled.Store(now.Add(-time.Second).UnixNano())
			} else {
				parts[i].handled.Store(now.Add(-time.Minute).UnixNano()) // served long ago: idle here
			}
		}
		return parts
	}
	all := []bool{true, true, true, true, true, true, true, true}
	tests := []struct {
		name     string
		parts    []*partition
		replicas int
		want     []string
	}{
		{"alone: keeps everything", mk(all...), 1, nil},
		{"three replicas: keeps ceil(8/3)=3, yields the highest five", mk(all...), 3,
			[]string{"scheduler-g3", "scheduler-g4", "scheduler-g5", "scheduler-g6", "scheduler-g7"}},
		{"two replicas: keeps 4", mk(all...), 2, []string{"scheduler-g4", "scheduler-g5", "scheduler-g6", "scheduler-g7"}},
		{"more replicas than partitions: keeps 1", mk(true, true, false, false, false, false, false, false), 10, []string{"scheduler-g1"}},
		{"idle partitions do not count", mk(true, false, true, false, false, false, false, true), 3, nil},
		{"at its share already", mk(true, true, true, false, false, false, false, false), 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range toYield(tt.parts, tt.replicas, now) {
				got = append(got, p.spec.Durable)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("yield %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMembersExpire(t *testing.T) {
	now := time.Now()
	m := newMembers("a")
	if n := m.live(now); n != 1 {
		t.Fatalf("alone: %d live, want 1", n)
	}
	m.heard("a", now) // its own beat counts once
	m.heard("b", now)
	m.heard("c", now.Add(-memberTTL-time.Second))
	if n := m.live(now); n != 2 {
		t.Errorf("%d live, want 2 (a and b; c is silent too long)", n)
	}
	if n := m.live(now.Add(memberTTL + time.Second)); n != 1 {
		t.Errorf("%d live once b is silent too, want 1", n)
	}
}

// A replica that started first holds every pinned partition; once two more replicas run, it yields
// the partitions beyond its share, and the others take them over.
func TestReplicasShareThePinnedPartitions(t *testing.T) {
	h := newHarness(t)
	h.putNode(readyNode("n1", "1000"))
	h.start("a", time.Second)
	n := 0
	round := func() map[int]string { // one pod per partition; which replica decided each
		t.Helper()
		uids := make([]string, bus.PendingPartitions)
		for p := range uids {
			n++
			uid := fmt.Sprintf("u%d", n)
			uids[p] = uid
			pod := st.Pod(fmt.Sprintf("p%d", n), uid).Req("10m", "1Mi").Obj()
			err := h.store.Publish(context.Background(), bus.SubjPodPendingGroup(p), &pb.PendingPod{Pod: pod, Revision: 1, Cause: "created"},
				bus.Meta{MsgID: "pending-" + uid, PodUID: uid, Key: "default/" + pod.Metadata.Name})
			if err != nil {
				t.Fatal(err)
			}
		}
		by := map[int]string{}
		for p, uid := range uids {
			by[p] = h.decision(uid, 1).dec.GetScheduler()
		}
		return by
	}
	for p, id := range round() {
		if id != "scheduler/a" {
			t.Fatalf("partition %d decided by %q before any other replica ran", p, id)
		}
	}
	h.start("b", time.Second)
	h.start("c", time.Second)
	var last map[int]string
	bustest.Eventually(t, 40*time.Second, func() bool {
		last = round()
		per := map[string]int{}
		for _, id := range last {
			per[id]++
		}
		return per["scheduler/a"] <= 3 && per["scheduler/b"] <= 3 && per["scheduler/c"] <= 3
	}, "partitions never shared: last round decided by %v", &last)
}
