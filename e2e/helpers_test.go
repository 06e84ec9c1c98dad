// Package e2e tests the whole pipeline: every service, simulated nodes, the API and (in kubectl_test.go)
// the real kubectl, on an embedded nats-server per test.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/internal/pki"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/admission"
	"github.com/podbus/podbus/services/binder"
)

// startCluster brings up a whole podbus for t.
func startCluster(t *testing.T, cfg up.Config) (*up.Cluster, *bus.Conn) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.APIAddr == "" && !cfg.NoServices {
		cfg.APIAddr = "127.0.0.1:0"
	}
	cfg.NATSPort = -1
	cl, err := up.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := cl.Wait(); err != nil {
			t.Errorf("cluster stopped with: %v", err)
		}
	})
	if cfg.NATSAuth {
		return cl, natsConn(t, cl, natsauth.RoleAdmin, "e2e-observer", nil)
	}
	return cl, bustest.Conn(t, cl.NATSURL, "e2e-observer")
}

// natsConn connects to a cluster started with NATSAuth as role, over TLS; errs, when set, receives the
// connection's asynchronous errors (permission violations).
func natsConn(t *testing.T, cl *up.Cluster, role, name string, errs chan<- error) *bus.Conn {
	t.Helper()
	opts, _, err := natsauth.ClientOptions(cl.NATSCreds(role), cl.NATSCA)
	if err != nil {
		t.Fatal(err)
	}
	if errs != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, cl.NATSURL, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.NC.Close)
	return c
}

// apiClient speaks to the cluster's API as its admin, over TLS, with the given timeout.
func apiClient(cl *up.Cluster, timeout time.Duration) *http.Client {
	c := cl.HTTPClient()
	c.Timeout = timeout
	return c
}

