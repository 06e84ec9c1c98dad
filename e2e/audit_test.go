package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/sched/config"
)

// TestAudit runs 300 pods (100m, 256Mi: 64 fit on one of the 6 nodes, so spreading uses 6 and packing 5) (30 of them deleted again) and one unschedulable pod, then checks the audit log:
// verify rebuilds the store exactly, and fails naming the pod when one record is removed from a copy;
// a timeline shows the seed flow in order with the right services; what-if with the default profile
// changes nothing and with MostAllocated packs the pods onto fewer nodes; the log refuses deletes.
// (A failed image pull is left out: up.Config cannot give the simulated runtime missing images.)
func TestAudit(t *testing.T) {
	dataDir := t.TempDir()
	cl, c := startCluster(t, up.Config{Nodes: 6, NodeCPU: "8", NodeMemory: "16Gi", MaxPods: 110, DataDir: dataDir})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := apiClient(cl, 15*time.Second)
	const total, deleted = 300, 30

	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if code, body := post(t, client, cl.APIURL, "default", podJSON("default", fmt.Sprintf("p-%03d", i), "100m", "256Mi")); code != http.StatusCreated {
					t.Errorf("create p-%03d: HTTP %d %s", i, code, body)
				}
			}
		}()
	}
	for i := 0; i < total; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if code, body := post(t, client, cl.APIURL, "default", podJSON("default", "huge", "1000", "1Gi")); code != http.StatusCreated {
		t.Fatalf("create huge: HTTP %d %s", code, body)
	}
	waitAll(t, c, total, 60*time.Second, isReady)
	waitAll(t, c, 1, 20*time.Second, isUnschedulable)
	for i := 0; i < deleted; i++ {
		deletePod(t, client, fmt.Sprintf("%s/api/v1/namespaces/default/pods/p-%03d", cl.APIURL, i*10))
	}
	bustest.Eventually(t, 30*time.Second, func() bool { return len(pods(t, c)) == total-deleted+1 }, "deleted pods gone")

	t.Run("verify", func(t *testing.T) {
		res, err := audit.Verify(ctx, c.JS, audit.VerifyOptions{})
		if err != nil {
			t.Fatalf("verify: %v: %v", err, res.Differences)
		}
		if res.Pods != total-deleted+1 || res.Nodes != 6 {
			t.Errorf("verify compared %d pods and %d nodes", res.Pods, res.Nodes)
		}
	})

	t.Run("verify the chain", func(t *testing.T) {
		keys, err := audit.ReadPublicKeys(filepath.Join(dataDir, audit.SealPubKeyFile))
		if err != nil {
			t.Fatalf("the sealer's public key: %v", err)
		}
		var res audit.ChainResult
		bustest.Eventually(t, 20*time.Second, func() bool {
			res, err = audit.VerifyChain(ctx, c.JS, audit.ChainOptions{PublicKeys: keys})
			if err != nil {
				t.Fatalf("verify --chain on a clean history: %v (%v)", err, res.Findings)
			}
			return res.Sealed > 0 && res.Unsealed < res.Sealed/10
		}, "the log sealed (%+v)", res)
		t.Logf("chain: %d records sealed in %d blocks, %d not yet", res.Sealed, res.Blocks, res.Unsealed)
	})

	t.Run("verify a copy with a record removed", func(t *testing.T) {
		const copyName = "AUDIT_COPY"
		s, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: copyName, Sources: []*jetstream.StreamSource{{Name: bus.StreamAudit}}})
		if err != nil {
			t.Fatal(err)
		}
		orig, err := c.JS.Stream(ctx, bus.StreamAudit)
		if err != nil {
			t.Fatal(err)
		}
		oi, err := orig.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bustest.Eventually(t, 20*time.Second, func() bool {
			si, err := s.Info(ctx)
			return err == nil && si.State.Msgs >= oi.State.Msgs
		}, "the copy has the history")
		victim := bus.SubjKV(bus.BucketPods) + bus.PodKey("default", "p-123")
		m, err := s.GetLastMsgForSubject(ctx, victim)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMsg(ctx, m.Sequence); err != nil {
			t.Fatal(err)
		}
		res, err := audit.Verify(ctx, c.JS, audit.VerifyOptions{Stream: copyName, Settle: time.Second})
		if !errors.Is(err, audit.ErrDifferences) {
			t.Fatalf("verify of the doctored copy: %v", err)
		}
		if len(res.Differences) != 1 || res.Differences[0].Key != "default/p-123" {
			t.Errorf("differences %v, want only default/p-123", res.Differences)
		}
	})

	t.Run("timeline", func(t *testing.T) {
		incs, err := audit.Timeline(ctx, c.JS, audit.TimelineOptions{Namespace: "default", Name: "p-042"})
		if err != nil {
			t.Fatal(err)
		}
		if len(incs) != 1 {
			t.Fatalf("%d incarnations", len(incs))
		}
		var b strings.Builder
		_ = audit.WriteTimeline(&b, incs)
		t.Logf("\n%s", b.String())
		want := []struct{ kind, service string }{
			{"admitted", "admission"}, {"stored", "store"}, {"queued", "store"}, {"scheduled", "scheduler"},
			{"bound", "binder"}, {"handed", "binder"}, {"ready", "status"},
		}
		next := 0
		for _, s := range incs[0].Steps {
			if next < len(want) && s.Kind == want[next].kind {
				if s.Service != want[next].service {
					t.Errorf("step %s by %q, want %s", s.Kind, s.Service, want[next].service)
				}
				next++
			}
		}
		if next != len(want) {
			t.Errorf("timeline lacks %q (or has it out of order):\n%s", want[next].kind, b.String())
		}
		if p := audit.PhasesOf(incs[0]); p.Total <= 0 || p.Scheduling <= 0 && p.Binding <= 0 {
			t.Errorf("phases %v", p)
		}
		for _, s := range incs[0].Steps {
			if s.Kind == "scheduled" && !strings.HasPrefix(s.Actor, "scheduler/") {
				t.Errorf("decision by %q", s.Actor)
			}
		}
	})

	t.Run("what-if", func(t *testing.T) {
		same, err := audit.WhatIf(ctx, c.JS, audit.WhatIfOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if same.Decisions < total+1 || same.Same != same.Decisions {
			t.Errorf("default profile: %+v", same)
		}
		again, _ := audit.WhatIf(ctx, c.JS, audit.WhatIfOptions{})
		if fmt.Sprint(again) != fmt.Sprint(same) {
			t.Errorf("not deterministic: %+v then %+v", same, again)
		}
		packed, err := audit.WhatIf(ctx, c.JS, audit.WhatIfOptions{Profile: config.Profile{Scoring: config.MostAllocated}})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_ = audit.WriteWhatIf(&b, packed)
		t.Logf("MostAllocated:\n%s", b.String())
		if packed.NodesInUseBefore != 6 || packed.NodesInUseAfter >= packed.NodesInUseBefore || packed.DifferentNode == 0 {
			t.Errorf("MostAllocated: %+v", packed)
		}
	})

	t.Run("the log cannot be altered", func(t *testing.T) {
		s, err := c.JS.Stream(ctx, bus.StreamAudit)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMsg(ctx, 1); err == nil {
			t.Error("DeleteMsg on AUDIT succeeded")
		}
		if err := s.Purge(ctx); err == nil {
			t.Error("Purge of AUDIT succeeded")
		}
	})
}
