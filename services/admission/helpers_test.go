package admission

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/pki"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// env is one admission replica on an embedded NATS server.
type env struct {
	t     *testing.T
	conn  *bus.Conn
	svc   *Service
	base  string
	store *fakeStore
	// client speaks to the API: over TLS trusting ca (nil in the insecure mode), with no credentials.
	client *http.Client
	ca     *pki.CA
}

// start runs admission (and, unless noStore, a fake store) for the test: in the insecure mode unless
// mod turns it off, then over TLS with a CA of the test's that also verifies client certificates.
func start(t *testing.T, mod func(*Config), noStore bool) *env {
	t.Helper()
	_, conn := bustest.Start(t)
	cfg := Config{ID: "a1", Addr: "127.0.0.1:0", ReplyTimeout: 5 * time.Second, InsecureHTTP: true, testUser: testUser}
	if mod != nil {
		mod(&cfg)
	}
	var ca *pki.CA
	client := &http.Client{}
	if !cfg.InsecureHTTP {
		var err error
		if ca, err = pki.LoadOrCreate(t.TempDir()); err != nil {
			t.Fatal(err)
		}
		if cfg.TLSCertFile, cfg.TLSKeyFile, err = ca.Serving(); err != nil {
			t.Fatal(err)
		}
		if cfg.ClientCAFile == "" {
			cfg.ClientCAFile = ca.CertFile()
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool()}
		client.Transport = tr
		t.Cleanup(tr.CloseIdleConnections)
	}
	svc, err := New(cfg, conn)
	if err != nil {
		t.Fatalf("New: %v", err)
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
	select {
	case <-svc.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("admission not ready")
	}
	e := &env{t: t, conn: conn, svc: svc, base: svc.URL(), client: client, ca: ca}
	if !noStore {
		e.store = runFakeStore(t, conn)
	}
	// Tests start from a ready API, as clients behind a readiness probe do.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(e.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("API not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return e
}

// Test identities: a request with hdrTestUser is that user, in system:authenticated and the groups of
// hdrTestGroups (comma-separated); any other request is the authenticated user in system:masters, so
// tests of everything but authorization are allowed everything.
const (
	hdrTestUser   = "X-Test-User"
	hdrTestGroups = "X-Test-Groups"
)

func testUser(r *http.Request, u *userInfo) *userInfo {
	if name := r.Header.Get(hdrTestUser); name != "" {
		groups := []string{groupAuthenticated}
		if g := r.Header.Get(hdrTestGroups); g != "" {
			groups = append(groups, strings.Split(g, ",")...)
		}
		return &userInfo{Name: name, Groups: groups}
	}
	if u == nil {
		return nil
	}
	return &userInfo{Name: u.Name, Groups: append(slices.Clone(u.Groups), groupMasters)}
}

// fakeStore answers pod commands like the store service: create and update with CAS (a create's pod left
// out of the answer when the sender keeps it; an update written as the store writes it,
// podutil.MergeUpdate), delete at once when unbound, else mark terminating. conflicts makes the next n
// updates answer 409 Conflict.
type fakeStore struct {
	conn      *bus.Conn
	mu        sync.Mutex
	conflicts int
	// silent: commands take effect but their answers are lost, as when a NATS server between the
	// store and the API stops.
	silent bool
	// drop: commands are lost before the store acts on them.
	drop bool
	// late: the store acts this long after a command arrives, as on a redelivery after its
	// consumer's AckWait.
	late time.Duration
	// then runs after a command's effect (or its loss), before its answer: another writer coming in
	// between.
	then     func(*pb.PodCommand)
	commands []*pb.PodCommand
	metas    []bus.Meta
}

func runFakeStore(t *testing.T, conn *bus.Conn) *fakeStore {
	fs := &fakeStore{conn: conn}
	b, err := bus.OpenBuckets(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := conn.NC.Subscribe(bus.SubjPodCommands, func(m *nats.Msg) {
		cmd := &pb.PodCommand{}
		if err := proto.Unmarshal(m.Data, cmd); err != nil {
			t.Errorf("fake store: %v", err)
			return
		}
		meta := bus.MetaFrom(m.Header)
		fs.mu.Lock()
		fs.commands = append(fs.commands, cmd)
		fs.metas = append(fs.metas, meta)
		conflict := fs.conflicts > 0 && cmd.GetOp() == pb.PodCommand_OP_UPDATE
		if conflict {
			fs.conflicts--
		}
		silent, drop, then, late := fs.silent, fs.drop, fs.then, fs.late
		fs.mu.Unlock()
		act := func() {
			var res *pb.CommandResult
			if !drop {
				res = applyCommand(b, cmd, conflict)
			}
			if then != nil {
				then(cmd)
			}
			if drop || silent {
				return
			}
			data, _ := proto.Marshal(res)
			_ = conn.NC.Publish(meta.Reply, data)
		}
		if late > 0 {
			time.AfterFunc(late, act)
			return
		}
		act()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return fs
}

// applyCommand does what the store does with cmd on the pods bucket, and returns its answer.
func applyCommand(b bus.Buckets, cmd *pb.PodCommand, conflict bool) *pb.CommandResult {
	ctx := context.Background()
	md := cmd.GetPod().GetMetadata()
	key := bus.PodKey(md.GetNamespace(), md.GetName())
	switch {
	case conflict:
		return &pb.CommandResult{Code: 409, Reason: "Conflict", Message: "conflict"}
	case cmd.GetOp() == pb.PodCommand_OP_CREATE:
		rev, err := bus.Create(ctx, b.Pods, key, cmd.GetPod())
		switch {
		case errors.Is(err, bus.ErrExists):
			return &pb.CommandResult{Code: 409, Reason: "AlreadyExists", Message: fmt.Sprintf("pods %q already exists", md.GetName())}
		case err != nil:
			return &pb.CommandResult{Code: 500, Message: err.Error()}
		case cmd.GetOmitSentPod():
			return &pb.CommandResult{Code: 201, PodAsSent: true, Revision: rev}
		}
		return &pb.CommandResult{Code: 201, Pod: cmd.GetPod(), Revision: rev}
	case cmd.GetOp() == pb.PodCommand_OP_UPDATE:
		cur := &pb.Pod{}
		_, err := bus.Get(ctx, b.Pods, key, cur)
		var rev uint64
		next := podutil.MergeUpdate(cur, cmd.GetPod())
		if err == nil {
			rev, err = bus.Update(ctx, b.Pods, key, next, cmd.GetExpectedRevision())
		}
		switch {
		case errors.Is(err, bus.ErrConflict):
			return &pb.CommandResult{Code: 409, Reason: "Conflict", Message: "conflict"}
		case err != nil:
			return &pb.CommandResult{Code: 500, Message: err.Error()}
		}
		return &pb.CommandResult{Code: 200, Pod: next, Revision: rev}
	case cmd.GetOp() == pb.PodCommand_OP_DELETE:
		cur := &pb.Pod{}
		rev, err := bus.Get(ctx, b.Pods, key, cur)
		switch {
		case errors.Is(err, bus.ErrNotFound):
			return &pb.CommandResult{Code: 404, Reason: "NotFound", Message: fmt.Sprintf("pods %q not found", md.GetName())}
		case cur.GetSpec().GetNodeName() == "":
			_ = bus.Delete(ctx, b.Pods, key, rev)
			return &pb.CommandResult{Code: 200, Pod: cur, Revision: rev}
		}
		cur.Metadata.DeletionTimestamp = timestamppb.Now()
		cur.Metadata.DeletionGracePeriodSeconds = proto.Int64(cmd.GetGracePeriodSeconds())
		rev, _ = bus.Update(ctx, b.Pods, key, cur, rev)
		return &pb.CommandResult{Code: 200, Pod: cur, Revision: rev}
	}
	return nil
}

func (fs *fakeStore) lastCommand() (*pb.PodCommand, bus.Meta) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.commands) == 0 {
		return nil, bus.Meta{}
	}
	return fs.commands[len(fs.commands)-1], fs.metas[len(fs.metas)-1]
}

// do sends one request; headers are "Key: value" strings.
func (e *env) do(method, path, body string, headers ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, data
}

// status decodes a Status answer.
func decodeStatus(t *testing.T, data []byte) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("decode status %s: %v", data, err)
	}
	return st
}

