package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/cache"
	"github.com/podbus/podbus/sched/framework"
)

// PendingPod causes: a requeue by a scheduler, a decision the binder refused.
const (
	CauseNodeChanged = "node-changed"
	CauseConflict    = "conflict"
)

// publisher is what the scheduler needs of bus.Publisher.
type publisher interface {
	Publish(ctx context.Context, subject string, m proto.Message, meta bus.Meta) error
	PublishEncodedAsync(subject string, data []byte, meta bus.Meta) (jetstream.PubAckFuture, error)
}

// requeuer remembers the pods this replica found unschedulable and sends them back to pod.pending
// when the cache reports a change that may let them fit: a cluster event that one of the plugins that
// rejected the pod registered (framework.EnqueueExtensions), as kube-scheduler's queue does.
//
//	unschedulable decision ─Add─▶ parked ──Trigger(matching event)──▶ due ──backoff passed──▶ pod.pending ─▶ (gone)
//	                                └──Remove (scheduled, deleted, back on pod.pending)──▶ (gone)
//
// A pod goes back at most once per backoff; a change that arrives sooner is not lost, the pod is only
// delayed. The message id retry-<uid>-<trigger> lets several replicas requeue the same pod once.
type requeuer struct {
	pub     publisher
	backoff time.Duration
	now     func() time.Time
	changes func() (uint64, string) // the cache's change count, see Add
	log     *slog.Logger

	mu     sync.Mutex
	parked map[string]*parkedPod // by uid
	recent map[string]time.Time  // uid -> last requeue, for the backoff
	wake   chan struct{}
}

type parkedPod struct {
	pod     *pb.Pod
	rev     uint64
	trigger string // "" while waiting for a change
	// wake: the events that may let it fit.
	wake framework.Requeue
}

func newRequeuer(pub publisher, backoff time.Duration, changes func() (uint64, string), log *slog.Logger) *requeuer {
	return &requeuer{
		pub: pub, backoff: backoff, now: time.Now, changes: changes, log: log,
		parked: map[string]*parkedPod{}, recent: map[string]time.Time{}, wake: make(chan struct{}, 1),
	}
}

// Add parks an unschedulable pod. seen is the cache's change count of the snapshot the pod was judged
// against: if the cache changed since, the change may have been missed, so the pod is due at once.
// The check runs under the lock that Trigger takes, so no change falls between the two.
// wake says which changes may let the pod fit (see framework.Framework.RequeueFor).
func (r *requeuer) Add(pod *pb.Pod, rev uint64, seen uint64, wake framework.Requeue) {
	uid := pod.GetMetadata().GetUid()
	r.mu.Lock()
	defer r.mu.Unlock()
	p := &parkedPod{pod: pod, rev: rev, wake: wake}
	if n, t := r.changes(); n != seen {
		p.trigger = t
	}
	r.parked[uid] = p
	if p.trigger != "" {
		r.poke()
	}
}

// AddDue parks a pod that is due at once (start-up).
func (r *requeuer) AddDue(pod *pb.Pod, rev uint64, trigger string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parked[pod.GetMetadata().GetUid()] = &parkedPod{pod: pod, rev: rev, trigger: trigger}
	r.poke()
}

// Remove forgets a pod.
func (r *requeuer) Remove(uid string) {
	r.mu.Lock()
	delete(r.parked, uid)
	r.mu.Unlock()
}

// Len is the number of parked pods.
func (r *requeuer) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.parked)
}

// Trigger marks due, because of ch, the parked pods that its event may let fit.
func (r *requeuer) Trigger(ch cache.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	woke := false
	for _, p := range r.parked {
		if !p.wake.Match(ch.Event) {
			continue
		}
		p.trigger = ch.Trigger
		woke = true
	}
	if woke {
		r.poke()
	}
}

func (r *requeuer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run sends due pods until ctx is cancelled.
func (r *requeuer) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := r.flush(ctx)
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}

type requeue struct {
	uid string
	p   *parkedPod
}

// flush publishes the due pods whose backoff has passed and returns when to look again (0: only on wake).
func (r *requeuer) flush(ctx context.Context) time.Duration {
	now := r.now()
	var out []requeue
	var next time.Duration
	r.mu.Lock()
	for uid, last := range r.recent {
		if now.Sub(last) >= r.backoff {
			delete(r.recent, uid)
		}
	}
	for uid, p := range r.parked {
		if p.trigger == "" {
			continue
		}
		if last, ok := r.recent[uid]; ok {
			if wait := r.backoff - now.Sub(last); wait > 0 {
				if next == 0 || wait < next {
					next = wait
				}
				continue
			}
		}
		out = append(out, requeue{uid: uid, p: p})
		delete(r.parked, uid)
		r.recent[uid] = now
	}
	r.mu.Unlock()

	sent := 0
	for _, q := range out {
		if err := r.publish(ctx, q.uid, q.p); err != nil {
			r.log.Warn("requeue failed; will retry", "uid", q.uid, "err", err)
			r.mu.Lock()
			if _, again := r.parked[q.uid]; !again {
				r.parked[q.uid] = q.p
			}
			r.mu.Unlock()
			if next == 0 || r.backoff < next {
				next = r.backoff
			}
			continue
		}
		sent++
	}
	if sent > 0 {
		metrics.Count("scheduler.requeues", int64(sent))
	}
	return next
}

func (r *requeuer) publish(ctx context.Context, uid string, p *parkedPod) error {
	md := p.pod.GetMetadata()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := r.pub.Publish(pctx, bus.PendingSubject(podutil.ConstraintGroup(p.pod)), &pb.PendingPod{Pod: p.pod, Revision: p.rev, Cause: CauseNodeChanged}, bus.Meta{
		MsgID:       retryMsgID(uid, p.trigger),
		Correlation: p.pod.GetInternal().GetCorrelationId(),
		PodUID:      uid,
		Key:         md.GetNamespace() + "/" + md.GetName(),
	})
	if err != nil {
		return fmt.Errorf("requeue %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	return nil
}

const retryPrefix = "retry-"

func retryMsgID(uid, trigger string) string { return retryPrefix + uid + "-" + trigger }

// retryTrigger returns the trigger of a requeue message id of uid, or "".
func retryTrigger(msgID, uid string) string {
	prefix := retryPrefix + uid + "-"
	if len(msgID) <= len(prefix) || msgID[:len(prefix)] != prefix {
		return ""
	}
	return msgID[len(prefix):]
}
