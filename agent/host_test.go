package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/status"
)

// newHostEnv starts a server with the status service, for hosts that connect to it themselves.
func newHostEnv(t *testing.T) (*server.Server, *env) {
	t.Helper()
	srv, conn := bustest.Start(t)
	b, err := bus.OpenBuckets(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, conn: conn, pods: b.Pods, nodes: b.Nodes, pub: bus.NewPublisher(conn.JS, "test/"+t.Name())}
	svc, err := status.New(status.Config{ID: "s1"}, conn)
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, svc.Run)
	return srv, e
}

// Simulated nodes many to a process: every node registers and runs the pods bound to it, while the
// consumers on PODS and KV_pods grow with the hosts (processes), not with the nodes. 1,500 nodes in one
// host is more than nats-server's default cap of 1,000 consumers per stream.
func TestHostRunsManyNodes(t *testing.T) {
	tests := []struct {
		name  string
		hosts int
		nodes int // per host
	}{
		{"few nodes, exact filters", 1, 3},
		{"two hosts, shared filters", 2, agent.MaxExactFilterNodes + 6},
		{"beyond the consumer cap", 1, 1500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, e := newHostEnv(t)
			conn := e.conn

			var names []string
			for h := range tt.hosts {
				// Each host on a connection of its own, like a process.
				hconn := bustest.Conn(t, srv.ClientURL(), fmt.Sprintf("host-%d", h))
				var agents []*agent.Agent
				for i := range tt.nodes {
					name := fmt.Sprintf("h%d-n%d", h, i)
					cidr := fmt.Sprintf("10.%d.%d.0/24", 42+h, i%256)
					rt, err := fake.New(fake.Config{PodCIDR: cidr})
					if err != nil {
						t.Fatal(err)
					}
					a, err := agent.New(agent.Config{Node: name, PodCIDR: cidr, HeartbeatInterval: time.Minute}, hconn, rt)
					if err != nil {
						t.Fatal(err)
					}
					agents = append(agents, a)
					names = append(names, name)
				}
				host, err := agent.NewHost(agent.HostConfig{Name: fmt.Sprintf("host-%d", h)}, hconn, agents...)
				if err != nil {
					t.Fatal(err)
				}
				e.run(t, host.Run)
			}

			bustest.Eventually(t, 2*time.Minute, func() bool { return countKeys(t, e.nodes) == len(names) },
				"%d nodes registered", len(names))

			// Pods on nodes spread over every host, and one for a node no host runs: acknowledged
			// untouched by every host, so their consumers drain.
			const spread = 12
			var pods []*pb.Pod
			for i := range spread {
				n := names[i*len(names)/spread]
				p := newPod(fmt.Sprintf("p%d", i))
				p.Spec.NodeName = n
				pods = append(pods, p)
				e.createOn(p, n)
			}
			stray := newPod("stray")
			stray.Spec.NodeName = "elsewhere"
			e.createOn(stray, "elsewhere")
			for _, p := range pods {
				e.until(p, "running", isRunningReady)
			}
			for h := range tt.hosts {
				durable := bus.ConsumerAgentHost(fmt.Sprintf("host-%d", h))
				bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamPods, durable) }, "%s drained", durable)
			}

			agentConsumers := 0
			for _, c := range consumerNames(t, conn, bus.StreamPods) {
				if strings.HasPrefix(c, "agent") {
					agentConsumers++
				}
			}
			if agentConsumers != tt.hosts {
				t.Errorf("agent consumers on %s = %d, want one per host (%d)", bus.StreamPods, agentConsumers, tt.hosts)
			}
			// Each host read the pods bucket once, through a consumer it removed afterwards.
			if n := len(consumerNames(t, conn, bus.KVStream(bus.BucketPods))); n > tt.hosts {
				t.Errorf("consumers on %s = %d, want at most %d", bus.KVStream(bus.BucketPods), n, tt.hosts)
			}
		})
	}
}

// createOn stores the pod and binds it to node as the binder would.
func (e *env) createOn(p *pb.Pod, node string) {
	e.t.Helper()
	ctx := context.Background()
	rev, err := bus.Create(ctx, e.pods, bus.PodKey(p.Metadata.Namespace, p.Metadata.Name), p)
	if err != nil {
		e.t.Fatal(err)
	}
	err = e.pub.Publish(ctx, bus.SubjPodBound(node), &pb.PodBinding{Pod: p, Revision: rev, Node: node},
		e.meta(p, "bound-"+p.Metadata.Uid))
	if err != nil {
		e.t.Fatal(err)
	}
}

