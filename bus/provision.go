package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Options shape the streams and buckets. Zero values give the embedded single-server defaults.
type Options struct {
	// Replicas of every stream and bucket: 1 on one server, 3 in a cluster.
	Replicas int
	// MaxAge of the pipeline history (PODS, STATUS). Zero keeps it for 7 days.
	MaxAge time.Duration
	// Memory storage instead of files (load tests of the pipeline alone).
	Memory bool
	// AuditMaxAge of the AUDIT stream. Zero keeps the audit log forever.
	AuditMaxAge time.Duration
	// NoAudit skips the AUDIT stream (it copies every message once more; load tests compare with and
	// without it). Off by default: a podbus keeps its audit log.
	NoAudit bool
	// Buckets provisioned besides the pipeline's: those of the API's kinds (admission.Buckets).
	Buckets []BucketSpec
	// Provisioned says an administrator's credential provisions the streams and buckets, which a
	// service's own may not: Provision and ProvisionBuckets then do nothing (services open what they use,
	// retrying while it is not there yet).
	Provisioned bool
}

// BucketSpec describes one KV bucket of API objects.
type BucketSpec struct {
	Name, Description string
	// History is how many revisions per key are kept (at least 1), so watches resuming from an older
	// resourceVersion see the steps in between.
	History uint8
}

func (o Options) replicas() int {
	if o.Replicas <= 0 {
		return 1
	}
	return o.Replicas
}

func (o Options) storage() jetstream.StorageType {
	if o.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// StreamConfigs are the streams podbus needs.
func StreamConfigs(o Options) []jetstream.StreamConfig {
	age := o.MaxAge
	if age == 0 {
		age = 7 * 24 * time.Hour
	}
	mk := func(name string, subjects []string, maxAge time.Duration) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:       name,
			Subjects:   subjects,
			Retention:  jetstream.LimitsPolicy,
			Storage:    o.storage(),
			Replicas:   o.replicas(),
			MaxAge:     maxAge,
			Duplicates: 2 * time.Minute,
			Discard:    jetstream.DiscardOld,
		}
	}
	return []jetstream.StreamConfig{
		mk(StreamPods, []string{SubjAllPods}, age),
		mk(StreamStatus, []string{SubjAllStatus}, age),
		mk(StreamHeartbeats, []string{SubjAllHeartbeats}, time.Hour),
		mk(StreamEvents, []string{SubjAllEvents}, time.Hour), // Kubernetes keeps events for one hour
		mk(StreamDead, []string{SubjAllDead}, age),
	}
}

// AuditConfig is the AUDIT stream: it sources every pipeline stream (HEARTBEATS excepted: a node's
// status changes reach the nodes bucket, which is sourced), the streams of the pods and nodes buckets
// and those of the workload kinds' buckets among o.Buckets (auditedAPIBuckets). The leases bucket is
// left out (a renewal changes no state; the node record still records every status change), and so is
// the alloc bucket: it is the binder's ledger, rebuilt from the pods' bindings and deletions alone, and
// each of its records holds every pod of its node, so a log kept forever would grow with the square of
// the pods per node, and copying it would cost CPU on every binding. Sourced messages keep their subject
// ("pod.scheduled", "$KV.pods.default.web") and headers, plus Nats-Stream-Source naming the origin
// stream and sequence. DenyDelete and DenyPurge make the log append-only through the API. No
// de-duplication window: every sourced message is kept, even one whose message id repeats after the
// origin's two-minute window.
func AuditConfig(o Options) jetstream.StreamConfig {
	var sources []*jetstream.StreamSource
	for _, name := range append([]string{StreamPods, StreamStatus, StreamEvents, StreamDead,
		KVStream(BucketPods), KVStream(BucketNodes)}, auditedBuckets(o)...) {
		sources = append(sources, &jetstream.StreamSource{Name: name})
	}
	return jetstream.StreamConfig{
		Name:        StreamAudit,
		Description: "podbus audit log: every state change, append-only",
		Sources:     sources,
		Retention:   jetstream.LimitsPolicy,
		Storage:     o.storage(),
		Replicas:    o.replicas(),
		MaxAge:      o.AuditMaxAge,
		Discard:     jetstream.DiscardOld,
		DenyDelete:  true,
		DenyPurge:   true,
	}
}

