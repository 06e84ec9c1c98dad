package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/cache"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins"
	"github.com/podbus/podbus/sched/plugins/interpodaffinity"
	"github.com/podbus/podbus/sched/plugins/noderesources"
	"github.com/podbus/podbus/sched/plugins/podtopologyspread"
	st "github.com/podbus/podbus/sched/schedtest"
)

// fakePublisher records messages; fail makes the next publishes fail.
type fakePublisher struct {
	mu   sync.Mutex
	ids  []string
	msgs []*pb.PendingPod
	fail error
	// decisions published on pod.scheduled (handler tests)
	decisions []*pb.SchedulingDecision
}

func (f *fakePublisher) Publish(_ context.Context, subject string, m proto.Message, meta bus.Meta) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if subject == bus.SubjPodScheduled {
		f.decisions = append(f.decisions, m.(*pb.SchedulingDecision))
		return nil
	}
	if pp, ok := m.(*pb.PendingPod); !ok || subject != bus.PendingSubject(podutil.ConstraintGroup(pp.GetPod())) {
		return errors.New("unexpected subject " + subject)
	}
	f.ids = append(f.ids, meta.MsgID)
	f.msgs = append(f.msgs, m.(*pb.PendingPod))
	return nil
}

// PublishAsync records like Publish and returns a future that is already settled.
func (f *fakePublisher) PublishAsync(subject string, m proto.Message, meta bus.Meta) (jetstream.PubAckFuture, error) {
	err := f.Publish(context.Background(), subject, m, meta)
	fut := &settledFuture{ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1), msg: &nats.Msg{Subject: subject}}
	if err != nil {
		fut.err <- err
	} else {
		fut.ok <- &jetstream.PubAck{}
	}
	return fut, nil
}

// PublishEncodedAsync decodes data as a decision and records it like PublishAsync.
func (f *fakePublisher) PublishEncodedAsync(subject string, data []byte, meta bus.Meta) (jetstream.PubAckFuture, error) {
	if subject != bus.SubjPodScheduled {
		return nil, errors.New("unexpected encoded message on " + subject)
	}
	d := &pb.SchedulingDecision{}
	if err := proto.Unmarshal(data, d); err != nil {
		return nil, err
	}
	return f.PublishAsync(subject, d, meta)
}

type settledFuture struct {
	ok  chan *jetstream.PubAck
	err chan error
	msg *nats.Msg
}

func (f *settledFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *settledFuture) Err() <-chan error            { return f.err }
func (f *settledFuture) Msg() *nats.Msg               { return f.msg }

func (f *fakePublisher) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := f.ids
	f.ids = nil
	sort.Strings(ids)
	return ids
}

type fakeChanges struct {
	n    uint64
	last string
}

func (f *fakeChanges) get() (uint64, string) { return f.n, f.last }

var (
	anyEvent   framework.Requeue // a rejection nothing is known of: every event may help
	podAdded   = framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Add}
	podDeleted = framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Delete}
	nodeUpdate = framework.ClusterEvent{Resource: framework.Node, ActionType: framework.UpdateNode}
)

// requeueFor is what the default plugins register for a pod rejected with fit.
func requeueFor(t *testing.T, fit *framework.FitError) framework.Requeue {
	t.Helper()
	fw, err := framework.New(plugins.DefaultPlugins()...)
	if err != nil {
		t.Fatal(err)
	}
	return fw.RequeueFor(fit)
}

