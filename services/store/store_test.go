package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

var fixedNow = time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

// harness is one nats-server with a running store replica.
type harness struct {
	t    *testing.T
	conn *bus.Conn
	pods jetstream.KeyValue
	pub  *bus.Publisher
}

// start runs a store replica; each of opts may change it before it runs.
func start(t *testing.T, opts ...func(*Service)) *harness {
	t.Helper()
	_, conn := bustest.Start(t)
	svc, err := New(Config{ID: "s1"}, conn)
	if err != nil {
		t.Fatal(err)
	}
	svc.now = func() time.Time { return fixedNow }
	for _, o := range opts {
		o(svc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	b, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, conn: conn, pods: b.Pods, pub: bus.NewPublisher(conn.JS, "admission/test")}
}

func pod(uid string, mods ...func(*pb.Pod)) *pb.Pod {
	p := &pb.Pod{
		Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web", Uid: uid, CreationTimestamp: timestamppb.New(fixedNow.Add(-time.Hour))},
		Spec:     &pb.PodSpec{Containers: []*pb.Container{{Name: "c", Image: "nginx"}}},
		Status:   &pb.PodStatus{Phase: "Pending"},
		Internal: &pb.PodInternal{CorrelationId: "corr-" + uid},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func bound(node string) func(*pb.Pod) { return func(p *pb.Pod) { p.Spec.NodeName = node } }

func graceSpec(s int64) func(*pb.Pod) {
	return func(p *pb.Pod) { p.Spec.TerminationGracePeriodSeconds = proto.Int64(s) }
}

// put stores p directly, as if an earlier step had written it.
func (h *harness) put(p *pb.Pod) uint64 {
	h.t.Helper()
	rev, err := bus.Create(context.Background(), h.pods, bus.PodKey("default", "web"), p)
	if err != nil {
		h.t.Fatal(err)
	}
	return rev
}

func (h *harness) get() (*pb.Pod, uint64, error) {
	p := &pb.Pod{}
	rev, err := bus.Get(context.Background(), h.pods, bus.PodKey("default", "web"), p)
	return p, rev, err
}

var subjects = map[pb.PodCommand_Op]string{
	pb.PodCommand_OP_CREATE: bus.SubjPodCreate,
	pb.PodCommand_OP_UPDATE: bus.SubjPodUpdate,
	pb.PodCommand_OP_DELETE: bus.SubjPodDelete,
}

// send publishes cmd like admission does and waits for the store's answer.
func (h *harness) send(cmd *pb.PodCommand) *pb.CommandResult {
	h.t.Helper()
	reply := bus.SubjReply("test", bus.ReplyToken())
	sub, err := h.conn.NC.SubscribeSync(reply)
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	md := cmd.GetPod().GetMetadata()
	meta := bus.Meta{Reply: reply, Key: md.GetNamespace() + "/" + md.GetName(), PodUID: md.GetUid(), Correlation: "corr-cmd"}
	if err := h.pub.Publish(context.Background(), subjects[cmd.GetOp()], cmd, meta); err != nil {
		h.t.Fatal(err)
	}
	m, err := sub.NextMsg(15 * time.Second)
	if err != nil {
		h.t.Fatalf("no answer to %v: %v", cmd.GetOp(), err)
	}
	res := &pb.CommandResult{}
	if err := proto.Unmarshal(m.Data, res); err != nil {
		h.t.Fatal(err)
	}
	return res
}

// msgs returns every message stored on subject in the PODS stream, oldest first.
func (h *harness) msgs(stream, subject string) []*jetstream.RawStreamMsg {
	h.t.Helper()
	return bustest.Messages(h.t, h.conn, stream, subject)
}

func create(p *pb.Pod) *pb.PodCommand { return &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, Pod: p} }

// keeping is cmd from a sender that keeps the pod it sent, as the API does.
func keeping(cmd *pb.PodCommand) *pb.PodCommand {
	cmd.OmitSentPod = true
	return cmd
}

func TestCreate(t *testing.T) {
	tests := []struct {
		name        string
		existing    *pb.Pod
		cmd         *pb.PodCommand
		want        *pb.CommandResult // Pod and Revision are checked apart
		wantPending int
	}{
		{
			name:        "new pod is stored and queued",
			cmd:         create(pod("u1")),
			want:        &pb.CommandResult{Code: 201},
			wantPending: 1,
		},
		{
			name:     "same name with another uid",
			existing: pod("u0"),
			cmd:      create(pod("u1")),
			want:     &pb.CommandResult{Code: 409, Reason: "AlreadyExists", Message: `pods "web" already exists`},
		},
		{
			name:        "redelivery of a handled create",
			existing:    pod("u1"),
			cmd:         create(pod("u1")),
			want:        &pb.CommandResult{Code: 201},
			wantPending: 1,
		},
		{
			name:        "pod created with a node is queued too",
			cmd:         create(pod("u1", bound("n1"))),
			want:        &pb.CommandResult{Code: 201},
			wantPending: 1,
		},
		{
			name:     "redelivery after the pod was bound does not requeue it",
			existing: pod("u1", bound("n1")),
			cmd:      create(pod("u1")),
			want:     &pb.CommandResult{Code: 201},
		},
		{
			name:        "a sender that keeps its pod gets none back",
			cmd:         keeping(create(pod("u1"))),
			want:        &pb.CommandResult{Code: 201, PodAsSent: true},
			wantPending: 1,
		},
		{
			name:     "a kept pod that moved on since comes back as stored",
			existing: pod("u1", bound("n1")),
			cmd:      keeping(create(pod("u1"))),
			want:     &pb.CommandResult{Code: 201},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t)
			if tt.existing != nil {
				h.put(tt.existing)
			}
			got := h.send(tt.cmd)
			stored, rev, err := h.get()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform(), protocmp.IgnoreFields(&pb.CommandResult{}, "pod", "revision")); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if got.GetCode() == 201 {
				answered := got.GetPod()
				if got.GetPodAsSent() {
					if answered != nil {
						t.Errorf("answer marked as sent carries a pod")
					}
					answered = tt.cmd.GetPod()
				}
				if got.GetRevision() != rev || !proto.Equal(answered, stored) {
					t.Errorf("answer stands for pod at %d, store has %d (same pod: %v)", got.GetRevision(), rev, proto.Equal(answered, stored))
				}
			}
			if tt.existing == nil && !proto.Equal(stored, tt.cmd.GetPod()) {
				t.Errorf("stored pod differs from the command's")
			}
			pending := h.msgs(bus.StreamPods, bus.SubjPodPendingAll)
			if len(pending) != tt.wantPending {
				t.Fatalf("pod.pending messages = %d, want %d", len(pending), tt.wantPending)
			}
			if tt.wantPending == 0 {
				return
			}
			m := pending[0]
			pp := bustest.Decode(t, m, &pb.PendingPod{})
			if pp.GetCause() != "created" || pp.GetRevision() != rev || pp.GetPod().GetMetadata().GetUid() != "u1" {
				t.Errorf("pending = cause %q rev %d uid %q; want created %d u1", pp.GetCause(), pp.GetRevision(), pp.GetPod().GetMetadata().GetUid(), rev)
			}
			wantHdr := map[string]string{
				bus.HdrMsgID:       fmt.Sprintf("pending-u1-%d", rev),
				bus.HdrCorrelation: "corr-u1",
				bus.HdrPodUID:      "u1",
				bus.HdrKey:         "default/web",
				bus.HdrActor:       "store/s1",
			}
			for k, v := range wantHdr {
				if got := m.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

// A command handled twice (a redelivery after a lost ack) answers the same and queues the pod once.
func TestCreateTwiceIsIdempotent(t *testing.T) {
	h := start(t)
	cmd := create(pod("u1"))
	first := h.send(cmd)
	second := h.send(cmd)
	if first.GetCode() != 201 || second.GetCode() != 201 {
		t.Fatalf("codes = %d, %d; want 201, 201", first.GetCode(), second.GetCode())
	}
	if first.GetRevision() != second.GetRevision() {
		t.Errorf("revisions = %d, %d; want equal", first.GetRevision(), second.GetRevision())
	}
	if n := len(h.msgs(bus.StreamPods, bus.SubjPodPendingAll)); n != 1 {
		t.Errorf("pod.pending messages = %d, want 1", n)
	}
}

func TestUpdate(t *testing.T) {
	conflict := `Operation cannot be fulfilled on pods "web": the object has been modified; please apply your changes to the latest version and try again`
	running := func(p *pb.Pod) {
		p.Status.Phase = "Running"
		p.Internal.ReportSeq = 7
	}
	labeled := func(p *pb.Pod) { p.Metadata.Labels = map[string]string{"app": "web"} }
	tests := []struct {
		name     string
		existing *pb.Pod
		touch    bool // write the pod once more after reading its revision, making that revision stale
		cmd      func(rev uint64) *pb.PodCommand
		want     *pb.CommandResult
		wantPod  *pb.Pod // stored afterwards (nil: unchanged)
	}{
		{
			name:     "keeps current status, internal and nodeName",
			existing: pod("u1", running, bound("n1")),
			cmd: func(uint64) *pb.PodCommand {
				return &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: pod("u1", labeled)}
			},
			want:    &pb.CommandResult{Code: 200},
			wantPod: pod("u1", running, bound("n1"), labeled),
		},
		{
			name:     "pinned to the current revision",
			existing: pod("u1"),
			cmd: func(rev uint64) *pb.PodCommand {
				return &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: pod("u1", labeled), ExpectedRevision: rev}
			},
			want:    &pb.CommandResult{Code: 200},
			wantPod: pod("u1", labeled),
		},
		{
			name:     "pinned to a stale revision",
			existing: pod("u1"),
			touch:    true,
			cmd: func(rev uint64) *pb.PodCommand {
				return &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: pod("u1", labeled), ExpectedRevision: rev}
			},
			want: &pb.CommandResult{Code: 409, Reason: "Conflict", Message: conflict},
		},
		{
			name: "not found",
			cmd: func(uint64) *pb.PodCommand {
				return &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: pod("u1", labeled)}
			},
			want: &pb.CommandResult{Code: 404, Reason: "NotFound", Message: `pods "web" not found`},
		},
		{
			name:     "other uid",
			existing: pod("u0"),
			cmd: func(uint64) *pb.PodCommand {
				return &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: pod("u1", labeled)}
			},
			want: &pb.CommandResult{Code: 409, Reason: "Conflict",
				Message: `Operation cannot be fulfilled on pods "web": Precondition failed: UID in precondition: u1, UID in object meta: u0`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t)
			var rev uint64
			if tt.existing != nil {
				rev = h.put(tt.existing)
				if tt.touch {
					if _, err := bus.Update(context.Background(), h.pods, bus.PodKey("default", "web"), tt.existing, rev); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := h.send(tt.cmd(rev))
			if diff := cmp.Diff(tt.want, got, protocmp.Transform(), protocmp.IgnoreFields(&pb.CommandResult{}, "pod", "revision")); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if tt.wantPod == nil {
				return
			}
			stored, storedRev, err := h.get()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantPod, stored, protocmp.Transform()); diff != "" {
				t.Errorf("stored pod (-want +got):\n%s", diff)
			}
			if got.GetRevision() != storedRev || !proto.Equal(got.GetPod(), stored) {
				t.Errorf("answer does not carry the stored pod")
			}
		})
	}
}

