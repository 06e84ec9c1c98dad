package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/up"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/binder"
)

// hdrGarbage tags every garbage message with its kind; Park copies headers, so the parked copy says which
// garbage it is.
const hdrGarbage = "E2e-Garbage"

// garbageKinds are the payloads thrown at every pipeline subject.
var garbageKinds = []struct {
	kind string
	data []byte
}{
	// Undecodable: field number 0 is invalid in protobuf, so every message type rejects it, whatever the
	// random tail says.
	{"random-bytes", append([]byte{0x00}, randomBytes(64)...)},
	// Valid protobuf (the empty message) of every type: it decodes, but carries no uid/name/op.
	{"empty", nil},
	// Valid protobuf of the wrong type: an Event with only reason (3), message (4) and count (8). None of
	// the pipeline types gets a uid, a pod, an op or a node name out of it. (A wrong type whose fields line
	// up, e.g. a PodDeleted on pod.terminate.<node>, is undetectable by design: protobuf carries no type.)
	{"wrong-type", mustMarshal(&pb.Event{Reason: "Garbage", Message: "not a pipeline message", Count: 7})},
}

// garbageTargets are the pipeline subjects, the durable consumer that must park what arrives there, and
// the type it decodes.
var garbageTargets = []struct {
	subject, stream, durable string
	into                     func() proto.Message
}{
	{bus.SubjPodCreate, bus.StreamPods, bus.ConsumerStore, func() proto.Message { return &pb.PodCommand{} }},
	{bus.SubjPodUpdate, bus.StreamPods, bus.ConsumerStore, func() proto.Message { return &pb.PodCommand{} }},
	{bus.SubjPodDelete, bus.StreamPods, bus.ConsumerStore, func() proto.Message { return &pb.PodCommand{} }},
	{bus.SubjPodPending, bus.StreamPods, bus.ConsumerScheduler, func() proto.Message { return &pb.PendingPod{} }},
	{bus.SubjPodScheduled, bus.StreamPods, bus.ConsumerBinder, func() proto.Message { return &pb.SchedulingDecision{} }},
	{bus.SubjPodBound("node-1"), bus.StreamPods, bus.ConsumerAgentHost(up.SimHost), func() proto.Message { return &pb.PodBinding{} }},
	{bus.SubjPodTerminate("node-1"), bus.StreamPods, bus.ConsumerAgentHost(up.SimHost), func() proto.Message { return &pb.PodTermination{} }},
	// The schedulers also read pod.deleted, through an ephemeral ordered consumer that ignores what it
	// cannot decode (it only forgets assumptions); the binder's durable is the one that parks.
	{bus.SubjPodDeleted, bus.StreamPods, bus.ConsumerBinderDeleted, func() proto.Message { return &pb.PodDeleted{} }},
	{bus.SubjPodStatus("node-1"), bus.StreamStatus, bus.ConsumerStatus, func() proto.Message { return &pb.PodStatusReport{} }},
	{bus.SubjHeartbeat("node-1"), bus.StreamHeartbeats, bus.ConsumerHeartbeats, func() proto.Message { return &pb.NodeHeartbeat{} }},
}

