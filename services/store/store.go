// Package store applies pod commands to the pods bucket: it is the only writer of a pod's existence
// (create, update of metadata/spec, deletion) and answers admission on the command's reply subject.
//
// A command is handled at least once. Every step is idempotent and the command is acknowledged only after
// its effect is durable (KV written, follow-up message stored by JetStream); the reply is best effort:
//
//	pod.cmd.create ─▶ KV create ─────────────────────────▶ pod.pending ─▶ reply 201 ─▶ ack
//	pod.cmd.update ─▶ KV compare-and-set (keeps status) ───────────────▶ reply 200 ─▶ ack
//	pod.cmd.delete ─▶ unbound or grace 0: mark, pod.deleted (+terminate), KV delete ─▶ reply 200 ─▶ ack
//	                  bound: KV deletionTimestamp ─▶ pod.terminate.<node> ─▶ reply 200 ─▶ ack
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Config configures one store replica.
type Config struct {
	ID string // replica identity, stamped on messages as "store/<ID>"
	// Workers handle commands concurrently; commands for the same pod always go to the same worker, in order.
	Workers int          // default 32
	Logger  *slog.Logger // nil: slog.Default()
}

// Service consumes pod commands and applies them to the pods bucket.
type Service struct {
	cfg  Config
	conn *bus.Conn
	pub  *bus.Publisher
	// batch publishes the created pods' pod.pending messages: those of concurrent commands are stored
	// together (group commit).
	batch *bus.Batcher
	log   *slog.Logger
	pods  jetstream.KeyValue // opened by Run (or open)
	now   func() time.Time
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("invalid store config")

// New returns a store replica on conn. It does not touch the bus until Run.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("%w: ID is required", ErrConfig)
	}
	if conn == nil || conn.JS == nil || conn.NC == nil {
		return nil, fmt.Errorf("%w: a connection is required", ErrConfig)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	actor := "store/" + cfg.ID
	return &Service{
		cfg:   cfg,
		conn:  conn,
		pub:   bus.NewPublisher(conn.JS, actor),
		batch: bus.NewBatcher(conn.JS, actor),
		log:   cmp.Or(cfg.Logger, slog.Default()).With("actor", actor),
		now:   time.Now,
	}, nil
}

// Run handles commands until ctx is cancelled, then drains and returns nil.
func (s *Service) Run(ctx context.Context) error {
	if err := s.open(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}
	err := bus.Consume(ctx, s.conn.JS, bus.ConsumerSpec{
		Stream:  bus.StreamPods,
		Durable: bus.ConsumerStore,
		Filters: []string{bus.SubjPodCommands},
		Workers: s.cfg.Workers,
		Key:     func(m *bus.Msg) string { return m.Meta.Key },
		Logger:  s.log,
	}, s.handle)
	if ctx.Err() != nil {
		return nil // stopping: an error of a step cut short by the cancellation is not a failure
	}
	return err
}

func (s *Service) open(ctx context.Context) error {
	if s.pods != nil {
		return nil
	}
	b, err := bus.OpenBuckets(ctx, s.conn.JS)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.pods = b.Pods
	return nil
}

// handle decodes one command, applies it and answers it.
func (s *Service) handle(ctx context.Context, m *bus.Msg) error {
	// Decoded whole, even a create whose pod is stored from the command's bytes: those bytes become
	// the stored pod, so every field of them must be what a decoder accepts.
	cmd := &pb.PodCommand{}
	if err := m.Decode(cmd); err != nil {
		return err
	}
	if err := validate(m.Subject, cmd); err != nil {
		return err
	}
	res, err := s.apply(ctx, cmd, m.Data, m.Meta)
	if err != nil {
		return err
	}
	if cmd.GetOp() == pb.PodCommand_OP_CREATE && res.GetCode() == http.StatusCreated {
		metrics.StageStore.Since(m.Time)
	}
	s.reply(m.Meta.Reply, res)
	return nil
}

// apply runs one command. A non-nil error means nothing conclusive happened and the command must be
// retried; API-level failures (404, 409) are results, not errors. data is the command's wire form.
func (s *Service) apply(ctx context.Context, cmd *pb.PodCommand, data []byte, in bus.Meta) (*pb.CommandResult, error) {
	switch cmd.GetOp() {
	case pb.PodCommand_OP_CREATE:
		raw, _ := bus.Field(data, commandPodField)
		return s.create(ctx, cmd, raw, in)
	case pb.PodCommand_OP_UPDATE:
		return s.update(ctx, cmd)
	case pb.PodCommand_OP_DELETE:
		return s.delete(ctx, cmd, in)
	}
	return nil, fmt.Errorf("%w: unknown op %v", bus.ErrMalformed, cmd.GetOp())
}

// subjectOp is the op each command subject must carry.
var subjectOp = map[string]pb.PodCommand_Op{
	bus.SubjPodCreate: pb.PodCommand_OP_CREATE,
	bus.SubjPodUpdate: pb.PodCommand_OP_UPDATE,
	bus.SubjPodDelete: pb.PodCommand_OP_DELETE,
}

// validate rejects commands that can never be applied, so they are parked instead of retried forever.
func validate(subject string, cmd *pb.PodCommand) error {
	op := cmd.GetOp()
	if want, ok := subjectOp[subject]; ok && want != op {
		return fmt.Errorf("%w: %v command on %s", bus.ErrMalformed, op, subject)
	}
	if _, ok := pb.PodCommand_Op_name[int32(op)]; !ok || op == pb.PodCommand_OP_UNSPECIFIED {
		return fmt.Errorf("%w: command without a valid op (%d)", bus.ErrMalformed, op)
	}
	md := cmd.GetPod().GetMetadata()
	if md.GetNamespace() == "" || md.GetName() == "" {
		return fmt.Errorf("%w: %v command without pod namespace/name", bus.ErrMalformed, op)
	}
	if op == pb.PodCommand_OP_CREATE && md.GetUid() == "" {
		return fmt.Errorf("%w: create of %s/%s without uid", bus.ErrMalformed, md.GetNamespace(), md.GetName())
	}
	return nil
}

// reply answers admission on core NATS. Best effort: the requester may be gone, and the command's effect
// is already durable, so a lost reply only costs the client a timeout.
func (s *Service) reply(subject string, res *pb.CommandResult) {
	if subject == "" || res == nil {
		return
	}
	if !bus.IsReplySubject(subject) {
		metrics.Count("store.reply_refused", 1)
		s.log.Warn("command names a reply subject that is not an admission's; not answered", "subject", subject)
		return
	}
	data, err := proto.Marshal(res)
	if err != nil {
		s.log.Error("encode command result", "err", err)
		return
	}
	if err := s.conn.NC.Publish(subject, data); err != nil {
		s.log.Warn("reply to admission failed", "subject", subject, "err", err)
	}
}

// meta is the header set of a message about pod; the command's correlation id stands in when the
// stored pod has none.
func meta(pod *pb.Pod, msgID string, in bus.Meta) bus.Meta {
	md := pod.GetMetadata()
	corr := pod.GetInternal().GetCorrelationId()
	if corr == "" {
		corr = in.Correlation
	}
	return bus.Meta{
		MsgID:       msgID,
		Correlation: corr,
		PodUID:      md.GetUid(),
		Key:         md.GetNamespace() + "/" + md.GetName(),
	}
}