func TestDelete(t *testing.T) {
	del := func(mods ...func(*pb.PodCommand)) *pb.PodCommand {
		c := &pb.PodCommand{Op: pb.PodCommand_OP_DELETE, Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web"}}}
		for _, m := range mods {
			m(c)
		}
		return c
	}
	withGrace := func(s int64) func(*pb.PodCommand) {
		return func(c *pb.PodCommand) { c.GracePeriodSeconds = proto.Int64(s) }
	}
	terminating := func(p *pb.Pod) {
		p.Metadata.DeletionTimestamp = timestamppb.New(fixedNow.Add(-time.Minute))
		p.Metadata.DeletionGracePeriodSeconds = proto.Int64(20)
	}
	tests := []struct {
		name      string
		existing  *pb.Pod
		cmd       *pb.PodCommand
		want      *pb.CommandResult // Pod and Revision are checked apart
		wantGone  bool
		wantGrace int64 // of the termination, and of a pod left in the store; -1: no termination
		wantAt    time.Time
		deleted   *pb.PodDeleted
	}{
		{
			name:      "unbound pod goes at once",
			existing:  pod("u1"),
			cmd:       del(),
			want:      &pb.CommandResult{Code: 200},
			wantGone:  true,
			wantGrace: -1,
			deleted:   &pb.PodDeleted{Uid: "u1", Namespace: "default", Name: "web"},
		},
		{
			name:      "bound pod: the pod's grace period",
			existing:  pod("u1", bound("n1"), graceSpec(10)),
			cmd:       del(),
			want:      &pb.CommandResult{Code: 200},
			wantGrace: 10,
			wantAt:    fixedNow.Add(10 * time.Second),
		},
		{
			name:      "bound pod: default grace period",
			existing:  pod("u1", bound("n1")),
			cmd:       del(),
			want:      &pb.CommandResult{Code: 200},
			wantGrace: 30,
			wantAt:    fixedNow.Add(30 * time.Second),
		},
		{
			name:      "bound pod: the client's grace period wins",
			existing:  pod("u1", bound("n1"), graceSpec(10)),
			cmd:       del(withGrace(3)),
			want:      &pb.CommandResult{Code: 200},
			wantGrace: 3,
			wantAt:    fixedNow.Add(3 * time.Second),
		},
		{
			name:      "bound pod with grace 0 goes at once and the agent is told",
			existing:  pod("u1", bound("n1")),
			cmd:       del(withGrace(0)),
			want:      &pb.CommandResult{Code: 200},
			wantGone:  true,
			wantGrace: 0,
			wantAt:    fixedNow,
			deleted:   &pb.PodDeleted{Uid: "u1", Namespace: "default", Name: "web", Node: "n1"},
		},
		{
			name:      "already terminating: same answer, termination repeated",
			existing:  pod("u1", bound("n1"), terminating),
			cmd:       del(),
			want:      &pb.CommandResult{Code: 200},
			wantGrace: 20,
			wantAt:    fixedNow.Add(-time.Minute),
		},
		{
			name:      "terminating pod forced with grace 0",
			existing:  pod("u1", bound("n1"), terminating),
			cmd:       del(withGrace(0)),
			want:      &pb.CommandResult{Code: 200},
			wantGone:  true,
			wantGrace: 0,
			wantAt:    fixedNow,
			deleted:   &pb.PodDeleted{Uid: "u1", Namespace: "default", Name: "web", Node: "n1"},
		},
		{
			name:      "uid precondition fails",
			existing:  pod("u1"),
			cmd:       del(func(c *pb.PodCommand) { c.PreconditionUid = "u0" }),
			want:      &pb.CommandResult{Code: 409, Reason: "Conflict", Message: `Operation cannot be fulfilled on pods "web": Precondition failed: UID in precondition: u0, UID in object meta: u1`},
			wantGrace: -1,
		},
		{
			name:      "the name taken by another pod since the command was sent",
			existing:  pod("u1"),
			cmd:       del(func(c *pb.PodCommand) { c.Pod.Metadata.Uid = "u0" }),
			want:      &pb.CommandResult{Code: 404, Reason: "NotFound", Message: `pods "web" not found`},
			wantGrace: -1,
		},
		{
			name:      "not found",
			cmd:       del(),
			want:      &pb.CommandResult{Code: 404, Reason: "NotFound", Message: `pods "web" not found`},
			wantGone:  true,
			wantGrace: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t)
			if tt.existing != nil {
				h.put(tt.existing)
			}
			got := h.send(tt.cmd)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform(), protocmp.IgnoreFields(&pb.CommandResult{}, "pod", "revision")); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			stored, _, err := h.get()
			switch {
			case tt.wantGone && !errors.Is(err, bus.ErrNotFound):
				t.Errorf("pod still stored (err %v)", err)
			case !tt.wantGone && err != nil:
				t.Fatalf("pod gone: %v", err)
			case !tt.wantGone && tt.wantGrace >= 0:
				md := stored.GetMetadata()
				if !md.GetDeletionTimestamp().AsTime().Equal(tt.wantAt) || md.GetDeletionGracePeriodSeconds() != tt.wantGrace {
					t.Errorf("stored deletion = %v/%d, want %v/%d", md.GetDeletionTimestamp().AsTime(), md.GetDeletionGracePeriodSeconds(), tt.wantAt, tt.wantGrace)
				}
				if !proto.Equal(got.GetPod(), stored) {
					t.Errorf("answer does not carry the stored pod")
				}
			}

			terms := h.msgs(bus.StreamPods, bus.SubjPodTerminate("n1"))
			switch {
			case tt.wantGrace < 0 && len(terms) != 0:
				t.Errorf("unexpected termination message")
			case tt.wantGrace >= 0 && len(terms) != 1:
				t.Errorf("termination messages = %d, want 1", len(terms))
			case tt.wantGrace >= 0:
				term := bustest.Decode(t, terms[0], &pb.PodTermination{})
				want := &pb.PodTermination{Uid: "u1", Namespace: "default", Name: "web", Node: "n1", GracePeriodSeconds: tt.wantGrace,
					DeletionTimestamp: timestamppb.New(tt.wantAt), Reason: "Deleted"}
				if diff := cmp.Diff(want, term, protocmp.Transform()); diff != "" {
					t.Errorf("termination (-want +got):\n%s", diff)
				}
				if id, want := terms[0].Header.Get(bus.HdrMsgID), fmt.Sprintf("term-u1-%d-%d", tt.wantGrace, tt.wantAt.UnixNano()); id != want {
					t.Errorf("termination msg id = %q, want %q", id, want)
				}
			}

			deleted := h.msgs(bus.StreamPods, bus.SubjPodDeleted)
			if tt.deleted == nil {
				if len(deleted) != 0 {
					t.Errorf("unexpected pod.deleted")
				}
				return
			}
			if len(deleted) != 1 {
				t.Fatalf("pod.deleted messages = %d, want 1", len(deleted))
			}
			if diff := cmp.Diff(tt.deleted, bustest.Decode(t, deleted[0], &pb.PodDeleted{}), protocmp.Transform()); diff != "" {
				t.Errorf("pod.deleted (-want +got):\n%s", diff)
			}
			if id := deleted[0].Header.Get(bus.HdrMsgID); id != "deleted-u1" {
				t.Errorf("pod.deleted msg id = %q", id)
			}
		})
	}
}

