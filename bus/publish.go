package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// Meta is what travels in the headers of a pipeline message.
type Meta struct {
	MsgID       string // JetStream de-duplication id; empty: none
	Correlation string // follows one pod through every step
	PodUID      string
	Key         string // "namespace/name"
	Reply       string // core NATS subject for the store's answer
	User        string // the authenticated API user, on commands
	Trigger     string // a change the receiver should have seen first (HdrTrigger)
	Actor       string // set by the Publisher
}

// metaHeaders are the headers Meta travels in, in the order of Meta.values.
var metaHeaders = [...]string{HdrMsgID, HdrCorrelation, HdrPodUID, HdrKey, HdrReply, HdrUser, HdrTrigger, HdrActor}

// values are m's fields in the order of metaHeaders.
func (m Meta) values() [len(metaHeaders)]string {
	return [...]string{m.MsgID, m.Correlation, m.PodUID, m.Key, m.Reply, m.User, m.Trigger, m.Actor}
}

// header is m as message headers (the empty fields left out).
func (m Meta) header() nats.Header {
	values := m.values()
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	h := make(nats.Header, n)
	vals := make([]string, 0, n) // one allocation for every header's value
	for i, v := range values {
		if v != "" {
			vals = append(vals, v)
			h[metaHeaders[i]] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	return h
}

// MetaFrom reads Meta back from headers.
func MetaFrom(h nats.Header) Meta {
	return Meta{
		MsgID:       h.Get(HdrMsgID),
		Correlation: h.Get(HdrCorrelation),
		PodUID:      h.Get(HdrPodUID),
		Key:         h.Get(HdrKey),
		Reply:       h.Get(HdrReply),
		User:        h.Get(HdrUser),
		Trigger:     h.Get(HdrTrigger),
		Actor:       h.Get(HdrActor),
	}
}

// Publisher publishes protobuf messages on JetStream subjects, stamping the acting service.
type Publisher struct {
	js    jetstream.JetStream
	actor string
}

// NewPublisher returns a publisher that signs every message with actor ("scheduler/sched-a").
func NewPublisher(js jetstream.JetStream, actor string) *Publisher {
	return &Publisher{js: js, actor: actor}
}

// Actor is the identity stamped on every message.
func (p *Publisher) Actor() string { return p.actor }

func (p *Publisher) msg(subject string, m proto.Message, meta Meta) (*nats.Msg, error) {
	return encode(p.actor, subject, m, meta)
}

// encode is the message m on subject, with meta's headers and actor.
func encode(actor, subject string, m proto.Message, meta Meta) (*nats.Msg, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %T for %s: %w", m, subject, err)
	}
	return wrap(actor, subject, data, meta), nil
}

// wrap is the encoded message data on subject, with meta's headers and actor.
func wrap(actor, subject string, data []byte, meta Meta) *nats.Msg {
	meta.Actor = actor
	return &nats.Msg{Subject: subject, Data: data, Header: meta.header()}
}

// Publish stores m on its stream and returns once JetStream acknowledged it (the message is durable).
func (p *Publisher) Publish(ctx context.Context, subject string, m proto.Message, meta Meta) error {
	msg, err := p.msg(subject, m, meta)
	if err != nil {
		return err
	}
	if _, err := publishAck(ctx, p.js.Conn(), msg); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

// PublishAsync sends m without waiting; the caller must wait on the future (or on Wait) before it
// acknowledges whatever caused the publish.
func (p *Publisher) PublishAsync(subject string, m proto.Message, meta Meta) (jetstream.PubAckFuture, error) {
	msg, err := p.msg(subject, m, meta)
	if err != nil {
		return nil, err
	}
	return p.publishAsync(msg)
}

func (p *Publisher) publishAsync(msg *nats.Msg) (jetstream.PubAckFuture, error) {
	f, err := p.js.PublishMsgAsync(msg)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	return f, nil
}

// PublishEncodedAsync is PublishAsync for a message already encoded (see Splice).
func (p *Publisher) PublishEncodedAsync(subject string, data []byte, meta Meta) (jetstream.PubAckFuture, error) {
	return p.publishAsync(wrap(p.actor, subject, data, meta))
}

// Wait waits for the futures of async publishes and returns the first error.
func Wait(ctx context.Context, futures ...jetstream.PubAckFuture) error {
	var first error
	for _, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if first == nil {
				first = fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}
