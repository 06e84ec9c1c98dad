package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/cache"
	"github.com/podbus/podbus/sched/config"
	"github.com/podbus/podbus/sched/core"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins"
	st "github.com/podbus/podbus/sched/schedtest"
)

// A requeued pod that reaches a replica whose cache has not applied the triggering change yet waits
// (nak with a short delay) instead of being judged against the old view; malformed input is parked.
func TestHandlePendingBeforeDecision(t *testing.T) {
	c := cache.New(cache.Options{})
	c.UpsertNode(st.Node("n1").Obj(), 4)
	pub := &fakePublisher{}
	s := &Service{cache: c, pub: pub, algos: map[string]*core.Algorithm{config.DefaultSchedulerName: newTestAlgorithm(t, nil)}, now: time.Now,
		parks: newRequeuer(pub, time.Second, c.Changes, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	data, _ := proto.Marshal(&pb.PendingPod{Pod: st.Pod("p", "u1").Obj(), Revision: 3, Cause: CauseNodeChanged})
	noUID, _ := proto.Marshal(&pb.PendingPod{Pod: st.Pod("p", "").Obj()})
	tests := []struct {
		name      string
		msg       *bus.Msg
		wantRetry bool
		wantBad   bool
	}{
		{"trigger not seen yet", &bus.Msg{Data: data, Delivered: 1, Meta: bus.Meta{MsgID: retryMsgID("u1", "n5")}}, true, false},
		{"waited long enough", &bus.Msg{Data: data, Delivered: maxCacheWaits, Meta: bus.Meta{MsgID: retryMsgID("u1", "n5")}}, false, false},
		{"undecodable", &bus.Msg{Data: []byte{0xff, 0xff}}, false, true},
		{"no uid", &bus.Msg{Data: noUID}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub.decisions = nil
			err := s.handlePending(context.Background(), tt.msg)
			var re *bus.RetryError
			if got := errors.As(err, &re) && errors.Is(err, errCacheBehind); got != tt.wantRetry {
				t.Errorf("retry = %v (err %v)", got, err)
			}
			if got := errors.Is(err, bus.ErrMalformed); got != tt.wantBad {
				t.Errorf("malformed = %v (err %v)", got, err)
			}
			if decided := len(pub.decisions) > 0; decided != (err == nil) {
				t.Errorf("decisions %d, err %v", len(pub.decisions), err)
			}
		})
	}
}

// newTestAlgorithm returns the algorithm over fw (nil: the default plugins).
func newTestAlgorithm(t testing.TB, fw *framework.Framework) *core.Algorithm {
	t.Helper()
	if fw == nil {
		var err error
		if fw, err = framework.New(plugins.DefaultPlugins()...); err != nil {
			t.Fatal(err)
		}
	}
	return core.NewAlgorithm(fw, 0)
}