// A deletion interrupted after marking the pod (crash before the KV delete) is finished by the redelivery.
func TestDeleteResumesAfterMark(t *testing.T) {
	h := start(t)
	h.put(pod("u1", func(p *pb.Pod) {
		p.Metadata.DeletionTimestamp = timestamppb.New(fixedNow)
		p.Metadata.DeletionGracePeriodSeconds = proto.Int64(0)
	}))
	got := h.send(&pb.PodCommand{Op: pb.PodCommand_OP_DELETE, Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web"}}})
	if got.GetCode() != 200 {
		t.Fatalf("code = %d", got.GetCode())
	}
	if _, _, err := h.get(); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("pod still stored: %v", err)
	}
	if n := len(h.msgs(bus.StreamPods, bus.SubjPodDeleted)); n != 1 {
		t.Errorf("pod.deleted messages = %d, want 1", n)
	}
}

func TestMalformedCommandIsParked(t *testing.T) {
	noUID, _ := proto.Marshal(create(pod("")))
	wrongOp, _ := proto.Marshal(&pb.PodCommand{Op: pb.PodCommand_OP_DELETE, Pod: pod("u1")})
	// A create as the API sends it (the pod not wanted back), with a container image that is not
	// UTF-8 deep in the pod: the store stores the command's bytes, so it must read all of them.
	named, _ := proto.Marshal(keeping(create(pod("u1", func(p *pb.Pod) { p.Spec.Containers[0].Image = "NOTUTF8" }))))
	notUTF8 := bytes.Replace(named, []byte("NOTUTF8"), []byte("\xffOTUTF8"), 1)
	tests := []struct {
		name string
		data []byte
	}{
		{"not protobuf", []byte("\xff\xff\xff not a command")},
		{"create without uid", noUID},
		{"op does not match the subject", wrongOp},
		{"an image that is not UTF-8", notUTF8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t)
			before := metrics.Counter("malformed.store")
			msg := &nats.Msg{Subject: bus.SubjPodCreate, Data: tt.data, Header: nats.Header{bus.HdrKey: []string{"default/web"}}}
			if _, err := h.conn.JS.PublishMsg(context.Background(), msg); err != nil {
				t.Fatal(err)
			}
			bustest.Eventually(t, 10*time.Second, func() bool {
				return len(h.msgs(bus.StreamDead, bus.SubjDeadPrefix+bus.SubjPodCreate)) == 1
			}, "command never parked on dead.pod.cmd.create")
			if got := metrics.Counter("malformed.store") - before; got != 1 {
				t.Errorf("malformed.store grew by %d, want 1", got)
			}
			if _, _, err := h.get(); !errors.Is(err, bus.ErrNotFound) {
				t.Errorf("a malformed command stored a pod: %v", err)
			}
			// The store keeps working after parking.
			if res := h.send(create(pod("u1"))); res.GetCode() != 201 {
				t.Errorf("create after a parked command: %d", res.GetCode())
			}
		})
	}
}