func newTestRequeuer(backoff time.Duration) (*requeuer, *fakePublisher, *fakeChanges, *clock) {
	pub, ch, clk := &fakePublisher{}, &fakeChanges{}, &clock{t: time.Unix(1000, 0)}
	r := newRequeuer(pub, backoff, ch.get, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.now = clk.now
	return r, pub, ch, clk
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestRequeuer(t *testing.T) {
	ctx := context.Background()
	r, pub, ch, clk := newTestRequeuer(time.Second)
	a, b := st.Pod("a", "ua").Obj(), st.Pod("b", "ub").Obj()

	r.Add(a, 10, 0, anyEvent)
	r.Add(b, 11, 0, anyEvent)
	if next := r.flush(ctx); next != 0 || len(pub.take()) != 0 {
		t.Fatalf("nothing is due without a change (next %v)", next)
	}

	r.Trigger(cache.Change{Trigger: "n5", Event: nodeUpdate}) // marks the pods due; flush (the run loop, woken by Trigger) sends them
	r.flush(ctx)
	if diff := cmp.Diff([]string{"retry-ua-n5", "retry-ub-n5"}, pub.take()); diff != "" {
		t.Errorf("first trigger (-want +got):\n%s", diff)
	}
	if r.Len() != 0 {
		t.Errorf("requeued pods stay parked: %d", r.Len())
	}
	if got := pub.msgs[0]; got.GetCause() != CauseNodeChanged || got.GetRevision() == 0 {
		t.Errorf("pending = %v", got)
	}

	// a comes back unschedulable and a change arrives within the backoff: delayed, not lost.
	r.Add(a, 12, 0, anyEvent)
	clk.t = clk.t.Add(300 * time.Millisecond)
	r.Trigger(cache.Change{Trigger: "a7", Event: podDeleted})
	if next := r.flush(ctx); next != 700*time.Millisecond {
		t.Errorf("next = %v, want 700ms", next)
	}
	if got := pub.take(); len(got) != 0 {
		t.Errorf("requeued within the backoff: %v", got)
	}
	clk.t = clk.t.Add(700 * time.Millisecond)
	r.flush(ctx)
	if diff := cmp.Diff([]string{"retry-ua-a7"}, pub.take()); diff != "" {
		t.Errorf("after the backoff (-want +got):\n%s", diff)
	}

	// Added after a change the snapshot did not include: due at once, with that change's trigger.
	ch.n, ch.last = 3, "n9"
	r.Add(b, 13, 2, anyEvent)
	clk.t = clk.t.Add(time.Second)
	r.flush(ctx)
	if diff := cmp.Diff([]string{"retry-ub-n9"}, pub.take()); diff != "" {
		t.Errorf("missed change (-want +got):\n%s", diff)
	}

	// Removed pods are not requeued.
	r.Add(a, 14, 3, anyEvent)
	r.Remove("ua")
	r.Trigger(cache.Change{Trigger: "n10", Event: nodeUpdate})
	clk.t = clk.t.Add(time.Second)
	r.flush(ctx)
	if got := pub.take(); len(got) != 0 {
		t.Errorf("removed pod requeued: %v", got)
	}
}

func TestRequeuerPublishFailureKeepsPod(t *testing.T) {
	ctx := context.Background()
	r, pub, _, clk := newTestRequeuer(time.Second)
	r.Add(st.Pod("a", "ua").Obj(), 1, 0, anyEvent)
	pub.fail = errors.New("nats down")
	r.Trigger(cache.Change{Trigger: "n1", Event: nodeUpdate})
	if next := r.flush(ctx); next != time.Second {
		t.Errorf("retry in %v", next)
	}
	if r.Len() != 1 {
		t.Fatal("failed requeue dropped the pod")
	}
	pub.fail = nil
	clk.t = clk.t.Add(time.Second)
	r.flush(ctx)
	if diff := cmp.Diff([]string{"retry-ua-n1"}, pub.take()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A pod placed somewhere (a "p" trigger) wakes only the pods that wait for pods: pod affinity and
// topology spread; a pod rejected for cpu stays parked.
func TestRequeuerPodAddedWakesOnlyAffinityWaiters(t *testing.T) {
	ctx := context.Background()
	r, pub, _, _ := newTestRequeuer(time.Second)
	r.Add(st.Pod("cpu", "u-cpu").Obj(), 1, 0, requeueFor(t, &framework.FitError{Reasons: map[string]int32{noderesources.ErrReasonInsufficientCPU: 2}, Plugins: []string{noderesources.FitName}}))
	r.Add(st.Pod("aff", "u-aff").Obj(), 2, 0, requeueFor(t, &framework.FitError{Reasons: map[string]int32{interpodaffinity.ErrReasonAffinityRulesNotMatch: 2}, Plugins: []string{interpodaffinity.Name}}))
	r.Trigger(cache.Change{Trigger: "p7", Event: podAdded})
	r.flush(ctx)
	if diff := cmp.Diff([]string{"retry-u-aff-p7"}, pub.take()); diff != "" {
		t.Errorf("pod-added trigger (-want +got):\n%s", diff)
	}
	r.Trigger(cache.Change{Trigger: "a8", Event: podDeleted}) // a pod left: everyone may fit now
	r.flush(ctx)
	if diff := cmp.Diff([]string{"retry-u-cpu-a8"}, pub.take()); diff != "" {
		t.Errorf("alloc-shrunk trigger (-want +got):\n%s", diff)
	}
}

// The default plugins' registrations keep today's triggers: a pod placed wakes only pods rejected
// for pod affinity or spread skew; a pod leaving wakes those rejected for room or (anti-)affinity.
func TestDefaultPluginsRequeueOn(t *testing.T) {
	fit := func(plugin, reason string) *framework.FitError {
		return &framework.FitError{Reasons: map[string]int32{reason: 3}, Plugins: []string{plugin}}
	}
	for _, tt := range []struct {
		name                 string
		fit                  *framework.FitError
		podAdded, podDeleted bool
		label, taint         bool
	}{
		{"no fit error", nil, true, true, true, true},
		{"resources", fit(noderesources.FitName, noderesources.ErrReasonInsufficientCPU), false, true, false, false},
		{"anti-affinity", fit(interpodaffinity.Name, interpodaffinity.ErrReasonAntiAffinityRulesNotMatch), false, true, true, false},
		{"affinity", fit(interpodaffinity.Name, interpodaffinity.ErrReasonAffinityRulesNotMatch), true, true, true, false},
		{"spread", fit(podtopologyspread.Name, podtopologyspread.ErrReasonConstraintsNotMatch), true, true, true, false},
		{"spread, label missing", fit(podtopologyspread.Name, podtopologyspread.ErrReasonNodeLabelNotMatch), false, true, true, false},
		{"taints", fit("TaintToleration", "node(s) had untolerated taint {k: v}"), false, false, false, true},
	} {
		rq := requeueFor(t, tt.fit)
		for _, e := range []struct {
			name string
			ev   framework.ClusterEvent
			want bool
		}{
			{"pod added", podAdded, tt.podAdded},
			{"pod deleted", podDeleted, tt.podDeleted},
			{"node label", framework.ClusterEvent{Resource: framework.Node, ActionType: framework.UpdateNodeLabel}, tt.label},
			{"node taint", framework.ClusterEvent{Resource: framework.Node, ActionType: framework.UpdateNodeTaint}, tt.taint},
			{"node added", framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add}, true},
		} {
			if got := rq.Match(e.ev); got != e.want {
				t.Errorf("%s, %s: requeue %v, want %v", tt.name, e.name, got, e.want)
			}
		}
	}
}

// rejecter rejects every node; it registers events when it has some.
type rejecter struct {
	name   string
	events []framework.ClusterEventWithHint
}

func (r *rejecter) Name() string { return r.name }
func (r *rejecter) Filter(*framework.CycleState, *framework.PodInfo, *framework.NodeInfo) *framework.Status {
	return framework.NewStatus(framework.Unschedulable, r.name+" says no")
}

type registeringRejecter struct{ rejecter }

func (r *registeringRejecter) EventsToRegister() []framework.ClusterEventWithHint { return r.events }

// A pod rejected only by a plugin is requeued by the events that plugin registered and by no other;
// a plugin that registers none is helped by every event.
func TestRequeuerUsesRegisteredEvents(t *testing.T) {
	labels := &registeringRejecter{rejecter{name: "Labels", events: []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.UpdateNodeLabel}}}}}
	silent := &rejecter{name: "Silent"}
	tests := []struct {
		name   string
		plugin framework.FilterPlugin
		ch     cache.Change
		want   bool
	}{
		{"registered event", labels, cache.Change{Trigger: "n3", Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.UpdateNodeLabel | framework.UpdateNodeTaint}}, true},
		{"event not registered", labels, cache.Change{Trigger: "p3", Event: podAdded}, false},
		{"other node update", labels, cache.Change{Trigger: "n3", Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.UpdateNodeAllocatable}}, false},
		{"plugin without registrations", silent, cache.Change{Trigger: "p3", Event: podAdded}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fw, err := framework.New(framework.Registration{Plugin: tt.plugin})
			if err != nil {
				t.Fatal(err)
			}
			// The rejection as a scheduling cycle reports it.
			alg := newTestAlgorithm(t, fw)
			_, err = alg.Schedule(framework.SnapshotOf(st.Node("n1").Ready().Info()), st.Pod("p", "u1").Info())
			var fit *framework.FitError
			if !errors.As(err, &fit) {
				t.Fatalf("err = %v, want a FitError", err)
			}
			r, pub, _, _ := newTestRequeuer(time.Second)
			r.Add(st.Pod("p", "u1").Obj(), 1, 0, alg.RequeueFor(fit))
			r.Trigger(tt.ch)
			r.flush(context.Background())
			if got := len(pub.take()) == 1; got != tt.want {
				t.Errorf("requeued = %v, want %v (rejected by %v)", got, tt.want, fit.Plugins)
			}
		})
	}
}

func TestRetryTrigger(t *testing.T) {
	for _, tt := range []struct{ id, uid, want string }{
		{"retry-u1-n5", "u1", "n5"},
		{"retry-u1-a12", "u1", "a12"},
		{"pending-u1-3", "u1", ""},
		{"retry-u2-n5", "u1", ""},
		{"retry-u1-", "u1", ""},
	} {
		if got := retryTrigger(tt.id, tt.uid); got != tt.want {
			t.Errorf("retryTrigger(%q, %q) = %q, want %q", tt.id, tt.uid, got, tt.want)
		}
	}
}