// AuditSealConfig is the AUDITSEAL stream: the sealer's blocks (SubjAuditSeal), kept as long as the log
// and append-only through the API like it.
func AuditSealConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamAuditSeal,
		Description: "podbus audit seals: signed hash-chain blocks over AUDIT",
		Subjects:    []string{SubjAuditSeal},
		Retention:   jetstream.LimitsPolicy,
		Storage:     o.storage(),
		Replicas:    o.replicas(),
		MaxAge:      o.AuditMaxAge,
		Duplicates:  2 * time.Minute,
		Discard:     jetstream.DiscardOld,
		DenyDelete:  true,
		DenyPurge:   true,
	}
}

// KVConfigs are the buckets podbus needs.
func KVConfigs(o Options) []jetstream.KeyValueConfig {
	mk := func(name, desc string, history uint8) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: name, Description: desc, History: history, Storage: o.storage(), Replicas: o.replicas()}
	}
	// A few revisions per pod and node, so an API watch that resumes from a resourceVersion sees each
	// step (created, bound, running, ...) rather than only the latest state.
	out := []jetstream.KeyValueConfig{
		mk(BucketPods, "podbus pods; revision = resourceVersion", 8),
		mk(BucketNodes, "podbus nodes", 4),
		mk(BucketLeases, "podbus node heartbeat leases", 1),
		mk(BucketAlloc, "podbus committed requests per node (binder)", 1),
		mk(BucketCommit, "podbus binders' token for commits under inter-pod constraints", 1),
	}
	for _, b := range o.Buckets {
		if !slices.ContainsFunc(out, func(c jetstream.KeyValueConfig) bool { return c.Bucket == b.Name }) {
			out = append(out, mk(b.Name, b.Description, max(b.History, 1)))
		}
	}
	return out
}