func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2)) // seeded: a failure can be replayed
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// podOn is a small valid pod pinned to one node by nodeSelector, so that the node's agent must work.
func podOn(name, node string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"labels":{"app":"e2e"}},`+
		`"spec":{"nodeSelector":{"kubernetes.io/hostname":%q},`+
		`"containers":[{"name":"app","image":"example.local/app:1","resources":{"requests":{"cpu":"50m","memory":"32Mi"}}}]}}`,
		name, node)
}

// Bad API requests are answered with the right Kubernetes Status, garbage on every pipeline subject is
// parked on DEAD without stopping any service, and the valid pods sent around all that become Ready.
func TestBadInputIsRejectedAndLosesNothing(t *testing.T) {
	// Heartbeats every 250ms (default 10s) so that the test can see the heartbeat consumer still working
	// after its garbage.
	cl, conn := startCluster(t, up.Config{Nodes: 2, StartDelay: time.Millisecond, HeartbeatInterval: 250 * time.Millisecond})
	client := apiClient(cl, 30*time.Second)
	ctx := context.Background()
	podsURL := cl.APIURL + "/api/v1/namespaces/default/pods"

	var valid []string // every valid pod created, "default/<name>"
	createBatch := func(phase string) {
		t.Helper()
		for i := range 10 {
			name := fmt.Sprintf("bi-%s-%d", phase, i)
			node := up.NodeName(i % 2)
			if code, body := post(t, client, cl.APIURL, "default", podOn(name, node)); code != http.StatusCreated {
				t.Fatalf("create %s: HTTP %d: %s", name, code, body)
			}
			valid = append(valid, "default/"+name)
		}
	}

	createBatch("before")

	// 1. The API rejects bad requests with Kubernetes Status bodies. Nothing of them reaches the store
	// (checked at the end).
	bigPod := append([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bi-big","annotations":{"x":"`),
		bytes.Repeat([]byte("a"), 3<<20)...)
	bigPod = append(bigPod, `"}},"spec":{"containers":[{"name":"app","image":"x"}]}}`...)
	apiCases := []struct {
		name        string
		method, url string
		contentType string
		body        []byte
		code        int
		reason      metav1.StatusReason
		msg         string // the message contains it
		causeField  string // a details.causes entry has this field
		causeType   metav1.CauseType
	}{
		{
			name: "malformed JSON", method: http.MethodPost, url: podsURL, contentType: "application/json",
			body: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bi-json"`),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, msg: "cannot be handled as a Pod",
		},
		{
			name: "malformed YAML", method: http.MethodPost, url: podsURL, contentType: "application/yaml",
			body: []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [bi-yaml\n  spec: {\n"),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, msg: "yaml",
		},
		{
			name: "invalid name", method: http.MethodPost, url: podsURL, contentType: "application/json",
			body: podJSON("default", "Bad_Name", "10m", "16Mi"),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid, msg: "metadata.name",
			causeField: "metadata.name", causeType: metav1.CauseTypeFieldValueInvalid,
		},
		{
			name: "no containers", method: http.MethodPost, url: podsURL, contentType: "application/json",
			body: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bi-empty"},"spec":{"containers":[]}}`),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid, msg: "spec.containers",
			causeField: "spec.containers", causeType: metav1.CauseTypeFieldValueRequired,
		},
		{
			name: "unknown field, strict", method: http.MethodPost, url: podsURL + "?fieldValidation=Strict", contentType: "application/json",
			body: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bi-strict"},"spec":{"bogus":1,"containers":[{"name":"app","image":"x"}]}}`),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, msg: `unknown field "spec.bogus"`,
		},
		{
			name: "body over 3 MiB", method: http.MethodPost, url: podsURL, contentType: "application/json",
			body: bigPod,
			code: http.StatusRequestEntityTooLarge, reason: metav1.StatusReasonRequestEntityTooLarge, msg: "limit is",
		},
		{
			name: "duplicate name", method: http.MethodPost, url: podsURL, contentType: "application/json",
			body: podOn("bi-before-0", "node-1"),
			code: http.StatusConflict, reason: metav1.StatusReasonAlreadyExists, msg: `"bi-before-0" already exists`,
		},
		{
			name: "missing pod", method: http.MethodGet, url: podsURL + "/bi-nope",
			code: http.StatusNotFound, reason: metav1.StatusReasonNotFound, msg: `"bi-nope" not found`,
		},
		{
			name: "patch resources", method: http.MethodPatch, url: podsURL + "/bi-before-1", contentType: "application/strategic-merge-patch+json",
			body: []byte(`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"900m"}}}]}}`),
			code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid, msg: "pod updates may not change fields",
			causeField: "spec", causeType: metav1.CauseTypeForbidden,
		},
	}
	for _, tc := range apiCases {
		t.Run("api/"+tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, tc.url, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.url, err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.code, raw)
			}
			var st metav1.Status
			if err := json.Unmarshal(raw, &st); err != nil {
				t.Fatalf("body is not a Status: %v: %s", err, raw)
			}
			if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure ||
				st.Reason != tc.reason || st.Code != int32(tc.code) {
				t.Errorf("Status kind=%q apiVersion=%q status=%q reason=%q code=%d, want Status v1 Failure %q %d",
					st.Kind, st.APIVersion, st.Status, st.Reason, st.Code, tc.reason, tc.code)
			}
			if !strings.Contains(st.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", st.Message, tc.msg)
			}
			if tc.causeField == "" {
				return
			}
			if st.Details == nil {
				t.Fatalf("no details in %s", raw)
			}
			found := false
			for _, c := range st.Details.Causes {
				if c.Field == tc.causeField && c.Type == tc.causeType {
					found = true
				}
			}
			if !found {
				t.Errorf("no cause %s on field %s in %+v", tc.causeType, tc.causeField, st.Details.Causes)
			}
		})
	}

	// 2. Garbage straight onto every pipeline subject, between batches of valid pods.
	for _, g := range garbageKinds {
		for _, tg := range garbageTargets {
			if g.kind == "random-bytes" {
				if err := proto.Unmarshal(g.data, tg.into()); err == nil {
					t.Fatalf("random garbage decodes as %T: the test would not test decoding", tg.into())
				}
			}
		}
	}
	expected := map[string]int64{} // durable -> garbage messages it must park
	baseline := map[string]int64{}
	for _, tg := range garbageTargets {
		expected[tg.durable] += int64(len(garbageKinds))
		baseline[tg.durable] = metrics.Counter("malformed." + tg.durable)
	}
	type published struct {
		stream string
		seq    uint64
	}
	var garbage []published
	publishGarbage := func(kind string, data []byte) {
		t.Helper()
		for _, tg := range garbageTargets {
			msg := &nats.Msg{Subject: tg.subject, Data: data, Header: nats.Header{hdrGarbage: []string{kind}}}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ack, err := conn.JS.PublishMsg(pctx, msg)
			cancel()
			if err != nil {
				t.Fatalf("publish %s garbage on %s: %v", kind, tg.subject, err)
			}
			garbage = append(garbage, published{tg.stream, ack.Sequence})
		}
	}
	publishGarbage(garbageKinds[0].kind, garbageKinds[0].data)
	createBatch("between")
	for _, g := range garbageKinds[1:] {
		publishGarbage(g.kind, g.data)
	}
	garbageDone := time.Now()
	createBatch("after")

	// Every garbage message is parked once per consumer that reads it, with a reason.
	want := map[string]bool{} // "dead.<subject> <kind>"
	for _, tg := range garbageTargets {
		for _, g := range garbageKinds {
			want[bus.SubjDeadPrefix+tg.subject+" "+g.kind] = true
		}
	}
	parked := waitParked(t, conn, want, 30*time.Second)
	for key, msgs := range parked {
		for _, m := range msgs {
			if m.Header.Get(bus.HdrDeadReason) == "" {
				t.Errorf("%s parked without %s", key, bus.HdrDeadReason)
			}
			subj := strings.TrimPrefix(m.Subject, bus.SubjDeadPrefix)
			if got := m.Header.Get(bus.HdrDeadSubject); got != subj {
				t.Errorf("%s: %s is %q, want %q", key, bus.HdrDeadSubject, got, subj)
			}
		}
		t.Logf("%s: %d parked, reason %q", key, len(msgs), msgs[0].Header.Get(bus.HdrDeadReason))
	}
	for durable, n := range expected {
		if got := metrics.Counter("malformed."+durable) - baseline[durable]; got < n {
			t.Errorf("malformed.%s grew by %d, want at least %d", durable, got, n)
		}
	}

	// 3. Nothing lost: every valid pod becomes Ready on the node it asked for (so the agent of node-1,
	// which got garbage on both its subjects, still works), nothing rejected slipped into the store.
	if len(valid) != 30 {
		t.Fatalf("created %d valid pods, want 30", len(valid))
	}
	all := waitAll(t, conn, len(valid), 2*time.Minute, isReady)
	for _, key := range valid {
		p := all[key]
		if p == nil || !isReady(p) {
			t.Errorf("pod %s is not ready: %v", key, p.GetStatus())
			continue
		}
		if want := p.GetSpec().GetNodeSelector()["kubernetes.io/hostname"]; p.GetSpec().GetNodeName() != want {
			t.Errorf("pod %s runs on %s, asked for %s", key, p.GetSpec().GetNodeName(), want)
		}
	}
	if len(all) != len(valid) {
		for key := range all {
			if !strings.HasPrefix(key, "default/bi-before-") && !strings.HasPrefix(key, "default/bi-between-") &&
				!strings.HasPrefix(key, "default/bi-after-") {
				t.Errorf("unexpected pod in the store: %s", key)
			}
		}
	}
	// The rejected patch changed nothing.
	if cpu := all["default/bi-before-1"].GetSpec().GetContainers()[0].GetResources().GetRequests()["cpu"]; cpu != "50m" {
		t.Errorf("bi-before-1 cpu request is %q after a rejected patch, want 50m", cpu)
	}

	// Every service is still running: each durable has worked off its whole backlog (garbage is not
	// retried forever) and is still pulling; node-1's heartbeats are still applied.
	waitConsumersIdle(t, conn)
	waitHeartbeatAfter(t, conn, "node-1", garbageDone)

	// The garbage is parked on DEAD; remove it from the pipeline streams as an operator would, because
	// checkInvariants replays every pod.bound.* message and takes garbage bindings for real ones.
	for _, g := range garbage {
		st, err := conn.JS.Stream(ctx, g.stream)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMsg(ctx, g.seq); err != nil {
			t.Fatalf("remove garbage %s #%d: %v", g.stream, g.seq, err)
		}
	}

	// The delete path (store, agent termination, status gone report, binder-deleted release) works too.
	deletePod(t, client, podsURL+"/bi-after-9")
	uid := all["default/bi-after-9"].GetMetadata().GetUid()
	waitReleased(t, conn, "default/bi-after-9", uid)
	checkInvariants(t, conn)
}