// A delete with reason Preempted (the binder's, for a scheduler's preemption) is graceful with the
// pod's own grace period, sets DisruptionTarget/PreemptionByScheduler and tells the agent why.
func TestDeletePreempted(t *testing.T) {
	h := start(t)
	h.put(pod("u1", bound("n1"), graceSpec(7), func(p *pb.Pod) { p.Spec.SchedulerName = "default-scheduler" }))
	cmd := &pb.PodCommand{Op: pb.PodCommand_OP_DELETE, Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web"}},
		PreconditionUid: "u1", Reason: "Preempted"}
	for range 2 { // the second is a redelivery: same answer, same (deduplicated) termination
		if got := h.send(cmd); got.GetCode() != 200 {
			t.Fatalf("code = %d (%s)", got.GetCode(), got.GetMessage())
		}
	}
	stored, _, err := h.get()
	if err != nil {
		t.Fatal(err)
	}
	if stored.GetMetadata().GetDeletionGracePeriodSeconds() != 7 {
		t.Errorf("grace = %d, want the pod's 7", stored.GetMetadata().GetDeletionGracePeriodSeconds())
	}
	c := podutil.PodCondition(stored, "DisruptionTarget")
	if c.GetStatus() != "True" || c.GetReason() != "PreemptionByScheduler" ||
		c.GetMessage() != "default-scheduler: preempting to accommodate a higher priority pod" {
		t.Errorf("DisruptionTarget = %v", c)
	}
	terms := h.msgs(bus.StreamPods, bus.SubjPodTerminate("n1"))
	if len(terms) != 1 {
		t.Fatalf("termination messages = %d, want 1", len(terms))
	}
	if r := bustest.Decode(t, terms[0], &pb.PodTermination{}).GetReason(); r != "Preempted" {
		t.Errorf("termination reason = %q", r)
	}
}