func podJSON(name string, extra ...string) string {
	spec := `{"containers":[{"name":"c","image":"nginx"}]}`
	labels := `{"app":"web"}`
	for _, x := range extra {
		k, v, _ := strings.Cut(x, "=")
		switch k {
		case "spec":
			spec = v
		case "labels":
			labels = v
		}
	}
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"labels":%s},"spec":%s}`, name, labels, spec)
}

// mustCreate creates a pod in default through the API.
func (e *env) mustCreate(name string, extra ...string) map[string]any {
	e.t.Helper()
	resp, data := e.do("POST", "/api/v1/namespaces/default/pods", podJSON(name, extra...))
	if resp.StatusCode != 201 {
		e.t.Fatalf("create %s: %d %s", name, resp.StatusCode, data)
	}
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return m
}

// setPod rewrites a stored pod as an agent/status service would.
func (e *env) setPod(ns, name string, f func(p *pb.Pod)) uint64 {
	e.t.Helper()
	b, err := bus.OpenBuckets(context.Background(), e.conn.JS)
	if err != nil {
		e.t.Fatal(err)
	}
	_, rev, err := bus.Mutate(context.Background(), b.Pods, bus.PodKey(ns, name), func() *pb.Pod { return &pb.Pod{} }, 5, func(p *pb.Pod) (bool, error) {
		f(p)
		return true, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

// watchStream opens a watch and returns a function reading the next event (with a deadline).
func (e *env) watchStream(path string, headers ...string) (next func() (string, map[string]any), stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+path, nil)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("watch %s: %d %s", path, resp.StatusCode, data)
	}
	lines := make(chan []byte, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- bytes.Clone(sc.Bytes())
		}
	}()
	next = func() (string, map[string]any) {
		e.t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				return "", nil
			}
			var ev struct {
				Type   string         `json:"type"`
				Object map[string]any `json:"object"`
			}
			if err := json.Unmarshal(l, &ev); err != nil {
				e.t.Fatalf("decode watch event %s: %v", l, err)
			}
			return ev.Type, ev.Object
		case <-time.After(10 * time.Second):
			e.t.Fatalf("no watch event on %s", path)
			return "", nil
		}
	}
	stop = func() { cancel(); resp.Body.Close() }
	e.t.Cleanup(stop)
	return next, stop
}

// get walks a decoded JSON object: get(m, "metadata", "name").
func get(m any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, _ := m.(map[string]any)
			m = mm[k]
		case int:
			l, _ := m.([]any)
			if k >= len(l) {
				return nil
			}
			m = l[k]
		}
	}
	return m
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
