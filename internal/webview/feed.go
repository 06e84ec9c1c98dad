package webview

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// recentEventMsgs is how many of the EVENTS stream's last messages (batches) fill the list at start.
const recentEventMsgs = 20

// feed keeps the model from a KV watch of each of the pods and nodes buckets and an ordered consumer
// of the EVENTS stream, each restarted after a failure until ctx ends.
func (v *View) feed(ctx context.Context) {
	done := make(chan struct{}, 3)
	for _, f := range []func(context.Context) error{v.watchPods, v.watchNodes, v.tailEvents} {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				if err := f(ctx); err != nil && ctx.Err() == nil {
					v.log.Warn("web view feed failed; restarting", "err", err)
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	for range 3 {
		<-done
	}
}

// watchKV calls fn for every entry of bucket: first the current values (live false), then each write.
func (v *View) watchKV(ctx context.Context, bucket string, fn func(e jetstream.KeyValueEntry, live bool)) error {
	kv, err := v.js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch bucket %s: %w", bucket, err)
	}
	defer func() { _ = w.Stop() }()
	live := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch of bucket %s ended", bucket)
			}
			if e == nil { // the current values are all in
				live = true
				continue
			}
			fn(e, live)
		}
	}
}

func (v *View) watchPods(ctx context.Context) error {
	return v.watchKV(ctx, bus.BucketPods, func(e jetstream.KeyValueEntry, live bool) {
		if e.Operation() != jetstream.KeyValuePut {
			v.model.setPod(e.Key(), nil, e.Created(), live)
			return
		}
		p := &pb.Pod{}
		if err := proto.Unmarshal(e.Value(), p); err != nil {
			v.log.Warn("web view: undecodable pod", "key", e.Key(), "err", err)
			return
		}
		v.model.setPod(e.Key(), p, e.Created(), live)
	})
}

func (v *View) watchNodes(ctx context.Context) error {
	return v.watchKV(ctx, bus.BucketNodes, func(e jetstream.KeyValueEntry, _ bool) {
		if e.Operation() != jetstream.KeyValuePut {
			v.model.setNode(e.Key(), nil)
			return
		}
		n := &pb.Node{}
		if err := proto.Unmarshal(e.Value(), n); err != nil {
			v.log.Warn("web view: undecodable node", "key", e.Key(), "err", err)
			return
		}
		v.model.setNode(e.Key(), n)
	})
}

// tailEvents follows the EVENTS stream from its last few messages.
func (v *View) tailEvents(ctx context.Context) error {
	s, err := v.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return fmt.Errorf("events stream: %w", err)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}
	if last := s.CachedInfo().State.LastSeq; last > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = 1
		if last > recentEventMsgs {
			cfg.OptStartSeq = last - recentEventMsgs + 1
		}
	}
	cons, err := v.js.OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		return fmt.Errorf("events consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("consume events: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("consume events: %w", err)
		}
		entries, err := bus.Unbatch(msg.Subject(), msg.Headers(), msg.Data())
		if err != nil {
			continue
		}
		for _, en := range entries {
			e := &pb.Event{}
			if proto.Unmarshal(en.Data, e) == nil {
				v.model.addEvent(e)
			}
		}
	}
}