// A delete with reason TaintManagerEviction (the node lifecycle controller's) sets
// DisruptionTarget/DeletionByTaintManager, also when forced (grace 0) on an unreachable node, where the
// pod is marked before it goes.
func TestDeleteTaintEviction(t *testing.T) {
	h := start(t)
	h.put(pod("u1", bound("n1"), graceSpec(7)))
	cmd := &pb.PodCommand{Op: pb.PodCommand_OP_DELETE, Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web"}},
		PreconditionUid: "u1", Reason: podutil.ReasonTaintManagerEviction}
	if got := h.send(cmd); got.GetCode() != 200 {
		t.Fatalf("code = %d (%s)", got.GetCode(), got.GetMessage())
	}
	stored, _, err := h.get()
	if err != nil {
		t.Fatal(err)
	}
	c := podutil.PodCondition(stored, "DisruptionTarget")
	if c.GetStatus() != "True" || c.GetReason() != "DeletionByTaintManager" {
		t.Errorf("DisruptionTarget = %v", c)
	}
	cmd.GracePeriodSeconds = proto.Int64(0)
	if got := h.send(cmd); got.GetCode() != 200 {
		t.Fatalf("forced: code = %d (%s)", got.GetCode(), got.GetMessage())
	}
	if _, _, err := h.get(); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("forced eviction left the pod: %v", err)
	}
}