// waitParked polls the DEAD stream until every "dead.<subject> <kind>" of want has a parked message.
func waitParked(t *testing.T, c *bus.Conn, want map[string]bool, timeout time.Duration) map[string][]*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		got := map[string][]*jetstream.RawStreamMsg{}
		st, err := c.JS.Stream(ctx, bus.StreamDead)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("read DEAD #%d: %v", seq, err)
			}
			key := m.Subject + " " + m.Header.Get(hdrGarbage)
			got[key] = append(got[key], m)
		}
		var missing []string
		for key := range want {
			if len(got[key]) == 0 {
				missing = append(missing, key)
			}
		}
		if len(missing) == 0 {
			// Valid pipeline messages must never be parked.
			for key, msgs := range got {
				if !want[key] {
					t.Errorf("%d unexpected message(s) parked on %s: reason %q", len(msgs), key, msgs[0].Header.Get(bus.HdrDeadReason))
					delete(got, key)
				}
			}
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, nothing parked for %v", timeout, missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitConsumersIdle waits until every pipeline durable has nothing pending or unacknowledged and has a
// pull request waiting (its service is still consuming).
func waitConsumersIdle(t *testing.T, c *bus.Conn) {
	t.Helper()
	ctx := context.Background()
	seen := map[string]bool{}
	for _, tg := range garbageTargets {
		if seen[tg.durable] {
			continue
		}
		seen[tg.durable] = true
		deadline := time.Now().Add(30 * time.Second)
		for {
			cons, err := c.JS.Consumer(ctx, tg.stream, tg.durable)
			if err != nil {
				t.Fatalf("consumer %s: %v", tg.durable, err)
			}
			info, err := cons.Info(ctx)
			if err != nil {
				t.Fatalf("consumer %s: %v", tg.durable, err)
			}
			if info.NumPending == 0 && info.NumAckPending == 0 && info.NumWaiting > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("consumer %s is not idle and pulling: pending %d, ack pending %d, redelivered %d, waiting pulls %d",
					tg.durable, info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// waitHeartbeatAfter waits until the node's lease shows a heartbeat applied after t0 (an unchanged
// status renews the lease alone, not the node record).
func waitHeartbeatAfter(t *testing.T, c *bus.Conn, node string, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	leases, err := bus.OpenBucket(ctx, c.JS, bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var l pb.NodeLease
		if _, err := bus.Get(ctx, leases, bus.LeaseKey(node), &l); err != nil {
			t.Fatal(err)
		}
		if l.GetRenewTime().AsTime().After(t0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: lease renewed at %s, no heartbeat applied after the garbage (%s)", node, l.GetRenewTime().AsTime(), t0)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func deletePod(t *testing.T, client *http.Client, url string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("delete %s: HTTP %d: %s", url, resp.StatusCode, b)
	}
}

// waitReleased waits until the pod is gone from the store and no node's allocation holds its uid.
func waitReleased(t *testing.T, c *bus.Conn, key, uid string) {
	t.Helper()
	ctx := context.Background()
	b, err := bus.OpenBuckets(ctx, c.JS)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, inStore := pods(t, c)[key]
		allocated := false
		for i := range 2 {
			if a, _, err := binder.ReadAllocation(ctx, b.Alloc, up.NodeName(i)); err == nil && a.GetPods()[uid] != nil {
				allocated = true
			}
		}
		if !inStore && !allocated {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: still in the store %v, still allocated %v", key, inStore, allocated)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
