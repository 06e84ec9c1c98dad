package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/natsauth"
)

// With a credential per role, the pipeline runs 100 pods to Ready while every forbidden action of every
// credential (forged status and decisions, KV writes, stream deletion and shrinking, reading another
// node's bindings) is refused by nats-server itself.
func TestNATSAuthLeastPrivilege(t *testing.T) {
	cl, admin := startCluster(t, up.Config{Nodes: 4, NodeCPU: "64", NodeMemory: "256Gi", MaxPods: 200,
		StartDelay: 2 * time.Millisecond, NATSAuth: true, AgentCreds: []string{"node-1", "solo.example"}})
	if !strings.Contains(cl.NATSCreds(natsauth.RoleStore), up.NATSCredsDir) || cl.NATSCA == "" {
		t.Fatalf("credentials at %q, CA %q", cl.NATSCreds(natsauth.RoleStore), cl.NATSCA)
	}
	client := apiClient(cl, 30*time.Second)

	// A node's agent in a process of its own, over TLS with its node's credential: its consumer, its
	// reports, its log answers all pass.
	const solo = "solo.example"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt, err := fake.New(fake.Config{StartDelay: time.Millisecond, PodCIDR: "10.99.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Node: solo, PodCIDR: "10.99.0.0/24", HeartbeatInterval: time.Second},
		natsConn(t, cl, natsauth.AgentRole(solo), "e2e-solo", nil), rt)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if code, body := post(t, client, cl.APIURL, "default", podOn("solo", solo)); code != http.StatusCreated {
		t.Fatalf("pod on %s: HTTP %d %s", solo, code, body)
	}
	const n = 100
	var wg sync.WaitGroup
	codes := make([]int, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			codes[i], _ = post(t, client, cl.APIURL, "default", podJSON("default", fmt.Sprintf("p-%03d", i), "100m", "64Mi"))
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusCreated {
			t.Fatalf("pod %d: HTTP %d", i, c)
		}
	}
	waitAll(t, admin, n+1, 2*time.Minute, isReady)
	resp, err := client.Get(cl.APIURL + "/api/v1/namespaces/default/pods/solo/log")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("logs of the pod on %s: HTTP %d", solo, resp.StatusCode)
	}
	// Exec reaches the agent with its credential; its simulated runtime refuses it.
	resp, err = client.Post(cl.APIURL+"/api/v1/namespaces/default/pods/solo/exec?command=true&stdout=true", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("exec in the pod on %s (simulated runtime): HTTP %d, want 501", solo, resp.StatusCode)
	}

	agentRole := natsauth.AgentRole("node-1")
	services := []string{natsauth.RoleAdmission, natsauth.RoleStore, natsauth.RoleScheduler, natsauth.RoleBinder,
		natsauth.RoleStatus, natsauth.RoleNamespaces, natsauth.RoleNodeLife, natsauth.RoleReader, natsauth.PoolRole(up.SimHost), agentRole}
	type action struct {
		role, what, subject string
		sub                 bool // a subscription rather than a publish
	}
	var actions []action
	for _, role := range services {
		actions = append(actions,
			action{role, "delete AUDIT", "$JS.API.STREAM.DELETE." + bus.StreamAudit, false},
			action{role, "shrink AUDIT (MaxMsgs 1)", "$JS.API.STREAM.UPDATE." + bus.StreamAudit, false},
			action{role, "delete PODS", "$JS.API.STREAM.DELETE." + bus.StreamPods, false},
			action{role, "purge AUDIT", "$JS.API.STREAM.PURGE." + bus.StreamAudit, false},
			action{role, "delete an AUDIT record", "$JS.API.STREAM.MSG.DELETE." + bus.StreamAudit, false},
		)
	}
	actions = append(actions,
		action{agentRole, "forged status for another node", bus.SubjPodStatus("node-2"), false},
		action{agentRole, "forged heartbeat for another node", bus.SubjHeartbeat("node-2"), false},
		action{agentRole, "forged SchedulingDecision", bus.SubjPodScheduled, false},
		action{agentRole, "forged binding", bus.SubjPodBound("node-1"), false},
		action{agentRole, "forged usage for another node", bus.SubjUsageNode("node-2"), false},
		action{agentRole, "usage as a pool", bus.SubjUsagePool(up.SimHost), false},
		action{agentRole, "pod command", bus.SubjPodDelete, false},
		action{agentRole, "KV write", bus.SubjKV(bus.BucketPods) + bus.PodKey("default", "p-000"), false},
		action{agentRole, "KV write (nodes)", bus.SubjKV(bus.BucketNodes) + bus.NodeKey("node-1"), false},
		action{agentRole, "KV write (leases)", bus.SubjKV(bus.BucketLeases) + bus.LeaseKey("node-1"), false},
		action{natsauth.PoolRole(up.SimHost), "KV write (leases)", bus.SubjKV(bus.BucketLeases) + bus.LeaseKey("node-1"), false},
		action{agentRole, "subscribe to another node's pod.bound", bus.SubjPodBound("node-2"), true},
		action{agentRole, "consumer on another node's bindings", "$JS.API.CONSUMER.CREATE.PODS." + bus.ConsumerAgent("node-2") + "." + bus.SubjAgent("node-2"), false},
		action{agentRole, "own consumer re-filtered to another node", "$JS.API.CONSUMER.CREATE.PODS." + bus.ConsumerAgent("node-1") + "." + bus.SubjPodBound("node-2"), false},
		action{agentRole, "own consumer unfiltered", "$JS.API.CONSUMER.CREATE.PODS." + bus.ConsumerAgent("node-1"), false},
		action{agentRole, "read the store's replies", bus.SubjReplyPrefix + ">", true},
		action{agentRole, "serve another node's exec sessions", bus.SubjStreamOpen("node-2"), true},
		action{agentRole, "read the API's frames to another node", bus.SubjStreamIns("node-2"), true},
		action{agentRole, "forged frames of another node", bus.SubjStreamOut("node-2", "s"), false},
		action{agentRole, "open exec sessions", bus.SubjStreamOpen("node-1"), false},
		action{agentRole, "read the API's inbox", natsauth.InboxPrefix(natsauth.RoleAdmission) + ".>", true},
		action{natsauth.PoolRole(up.SimHost), "forged SchedulingDecision", bus.SubjPodScheduled, false},
		action{natsauth.PoolRole(up.SimHost), "KV write", bus.SubjKV(bus.BucketPods) + bus.PodKey("default", "p-000"), false},
		action{natsauth.PoolRole(up.SimHost), "pull the store's consumer", "$JS.API.CONSUMER.MSG.NEXT.PODS." + bus.ConsumerStore, false},
		action{natsauth.RoleReader, "pod command", bus.SubjPodCreate, false},
		action{natsauth.RoleReader, "KV write", bus.SubjKV(bus.BucketPods) + bus.PodKey("default", "p-000"), false},
		action{natsauth.RoleReader, "reconfigure the store's consumer", "$JS.API.CONSUMER.CREATE.PODS." + bus.ConsumerStore + "." + bus.SubjPodCommands, false},
		action{natsauth.RoleScheduler, "forged binding", bus.SubjPodBound("node-1"), false},
		action{natsauth.RoleScheduler, "KV write", bus.SubjKV(bus.BucketPods) + bus.PodKey("default", "p-000"), false},
		action{natsauth.RoleAdmission, "forged store reply", bus.SubjReplyPrefix + "api-0.x", false},
		action{natsauth.RoleAdmission, "forged decision", bus.SubjPodScheduled, false},
		action{natsauth.RoleStore, "read the API's replies", bus.SubjReplyPrefix + ">", true},
		action{natsauth.RoleNodeLife, "KV write (pods)", bus.SubjKV(bus.BucketPods) + bus.PodKey("default", "p-000"), false},
		action{natsauth.RoleNodeLife, "pod create command", bus.SubjPodCreate, false},
		action{natsauth.RoleNodeLife, "forged binding", bus.SubjPodBound("node-1"), false},
	)
	conns := map[string]*bus.Conn{}
	errs := map[string]chan error{}
	for _, a := range actions {
		if conns[a.role] == nil {
			errs[a.role] = make(chan error, 64)
			conns[a.role] = natsConn(t, cl, a.role, "e2e-"+a.role, errs[a.role])
		}
		c := conns[a.role]
		if a.sub {
			if _, err := c.NC.SubscribeSync(a.subject); err != nil {
				t.Fatal(err)
			}
		} else if err := c.NC.Publish(a.subject, []byte(`{"name":"AUDIT","max_msgs":1}`)); err != nil {
			t.Fatal(err)
		}
		_ = c.NC.Flush()
		if err := refusal(errs[a.role], a.subject); err != nil {
			t.Errorf("%s: %s (%s): %v", a.role, a.what, a.subject, err)
		}
	}

	// What the roles may do still works on the same connections.
	for _, role := range []string{agentRole, natsauth.RoleReader} {
		if _, err := conns[role].JS.Stream(ctx, bus.StreamPods); err != nil {
			t.Errorf("%s: stream info: %v", role, err)
		}
	}

	// The audit log is whole, its limits untouched.
	st, err := admin.JS.Stream(ctx, bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.MaxMsgs != -1 || info.State.Msgs < n {
		t.Errorf("AUDIT: MaxMsgs %d, %d records", info.Config.MaxMsgs, info.State.Msgs)
	}
	// Nothing forged reached the store: every pod is still Ready.
	for _, p := range pods(t, admin) {
		if !isReady(p) {
			t.Errorf("pod %s: %s", p.GetMetadata().GetName(), p.GetStatus().GetPhase())
		}
	}
}

// refusal waits for nats-server's permissions violation naming subject.
func refusal(errs <-chan error, subject string) error {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return nil
			}
		case <-timeout:
			return errors.New("not refused")
		}
	}
}