// A delete with reason Eviction (the eviction subresource's) sets DisruptionTarget/EvictionByEvictionAPI.
func TestDeleteAPIEviction(t *testing.T) {
	h := start(t)
	h.put(pod("u1", bound("n1"), graceSpec(7)))
	cmd := &pb.PodCommand{Op: pb.PodCommand_OP_DELETE, Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web"}},
		PreconditionUid: "u1", Reason: podutil.ReasonEviction}
	if got := h.send(cmd); got.GetCode() != 200 {
		t.Fatalf("code = %d (%s)", got.GetCode(), got.GetMessage())
	}
	stored, _, err := h.get()
	if err != nil {
		t.Fatal(err)
	}
	if c := podutil.PodCondition(stored, "DisruptionTarget"); c.GetStatus() != "True" || c.GetReason() != "EvictionByEvictionAPI" {
		t.Errorf("DisruptionTarget = %v", c)
	}
}

// Commands sent together (admission's group commit) are stored as fewer messages, and the store's
// pending messages for them too; each pod still gets its answer and exactly one pending entry.
func TestConcurrentCreatesShareStoredMessages(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	const n = 200
	answers := make(chan *pb.CommandResult, n)
	sub, err := h.conn.NC.Subscribe(bus.SubjReplies("test"), func(m *nats.Msg) {
		res := &pb.CommandResult{}
		if err := proto.Unmarshal(m.Data, res); err != nil {
			t.Error(err)
		}
		answers <- res
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	admission := bus.NewBatcher(h.conn.JS, "admission/test")
	var futures []jetstream.PubAckFuture
	for i := range n {
		p := pod(fmt.Sprintf("u%d", i))
		p.Metadata.Name = fmt.Sprintf("web-%d", i)
		f, err := admission.PublishAsync(bus.SubjPodCreate, create(p), bus.Meta{Reply: bus.SubjReply("test", fmt.Sprint(i)),
			Key: "default/" + p.Metadata.Name, PodUID: p.Metadata.Uid, Correlation: p.Internal.CorrelationId})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case res := <-answers:
			if res.GetCode() != 201 {
				t.Fatalf("answer %d %s: %s", res.GetCode(), res.GetReason(), res.GetMessage())
			}
		case <-time.After(15 * time.Second):
			t.Fatal("not every command was answered")
		}
	}

	pending := h.msgs(bus.StreamPods, bus.SubjPodPendingAll)
	seen := map[string]bool{}
	for _, m := range pending {
		pp := bustest.Decode(t, m, &pb.PendingPod{})
		uid := pp.GetPod().GetMetadata().GetUid()
		want := fmt.Sprintf("pending-%s-%d", uid, pp.GetRevision())
		if seen[uid] || m.Header.Get(bus.HdrPodUID) != uid || m.Header.Get(bus.HdrMsgID) != want || m.Header.Get(bus.HdrCorrelation) != "corr-"+uid {
			t.Fatalf("pending entry for %s (seen before: %v) has headers %v", uid, seen[uid], m.Header)
		}
		seen[uid] = true
	}
	if len(seen) != n {
		t.Fatalf("%d pods pending, want %d", len(seen), n)
	}
	st, err := h.conn.JS.Stream(ctx, bus.StreamPods)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	if c, p := info.State.Subjects[bus.SubjPodCreate], info.State.Subjects[bus.SubjPodPending]; c >= n || p >= n {
		t.Errorf("%d commands and their pending pods were stored as %d and %d messages; want fewer", n, c, p)
	}
}

// The store answers only on admission reply subjects: a command naming any other subject (a JetStream
// API call, another service's subject) is carried out but not answered there.
func TestAnswersOnlyOnReplySubjects(t *testing.T) {
	h := start(t)
	victim, err := h.conn.NC.SubscribeSync("victim.inbox")
	if err != nil {
		t.Fatal(err)
	}
	before := metrics.Counter("store.reply_refused")
	meta := bus.Meta{Reply: "victim.inbox", Key: "default/web", PodUID: "u1"}
	if err := h.pub.Publish(context.Background(), bus.SubjPodCreate, create(pod("u1")), meta); err != nil {
		t.Fatal(err)
	}
	// The next command for the same pod is handled after it, and answered on its own reply subject.
	if res := h.send(&pb.PodCommand{Op: pb.PodCommand_OP_DELETE, Pod: pod("u1")}); res.GetCode() != 200 {
		t.Fatalf("delete answered %d %s: %s", res.GetCode(), res.GetReason(), res.GetMessage())
	}
	if m, err := victim.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("the store answered on %s: %q", m.Subject, m.Data)
	}
	if got := metrics.Counter("store.reply_refused") - before; got != 1 {
		t.Errorf("store.reply_refused counted %d, want 1", got)
	}
}