// Provision creates or updates every stream and bucket. It is idempotent and safe when several
// replicas start at once: a lost creation race is retried as an update. A stream whose configuration
// already matches is left alone (ensureStream).
func Provision(ctx context.Context, js jetstream.JetStream, o Options) error {
	if o.Provisioned {
		return nil
	}
	for _, cfg := range StreamConfigs(o) {
		if err := retry(ctx, "stream "+cfg.Name, func(ctx context.Context) error { return ensureStream(ctx, js, cfg) }); err != nil {
			return fmt.Errorf("provision stream %s: %w", cfg.Name, err)
		}
	}
	if err := provisionKV(ctx, js, o, KVConfigs(o)); err != nil {
		return err
	}
	if o.NoAudit {
		return nil
	}
	// Last: the streams it sources, buckets included, must exist first.
	for _, cfg := range []jetstream.StreamConfig{AuditConfig(o), AuditSealConfig(o)} {
		if err := retry(ctx, "stream "+cfg.Name, func(ctx context.Context) error { return ensureStream(ctx, js, cfg) }); err != nil {
			return fmt.Errorf("provision stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// ensureStream creates cfg's stream, or updates it when its configuration differs. The server answers
// a creation with the configuration it holds as a success, so a service that starts against a
// provisioned cluster changes nothing; an update, even to the same configuration, would reconfigure
// the stream's store on every start of every replica, and on a cluster go through the meta layer.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	_, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		_, err = js.UpdateStream(ctx, cfg)
	}
	return err
}

// ProvisionBuckets creates or updates the given buckets alone, shaped by o (replicas, storage), as
// Provision does. The API server provisions its kinds' buckets with it, idempotently.
func ProvisionBuckets(ctx context.Context, js jetstream.JetStream, o Options, specs ...BucketSpec) error {
	var cfgs []jetstream.KeyValueConfig
	for _, c := range KVConfigs(Options{Replicas: o.Replicas, Memory: o.Memory, Buckets: specs}) {
		if slices.ContainsFunc(specs, func(b BucketSpec) bool { return b.Name == c.Bucket }) {
			cfgs = append(cfgs, c)
		}
	}
	return provisionKV(ctx, js, o, cfgs)
}

func provisionKV(ctx context.Context, js jetstream.JetStream, o Options, cfgs []jetstream.KeyValueConfig) error {
	if o.Provisioned {
		return nil
	}
	for _, cfg := range cfgs {
		scfg := kvStreamConfig(cfg)
		// One server has no follower to lag behind: its direct gets see every acknowledged write.
		scfg.AllowDirect = o.replicas() == 1
		if err := retry(ctx, "bucket "+cfg.Bucket, func(ctx context.Context) error { return ensureStream(ctx, js, scfg) }); err != nil {
			return fmt.Errorf("provision bucket %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}

// atomicBuckets take atomic batch publishes: the binder commits several reservations of one node in
// one batch (WriteAllUnder).
var atomicBuckets = []string{BucketAlloc}

// retryTries is how many answered failures retry takes before it gives up.
const retryTries = 20

// retry runs f, which creates or opens what, until it succeeds, ctx ends, or it has failed retryTries
// times with an answer: concurrent provisioning fails transiently. Each try is one of Retry's, so a
// failure without an answer (a cluster electing leaders, a server cut off or stopped under the
// connection) is not counted: a service starting in a cluster under faults waits for it, as it would
// wait for its first messages, rather than exit.
func retry(ctx context.Context, what string, f func(context.Context) error) error {
	return retryPaced(ctx, what, startPacing, f)
}

// retryPacing is how long retry pauses after a failure.
type retryPacing struct {
	try        time.Duration             // how long one try waits for its answer (0: DefaultRequestTimeout)
	unanswered time.Duration             // after an immediate refusal without an answer
	answered   func(n int) time.Duration // after the nth answered failure
}

// startPacing grows with the answered failures, and waits long enough after an unanswered one for a
// leader to be chosen.
var startPacing = retryPacing{
	unanswered: pubRetryWait,
	answered:   func(n int) time.Duration { return time.Duration(50*n) * time.Millisecond },
}

func retryPaced(ctx context.Context, what string, p retryPacing, f func(context.Context) error) error {
	for answered := 1; ; answered++ {
		_, err := retryUnanswered(ctx, what, p.try, p.unanswered, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, f(ctx)
		})
		switch {
		case err == nil, errors.Is(err, context.Canceled):
			return err
		case ctx.Err() != nil:
			return errors.Join(err, ctx.Err())
		case answered == retryTries:
			return err
		}
		t := time.NewTimer(p.answered(answered))
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// Buckets are the opened KV buckets.
type Buckets struct {
	Pods, Nodes, Alloc, Commit jetstream.KeyValue
}

// OpenBuckets opens the provisioned buckets of the pipeline.
func OpenBuckets(ctx context.Context, js jetstream.JetStream) (Buckets, error) {
	var b Buckets
	for _, x := range []struct {
		name string
		dst  *jetstream.KeyValue
	}{{BucketPods, &b.Pods}, {BucketNodes, &b.Nodes}, {BucketAlloc, &b.Alloc}, {BucketCommit, &b.Commit}} {
		kv, err := OpenBucket(ctx, js, x.name)
		if err != nil {
			return Buckets{}, err
		}
		*x.dst = kv
	}
	return b, nil
}

// OpenBucket opens one provisioned bucket, retrying a little while its provisioning may be under way.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := retry(ctx, "bucket "+name, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", name, err)
	}
	return newBucket(ctx, js, kv)
}

// kvStreamConfig is the stream nats.go makes for a KV bucket, but without direct gets and with atomic
// batches where atomicBuckets say. A direct get may be answered by any replica, including a follower a
// few writes behind: a binder could then read "no such pod" just after the store created it and drop the
// decision, leaving the pod Pending. Without direct gets every read goes to the stream leader, which has
// applied every acknowledged write. Buckets are always made this way (never through CreateKeyValue, which
// would turn direct gets back on and atomic batches off), so every replica of every service provisions
// the same configuration.
func kvStreamConfig(kv jetstream.KeyValueConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:               "KV_" + kv.Bucket,
		Description:        kv.Description,
		Subjects:           []string{"$KV." + kv.Bucket + ".>"},
		MaxMsgsPerSubject:  int64(max(kv.History, 1)),
		MaxBytes:           -1,
		MaxMsgSize:         -1,
		MaxAge:             kv.TTL,
		Storage:            kv.Storage,
		Replicas:           max(kv.Replicas, 1),
		AllowRollup:        true,
		DenyDelete:         true,
		Duplicates:         2 * time.Minute,
		MaxMsgs:            -1,
		MaxConsumers:       -1,
		AllowDirect:        false,
		Discard:            jetstream.DiscardNew,
		AllowAtomicPublish: slices.Contains(atomicBuckets, kv.Bucket),
	}
}