// apiTLS gives an API started outside `up` a CA and serving certificate of the test's, and returns a
// client of its administrator.
func apiTLS(t *testing.T, cfg *admission.Config, timeout time.Duration) *http.Client {
	t.Helper()
	ca, err := pki.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLSCertFile, cfg.TLSKeyFile, err = ca.Serving(); err != nil {
		t.Fatal(err)
	}
	cfg.ClientCAFile = ca.CertFile()
	admin, err := ca.IssueClient(up.AdminUser, up.AdminGroup)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{admin}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

func podJSON(ns, name, cpu, mem string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q,"labels":{"app":"e2e"}},`+
		`"spec":{"containers":[{"name":"app","image":"example.local/app:1","resources":{"requests":{"cpu":%q,"memory":%q}}}]}}`,
		name, ns, cpu, mem)
}

// post creates a pod through the API and returns the HTTP status.
func post(t *testing.T, client *http.Client, api, ns string, body []byte) (int, string) {
	t.Helper()
	resp, err := client.Post(fmt.Sprintf("%s/api/v1/namespaces/%s/pods", api, ns), "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// pods reads every pod in the store.
func pods(t *testing.T, c *bus.Conn) map[string]*pb.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := c.JS.KeyValue(ctx, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*pb.Pod{}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil {
			break
		}
		p := &pb.Pod{}
		if err := proto.Unmarshal(e.Value(), p); err != nil {
			t.Fatalf("pod %s does not decode: %v", e.Key(), err)
		}
		out[p.GetMetadata().GetNamespace()+"/"+p.GetMetadata().GetName()] = p
	}
	return out
}

func isReady(p *pb.Pod) bool {
	c := podutil.PodCondition(p, podutil.PodReady)
	return c != nil && c.GetStatus() == podutil.True && p.GetStatus().GetPhase() == "Running"
}

func isUnschedulable(p *pb.Pod) bool {
	c := podutil.PodCondition(p, podutil.PodScheduled)
	return p.GetSpec().GetNodeName() == "" && c != nil && c.GetStatus() == podutil.False && c.GetReason() == "Unschedulable" && c.GetMessage() != ""
}

// boundNodes reads every pod.bound.<node> message ever published: uid -> the set of nodes it was bound to.
func boundNodes(t *testing.T, c *bus.Conn) map[string]map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := c.JS.OrderedConsumer(ctx, bus.StreamPods, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.SubjPodBoundAll}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.JS.Stream(ctx, bus.StreamPods)
	if err != nil {
		t.Fatal(err)
	}
	si, err := info.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	last := si.State.LastSeq
	for {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		var seq uint64
		for m := range batch.Messages() {
			n++
			md, _ := m.Metadata()
			seq = md.Sequence.Stream
			var b pb.PodBinding
			uid := ""
			if proto.Unmarshal(m.Data(), &b) == nil {
				uid = b.GetPod().GetMetadata().GetUid()
			}
			if uid == "" {
				continue // garbage injected by a test; the agent parks it
			}
			if out[uid] == nil {
				out[uid] = map[string]bool{}
			}
			out[uid][b.GetNode()] = true
		}
		if n == 0 || seq >= last {
			return out
		}
	}
}

// checkInvariants asserts the pipeline's promises over the whole store: no pod bound to two nodes, every
// bound pod counted once in its node's allocation, no node over its allocatable.
func checkInvariants(t *testing.T, c *bus.Conn) {
	t.Helper()
	ctx := context.Background()
	all := pods(t, c)
	for uid, nodes := range boundNodes(t, c) {
		if len(nodes) > 1 {
			t.Errorf("pod %s was bound to %d nodes: %v", uid, len(nodes), nodes)
		}
	}
	b, err := bus.OpenBuckets(ctx, c.JS)
	if err != nil {
		t.Fatal(err)
	}
	allocOf := map[string]string{} // uid -> node
	used := map[string]*pb.Resources{}
	keys, _ := b.Nodes.ListKeys(ctx)
	for key := range keys.Keys() {
		var n pb.Node
		if _, err := bus.Get(ctx, b.Nodes, key, &n); err != nil {
			t.Fatal(err)
		}
		name := n.GetMetadata().GetName()
		a, _, err := binder.ReadAllocation(ctx, b.Alloc, name)
		if err != nil {
			t.Fatal(err)
		}
		total := &pb.Resources{}
		for uid, pa := range a.GetPods() {
			if other, dup := allocOf[uid]; dup {
				t.Errorf("pod %s is allocated on %s and %s", uid, other, name)
			}
			allocOf[uid] = name
			podutil.Add(total, pa.GetRequests())
		}
		used[name] = total
		if over := podutil.Insufficient(podutil.NodeAllocatable(&n), &pb.Resources{}, total); len(over) > 0 {
			t.Errorf("node %s is overcommitted on %v: %v", name, over, total)
		}
	}
	for key, p := range all {
		node := p.GetSpec().GetNodeName()
		if node == "" {
			continue
		}
		if got := allocOf[p.GetMetadata().GetUid()]; got != node {
			t.Errorf("pod %s bound to %s but allocated on %q", key, node, got)
		}
	}
}

func waitAll(t *testing.T, c *bus.Conn, want int, timeout time.Duration, done func(*pb.Pod) bool) map[string]*pb.Pod {
	t.Helper()
	var last map[string]*pb.Pod
	deadline := time.Now().Add(timeout)
	for {
		last = pods(t, c)
		n := 0
		for _, p := range last {
			if done(p) {
				n++
			}
		}
		if n >= want {
			return last
		}
		if time.Now().After(deadline) {
			var sample []string
			for k, p := range last {
				if !done(p) && len(sample) < 5 {
					js, _ := json.Marshal(p.GetStatus())
					sample = append(sample, k+" node="+p.GetSpec().GetNodeName()+" "+string(js))
				}
			}
			t.Fatalf("after %s only %d of %d pods done; e.g. %v", timeout, n, want, sample)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runAgent runs a until the returned stop (also a cleanup of t) is called; stop waits for its Run to
// return, then calls each of then (closing what the agent used).
func runAgent(t *testing.T, a *agent.Agent, then ...func()) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("agent: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			for _, f := range then {
				f()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
