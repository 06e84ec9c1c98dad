package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/natsauth"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// podbus cluster, with the reader's credential against an in-process up, counts the Ready and NotReady
// nodes, the pods by phase, the parked messages and the scheduler replicas, and lists the pipeline's
// consumers.
func TestClusterSummary(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := up.Config{DataDir: t.TempDir(), NATSPort: -1, APIAddr: "127.0.0.1:0", Nodes: 3, Schedulers: 2,
		Runtime: up.RuntimeFake, NATSAuth: true, RegistryAddr: "off", NATSMonitor: ""}
	cl, err := up.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := cl.Wait(); err != nil {
			t.Errorf("cluster stopped with: %v", err)
		}
	}()
	admin, err := (&natsFlags{creds: cl.NATSCreds(natsauth.RoleAdmin), ca: cl.NATSCA}).options()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := bus.Connect(ctx, cl.NATSURL, "test-admin", admin...)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	// A node without an agent has no Ready condition: NotReady. A message on dead.> is parked.
	nodes, err := ac.JS.KeyValue(ctx, bus.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Create(ctx, nodes, bus.NodeKey("ghost"), &pb.Node{Metadata: &pb.ObjectMeta{Name: "ghost"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.JS.Publish(ctx, bus.SubjDeadPrefix+"pod.test", []byte("x")); err != nil {
		t.Fatal(err)
	}
	client := cl.HTTPClient()
	for i := range 4 {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p%d"},"spec":{"containers":[{"name":"c","image":"podbus/demo-web"}]}}`, i)
		resp, err := client.Post(cl.APIURL+"/api/v1/namespaces/default/pods", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create pod p%d: %s", i, resp.Status)
		}
	}

	reader, err := (&natsFlags{creds: cl.NATSCreds(natsauth.RoleReader), ca: cl.NATSCA}).options()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := bus.Connect(ctx, cl.NATSURL, "test-reader", reader...)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var s clusterSummary
	bustest.Eventually(t, 30*time.Second, func() bool {
		if s, err = readCluster(ctx, rc.NC, rc.JS, 1500*time.Millisecond); err != nil {
			t.Fatalf("readCluster: %v", err)
		}
		return s.Pods["Running"] == 4 && len(s.Schedulers) == 2
	}, "4 pods Running and 2 schedulers")
	if s.Nodes != 4 || s.NodesReady != 3 || s.Parked != 1 || len(s.Pods) != 1 {
		t.Errorf("nodes %d (%d Ready), pods %v, parked %d; want 4 (3 Ready), 4 Running, 1", s.Nodes, s.NodesReady, s.Pods, s.Parked)
	}
	var out bytes.Buffer
	s.print(&out)
	for _, want := range []string{"nodes       3 Ready, 1 NotReady, 4 total", "pods        4 total: 4 Running", "schedulers  2 alive",
		"parked      1 on dead.>", "1 dead.pod.test", "PODS       " + bus.ConsumerStore, "PODS       " + bus.ConsumerBinder, "agents (1)", "scheduler-g* (8)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