func countKeys(t *testing.T, kv jetstream.KeyValue) int {
	t.Helper()
	keys, err := kv.ListKeys(context.Background())
	if err != nil {
		return 0
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	return n
}

func consumerNames(t *testing.T, conn *bus.Conn, stream string) []string {
	t.Helper()
	st, err := conn.JS.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	names := st.ConsumerNames(context.Background())
	for n := range names.Name() {
		out = append(out, n)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A shared consumer starts at the end of the stream: a pod bound to a node before its host first ran is
// started from the store, a binding whose pod left the store is not replayed, and after a restart of
// the host the pods bound meanwhile start and the running ones are re-adopted, each exactly once.
func TestHostStartsPodsBoundBeforeItsConsumer(t *testing.T) {
	srv, e := newHostEnv(t)

	names := []string{"hn0", "hn1", "hn2"}
	rts := map[string]*fake.Runtime{}
	for i, n := range names {
		rt, err := fake.New(fake.Config{PodCIDR: fmt.Sprintf("10.42.%d.0/24", i)})
		if err != nil {
			t.Fatal(err)
		}
		rts[n] = rt
	}
	hconn := bustest.Conn(t, srv.ClientURL(), "host")
	startHost := func() func() {
		var agents []*agent.Agent
		for i, n := range names {
			a, err := agent.New(agent.Config{Node: n, PodCIDR: fmt.Sprintf("10.42.%d.0/24", i), HeartbeatInterval: time.Minute}, hconn, rts[n])
			if err != nil {
				t.Fatal(err)
			}
			agents = append(agents, a)
		}
		h, err := agent.NewHost(agent.HostConfig{Name: "host"}, hconn, agents...)
		if err != nil {
			t.Fatal(err)
		}
		return e.run(t, h.Run)
	}
	durable := bus.ConsumerAgentHost("host")

	early := newPod("early")
	early.Spec.NodeName = "hn0"
	e.createOn(early, "hn0")
	// Bound and deleted long ago: its binding is still in the stream, the pod no longer in the store.
	old := newPod("old")
	old.Spec.NodeName = "hn1"
	if err := e.pub.Publish(context.Background(), bus.SubjPodBound("hn1"), &pb.PodBinding{Pod: old, Revision: 1, Node: "hn1"},
		e.meta(old, "bound-"+old.Metadata.Uid)); err != nil {
		t.Fatal(err)
	}

	stop := startHost()
	e.until(early, "running", isRunningReady)
	later := newPod("later")
	later.Spec.NodeName = "hn1"
	e.createOn(later, "hn1")
	e.until(later, "running", isRunningReady)
	bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamPods, durable) }, "%s drained", durable)
	if n := rts["hn1"].Running(); n != 1 {
		t.Errorf("hn1 runs %d containers, want 1 (the binding of a pod gone from the store was replayed)", n)
	}

	stop()
	meanwhile := newPod("meanwhile")
	meanwhile.Spec.NodeName = "hn0"
	e.createOn(meanwhile, "hn0")
	seq := e.get(early).GetInternal().GetReportSeq()
	startHost()
	e.until(meanwhile, "running", isRunningReady)
	e.until(early, "re-adopted and reported", func(q *pb.Pod) bool {
		return q.GetInternal().GetReportSeq() > seq && isRunningReady(q)
	})
	bustest.Eventually(t, wait, func() bool { return e.drained(bus.StreamPods, durable) }, "%s drained", durable)
	if n := rts["hn0"].Running(); n != 2 {
		t.Errorf("hn0 runs %d containers, want 2", n)
	}
}

// A host of simulated nodes estimates its running pods' usage and reports all its nodes on its pool's
// subject, every interval, each pod with its own containers.
func TestHostReportsEstimatedUsage(t *testing.T) {
	srv, e := newHostEnv(t)
	hconn := bustest.Conn(t, srv.ClientURL(), "host-u")
	var agents []*agent.Agent
	for i := range 2 {
		cidr := fmt.Sprintf("10.77.%d.0/24", i)
		rt, err := fake.New(fake.Config{PodCIDR: cidr})
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(agent.Config{Node: fmt.Sprintf("u%d", i), PodCIDR: cidr, HeartbeatInterval: time.Minute,
			UsageInterval: 100 * time.Millisecond}, hconn, rt)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	reports := e.usageReports(bus.SubjUsagePool("host-u"))
	host, err := agent.NewHost(agent.HostConfig{Name: "host-u"}, hconn, agents...)
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, host.Run)

	want := map[string]string{} // pod -> node/containers
	for i, node := range []string{"u0", "u0", "u1"} {
		p := newPod(fmt.Sprintf("use%d", i))
		want[p.Metadata.Name] = node + "/app"
		if i == 1 {
			side := proto.Clone(p.Spec.Containers[0]).(*pb.Container)
			side.Name = "side"
			p.Spec.Containers = append(p.Spec.Containers, side)
			want[p.Metadata.Name] = node + "/app,side"
		}
		p.Spec.NodeName = node
		e.createOn(p, node)
	}
	// Two reports in a row that list every pod as started: the second is made in the first's buffers.
	seen := 0
	deadline := time.After(wait)
	for seen < 2 {
		select {
		case r := <-reports:
			got := map[string]string{}
			for _, n := range r.Nodes {
				for _, p := range n.Pods {
					var names []string
					for _, c := range p.Containers {
						names = append(names, c.Name)
						if c.CPUNanoCores == 0 || c.MemoryBytes == 0 {
							t.Errorf("pod %s container %s: no usage %+v", p.Name, c.Name, c)
						}
					}
					got[p.Name] = n.Name + "/" + strings.Join(names, ",")
				}
			}
			if len(got) < len(want) {
				continue // not every pod running yet
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("report (-want +got):\n%s", d)
			}
			seen++
		case <-deadline:
			t.Fatalf("no report listing every pod (%d seen)", seen)
		}
	}
}
