package binder

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/freeport"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A backlog of decisions for few nodes, two replicas: decisions are committed a node's group at a time
// (reservations in atomic batches or one after another), nodes fill exactly to their allocatable, each
// pod is bound at most once and the rest go back to the schedulers.
func TestGroupedDecisions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mode        batchMode
		wantBatches bool
	}{
		{"one compare-and-set after another", batchSequential, false},
		{"atomic batches", batchAtomic, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t)
			opt := func(s *Service) { s.batches = tc.mode }
			allocatable := map[string]*pb.Resources{}
			var nodes []string
			for i := 1; i <= 2; i++ {
				n := node(fmt.Sprint("n", i), "2", true) // room for 10 pods of 200m
				h.addNode(n)
				nodes = append(nodes, n.GetMetadata().GetName())
				allocatable[n.GetMetadata().GetName()] = podutil.NodeAllocatable(n)
			}
			inv := h.watchInvariants(allocatable)
			var pods []*pb.Pod
			for i := range 30 {
				p := pod(fmt.Sprint("u", i), fmt.Sprint("p", i), "200m")
				h.addPod(p)
				pods = append(pods, p)
				d := decision(p.GetMetadata().GetUid(), p.GetMetadata().GetName(), nodes[i%2])
				h.publishDecision(d, "sched-"+d.GetUid())
			}
			batched := metrics.Counter("binder.batched_reservations")
			h.run("b1", opt)
			h.run("b2", opt)
			h.quiesce()
			inv.check(t)
			if bound := h.checkFinal(nodes, pods); bound != 20 {
				t.Errorf("%d pods bound; want 20 (2 nodes x 10)", bound)
			}
			if requeued := len(h.msgs(bus.StreamPods, bus.PendingSubject(""))); requeued == 0 {
				t.Errorf("no pod sent back to the schedulers")
			}
			if got := metrics.Counter("binder.batched_reservations") > batched; got != tc.wantBatches {
				t.Errorf("reservations made in atomic batches: %v, want %v", got, tc.wantBatches)
			}
		})
	}
}

// A stream that refuses atomic batches (provisioned by an older podbus) costs a group nothing but the
// batch: its reservations go one after another, and batches are not tried again for a while.
func TestAtomicBatchRefused(t *testing.T) {
	h := setup(t)
	h.addNode(node("n1", "2", true)) // room for 10 pods of 200m
	s := h.service("b1")
	s.batches = batchAtomic
	ctx := context.Background()
	st, err := h.conn.JS.Stream(ctx, bus.KVStream(bus.BucketAlloc))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := h.conn.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var ds []nodeDecision
	var pods []*pb.Pod
	for i := range 12 {
		p := pod(fmt.Sprint("u", i), fmt.Sprint("p", i), "200m")
		h.addPod(p)
		pods = append(pods, p)
		ds = append(ds, nodeDecision{d: decision(p.GetMetadata().GetUid(), p.GetMetadata().GetName(), "n1"), seq: uint64(i + 1)})
	}
	for i, err := range s.decideNode(ctx, ds) {
		if err != nil {
			t.Errorf("decision %d: %v", i, err)
		}
	}
	if bound := h.checkFinal([]string{"n1"}, pods); bound != 10 {
		t.Errorf("%d pods bound; want 10", bound)
	}
	if s.atomicBatch(len(ds)) {
		t.Error("atomic batches still tried right after the stream refused one")
	}
}

// At R3 too, where reservations go in atomic batches: two replicas, a backlog of decisions for two
// nodes, and nodes fill exactly to their allocatable with each pod bound at most once.
func TestGroupedDecisionsR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server cluster")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := benchServers(t, 3)
	connect := func(name string) *bus.Conn {
		c, err := bus.Connect(ctx, url, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.NC.Close)
		return c
	}
	conn := connect("test")
	if err := bus.Provision(ctx, conn.JS, bus.Options{Replicas: 3, NoAudit: true}); err != nil {
		t.Fatal(err)
	}
	bk, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: url, conn: conn, b: bk, pub: bus.NewPublisher(conn.JS, "scheduler/test")}
	allocatable := map[string]*pb.Resources{}
	var nodes []string
	for i := 1; i <= 2; i++ {
		n := node(fmt.Sprint("n", i), "2", true) // room for 10 pods of 200m
		h.addNode(n)
		nodes = append(nodes, n.GetMetadata().GetName())
		allocatable[n.GetMetadata().GetName()] = podutil.NodeAllocatable(n)
	}
	inv := h.watchInvariants(allocatable)
	var pods []*pb.Pod
	for i := range 30 {
		p := pod(fmt.Sprint("u", i), fmt.Sprint("p", i), "200m")
		h.addPod(p)
		pods = append(pods, p)
		d := decision(p.GetMetadata().GetUid(), p.GetMetadata().GetName(), nodes[i%2])
		h.publishDecision(d, "sched-"+d.GetUid())
	}
	batched := metrics.Counter("binder.batched_reservations")
	var done []chan error
	for _, id := range []string{"b1", "b2"} {
		s, err := New(Config{ID: id}, connect(id))
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan error, 1)
		go func() { ch <- s.Run(ctx) }()
		done = append(done, ch)
	}
	h.quiesce()
	cancel()
	for _, ch := range done {
		if err := <-ch; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	inv.check(t)
	if bound := h.checkFinal(nodes, pods); bound != 20 {
		t.Errorf("%d pods bound; want 20 (2 nodes x 10)", bound)
	}
	if metrics.Counter("binder.batched_reservations") == batched {
		t.Error("no reservation made in an atomic batch at R3")
	}
}