// A forced delete of a pod already terminating gracefully reaches its agent: each termination request
// has its own message id, so the stream's de-duplication window does not drop the shorter one, while
// the same request sent again (a redelivered command) is still stored once.
func TestForcedDeleteAfterGracefulIsSent(t *testing.T) {
	h := start(t)
	h.put(pod("u1", bound("n1"), graceSpec(30)))
	del := func(grace *int64) *pb.CommandResult {
		return h.send(&pb.PodCommand{Op: pb.PodCommand_OP_DELETE, GracePeriodSeconds: grace,
			Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web"}}})
	}
	for range 2 { // the second graceful delete repeats the first request
		if got := del(nil); got.GetCode() != 200 {
			t.Fatalf("graceful delete: code %d", got.GetCode())
		}
	}
	if got := del(proto.Int64(0)); got.GetCode() != 200 {
		t.Fatalf("forced delete: code %d", got.GetCode())
	}
	terms := h.msgs(bus.StreamPods, bus.SubjPodTerminate("n1"))
	if len(terms) != 2 {
		t.Fatalf("termination messages = %d, want 2 (graceful, then forced)", len(terms))
	}
	for i, want := range []int64{30, 0} {
		if g := bustest.Decode(t, terms[i], &pb.PodTermination{}).GetGracePeriodSeconds(); g != want {
			t.Errorf("termination %d: grace %d, want %d", i, g, want)
		}
	}
}

// goneFirst is the pods bucket as the store sees it when the status service removes a force-deleted
// pod (its agent reported it gone) between the store's mark and the store's own delete.
type goneFirst struct {
	jetstream.KeyValue
	t    *testing.T
	once sync.Once
}

func (g *goneFirst) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	g.once.Do(func() {
		if err := g.KeyValue.Delete(ctx, key); err != nil {
			g.t.Errorf("remove %s first: %v", key, err)
		}
	})
	return g.KeyValue.Delete(ctx, key, opts...)
}

// A forced delete whose pod is removed by someone else after the store marked it is answered as the
// deletion it was, 200 with the pod, not 404.
func TestForcedDeleteOfAPodGoneMeanwhile(t *testing.T) {
	h := start(t, func(s *Service) {
		b, err := bus.OpenBuckets(context.Background(), s.conn.JS)
		if err != nil {
			t.Fatal(err)
		}
		s.pods = &goneFirst{KeyValue: b.Pods, t: t}
	})
	h.put(pod("u1", bound("n1"), graceSpec(30)))
	got := h.send(&pb.PodCommand{Op: pb.PodCommand_OP_DELETE, GracePeriodSeconds: proto.Int64(0),
		Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web"}}})
	if got.GetCode() != 200 || got.GetPod().GetMetadata().GetUid() != "u1" {
		t.Fatalf("forced delete: code %d, pod uid %q; want 200 with u1 (%s)", got.GetCode(),
			got.GetPod().GetMetadata().GetUid(), got.GetMessage())
	}
	if _, _, err := h.get(); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("pod still stored: %v", err)
	}
}

// A batch of commands stored twice (sent again in a group that de-duplication cannot recognise) is
// handled idempotently: each pod is created once, each is queued for the schedulers once, and every
// copy of a command gets the same answer.
func TestDuplicatedBatchCreatesOnce(t *testing.T) {
	h := start(t)
	reply := bus.SubjReply("test", bus.ReplyToken())
	sub, err := h.conn.NC.SubscribeSync(reply)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var batch pb.Batch
	for _, name := range []string{"web", "db"} {
		p := pod("uid-"+name, func(p *pb.Pod) { p.Metadata.Name = name })
		data, err := proto.Marshal(create(p))
		if err != nil {
			t.Fatal(err)
		}
		batch.Entries = append(batch.Entries, &pb.BatchEntry{Data: data, Headers: map[string]string{
			bus.HdrReply: reply, bus.HdrKey: "default/" + name, bus.HdrPodUID: "uid-" + name, bus.HdrMsgID: "cmd-" + name,
		}})
	}
	data, err := proto.Marshal(&batch)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // no batch id: the stream stores both copies
		msg := &nats.Msg{Subject: bus.SubjPodCreate, Data: data, Header: nats.Header{bus.HdrBatch: {"2"}, bus.HdrActor: {"admission/test"}}}
		if _, err := h.conn.JS.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	revs := map[string][]uint64{}
	for range 4 {
		m, err := sub.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("answers: %v (got %v)", err, revs)
		}
		res := &pb.CommandResult{}
		if err := proto.Unmarshal(m.Data, res); err != nil {
			t.Fatal(err)
		}
		if res.GetCode() != 201 {
			t.Fatalf("answer %d %s", res.GetCode(), res.GetMessage())
		}
		name := res.GetPod().GetMetadata().GetName()
		revs[name] = append(revs[name], res.GetRevision())
	}
	for name, r := range revs {
		if len(r) != 2 || r[0] != r[1] {
			t.Errorf("pod %s: answers with revisions %v, want two equal", name, r)
		}
	}
	// The second copy's pending messages are de-duplicated when the store groups them as it did the
	// first (the batch id derives from the entries' ids); grouped otherwise, as concurrent workers may,
	// they are stored again, with the same message ids, which the scheduler takes once.
	ids := map[string][]string{}
	for _, m := range h.msgs(bus.StreamPods, bus.SubjPodPendingAll) {
		uid := m.Header.Get(bus.HdrPodUID)
		ids[uid] = append(ids[uid], m.Header.Get(bus.HdrMsgID))
	}
	for _, uid := range []string{"uid-web", "uid-db"} {
		got := ids[uid]
		if len(got) == 0 || len(got) > 2 || (len(got) == 2 && got[0] != got[1]) {
			t.Errorf("pod.pending messages of %s: ids %v, want one, or the same one twice", uid, got)
		}
	}
	if len(ids) != 2 {
		t.Errorf("pod.pending messages for %d pods, want 2: %v", len(ids), ids)
	}
}