// up makes its NATS credentials once, owner-only, and a restart on the same data directory reuses them:
// a credential handed out before still connects.
func TestNATSAuthCredentialsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := up.Config{DataDir: dir, NATSPort: -1, APIAddr: "127.0.0.1:0", Nodes: 1, NATSAuth: true}
	start := func() (*up.Cluster, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cl, err := up.Start(ctx, cfg)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		return cl, cancel
	}
	stop := func(cl *up.Cluster, cancel context.CancelFunc) {
		cancel()
		if err := cl.Wait(); err != nil {
			t.Errorf("cluster stopped with: %v", err)
		}
	}
	cl, cancel := start()
	files := map[string][]byte{}
	for _, role := range up.NATSRoles(cfg) {
		path := cl.NATSCreds(role)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, st.Mode().Perm())
		}
		files[role], _ = os.ReadFile(path)
	}
	stop(cl, cancel)

	cl, cancel = start()
	defer stop(cl, cancel)
	for role, before := range files {
		if after, _ := os.ReadFile(cl.NATSCreds(role)); !bytes.Equal(after, before) {
			t.Errorf("%s: credential replaced on restart", role)
		}
	}
	c := natsConn(t, cl, natsauth.RoleReader, "e2e-reader", nil)
	ctx, cancelInfo := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelInfo()
	if _, err := c.JS.Stream(ctx, bus.StreamAudit); err != nil {
		t.Errorf("reader after restart: %v", err)
	}

	// up's own connections are in-process and plain; a client from outside speaks TLS, and one that
	// will not is refused.
	cz, err := cl.Server().Connz(&server.ConnzOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var inProcess int
	for _, ci := range cz.Conns {
		switch {
		case ci.Name == "e2e-reader" && ci.TLSVersion == "":
			t.Errorf("external connection %s without TLS", ci.Name)
		case ci.Name != "e2e-reader" && ci.TLSVersion != "":
			t.Errorf("in-process connection %s over %s", ci.Name, ci.TLSVersion)
		case ci.Name != "e2e-reader":
			inProcess++
		}
	}
	if inProcess == 0 {
		t.Errorf("no in-process connection among %d", len(cz.Conns))
	}
	plainOpts, _, err := natsauth.ClientOptions(cl.NATSCreds(natsauth.RoleReader), "")
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(bus.PlainURL(cl.NATSURL), plainOpts...); err == nil {
		nc.Close()
		t.Error("a plain connection from outside was accepted")
	}
}