// BenchmarkDecisions measures the binder from a backlog of decisions to every pod bound: 1,000 pods on
// 20 nodes, on one server and on three at R3, decided one by one or in groups per node whose
// reservations go one after another or in one atomic batch.
func BenchmarkDecisions(b *testing.B) {
	modes := []struct {
		name        string
		perDecision bool
		batches     batchMode
	}{
		{"one-by-one", true, batchAuto},
		{"grouped,sequential", false, batchSequential},
		{"grouped,atomic", false, batchAtomic},
	}
	for _, replicas := range []int{1, 3} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("R%d,%s", replicas, m.name), func(b *testing.B) {
				for range b.N {
					benchDecisions(b, replicas, func(s *Service) { s.perDecision, s.batches = m.perDecision, m.batches }, 20, 1000)
				}
			})
		}
	}
}

func benchDecisions(b *testing.B, replicas int, opt func(*Service), nodes, pods int) {
	b.StopTimer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := benchServers(b, replicas)
	connect := func(name string) *bus.Conn {
		c, err := bus.Connect(ctx, url, name)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.NC.Close)
		return c
	}
	conn := connect("bench")
	if err := bus.Provision(ctx, conn.JS, bus.Options{Replicas: replicas, NoAudit: true}); err != nil {
		b.Fatal(err)
	}
	bk, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		b.Fatal(err)
	}
	for i := range nodes {
		n := node(fmt.Sprint("n", i), "100", true)
		n.Status.Allocatable["pods"] = "1000"
		if _, err := bus.Create(ctx, bk.Nodes, bus.NodeKey(n.GetMetadata().GetName()), n); err != nil {
			b.Fatal(err)
		}
	}
	pub := bus.NewPublisher(conn.JS, "scheduler/bench")
	for i := range pods {
		p := pod(fmt.Sprint("u", i), fmt.Sprint("p", i), "10m")
		if _, err := bus.Create(ctx, bk.Pods, bus.PodKey("default", p.GetMetadata().GetName()), p); err != nil {
			b.Fatal(err)
		}
		d := decision(p.GetMetadata().GetUid(), p.GetMetadata().GetName(), fmt.Sprint("n", i%nodes))
		if err := pub.Publish(ctx, bus.SubjPodScheduled, d, bus.Meta{MsgID: "d-" + d.GetUid()}); err != nil {
			b.Fatal(err)
		}
	}
	s, err := New(Config{ID: "bench"}, connect("binder"))
	if err != nil {
		b.Fatal(err)
	}
	opt(s)
	st, err := conn.JS.Stream(ctx, bus.StreamPods)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	cpu0 := cpuTime(b)
	b.StartTimer()
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter("pod.bound.>"))
		var bound uint64
		if err == nil {
			for _, n := range info.State.Subjects {
				bound += n
			}
		}
		if bound >= uint64(pods) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d pods bound within two minutes", bound, pods)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(pods), "cpu-µs/pod")
	cancel()
	<-done
}

// cpuTime is the CPU time the process used so far (nats-servers included).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchServers starts n nats-servers, clustered when more than one, and returns their client URLs.
func benchServers(b testing.TB, n int) string {
	if n == 1 {
		_, url := bustest.Server(b)
		return url
	}
	ports := make([]int, n)
	for i := range ports {
		p, err := freeport.Pick()
		if err != nil {
			b.Fatal(err)
		}
		ports[i] = p
	}
	var urls []string
	for i := range n {
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
			}
		}
		srv, err := bus.RunServer(bus.ServerConfig{Port: -1, StoreDir: b.TempDir(), Name: fmt.Sprint("s", i),
			ClusterName: "bench", ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Shutdown)
		urls = append(urls, srv.ClientURL())
	}
	return strings.Join(urls, ",")
}
