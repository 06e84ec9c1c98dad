package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/services/admission"
	"github.com/podbus/podbus/services/binder"
	"github.com/podbus/podbus/services/scheduler"
	"github.com/podbus/podbus/services/status"
	"github.com/podbus/podbus/services/store"
)

// proc is one service "process": its own connection, killed without any goodbye.
type proc struct {
	cancel context.CancelFunc
	conn   *bus.Conn
	done   chan struct{} // closed when Run returned, so kill may be called more than once
}

func startProc(t *testing.T, url, name string, mk func(*bus.Conn) (interface{ Run(context.Context) error }, error)) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := bus.Connect(ctx, url, name)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := mk(conn)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cancel: cancel, conn: conn, done: make(chan struct{})}
	go func() { _ = svc.Run(ctx); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

// kill drops the connection first, so nothing more the service does reaches NATS (no acks, no publishes),
// as if the process died, then stops its goroutines.
func (p *proc) kill() {
	p.conn.NC.Close()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
}

// While pods flow, the store, the scheduler and the binder each die once at a different moment and come
// back: every pod still ends Ready, bound exactly once.
func TestCrashAndRestartLosesNothing(t *testing.T) {
	cl, conn := startCluster(t, up.Config{Nodes: 4, NodeCPU: "64", NodeMemory: "256Gi", MaxPods: 500, NoServices: true, StartDelay: 2 * time.Millisecond})
	url := cl.NATSURL
	mkStore := func(c *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return store.New(store.Config{ID: "store"}, c)
	}
	mkSched := func(c *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return scheduler.New(scheduler.Config{ID: "sched"}, c)
	}
	mkBinder := func(c *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return binder.New(binder.Config{ID: "binder"}, c)
	}
	startProc(t, url, "status", func(c *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return status.New(status.Config{ID: "status"}, c)
	})
	var api *admission.Service
	apiCfg := admission.Config{ID: "api", Addr: "127.0.0.1:0", ReplyTimeout: 2 * time.Second}
	client := apiTLS(t, &apiCfg, 30*time.Second)
	startProc(t, url, "admission", func(c *bus.Conn) (interface{ Run(context.Context) error }, error) {
		var err error
		api, err = admission.New(apiCfg, c)
		return api, err
	})
	procs := map[string]*proc{
		"store":     startProc(t, url, "store", mkStore),
		"scheduler": startProc(t, url, "scheduler", mkSched),
		"binder":    startProc(t, url, "binder", mkBinder),
	}
	makers := map[string]func(*bus.Conn) (interface{ Run(context.Context) error }, error){
		"store": mkStore, "scheduler": mkSched, "binder": mkBinder,
	}
	if err := up.WaitNodes(context.Background(), conn, 4); err != nil {
		t.Fatal(err)
	}
	var apiURL string
	deadline := time.Now().Add(10 * time.Second)
	for apiURL == "" && time.Now().Before(deadline) {
		apiURL = api.URL()
		time.Sleep(10 * time.Millisecond)
	}

	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	codes := make([]int, n)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			// 201, or 504 when the store was down: the command is durable either way.
			codes[i], _ = post(t, client, apiURL, "default", podJSON("default", fmt.Sprintf("c-%d", i), "10m", "16Mi"))
			time.Sleep(5 * time.Millisecond) // pace the submissions so the crashes land mid-flow
		}
	}()
	// Kill each once, at different moments, and bring it back.
	for i, name := range []string{"store", "scheduler", "binder"} {
		time.Sleep(time.Duration(300+150*i) * time.Millisecond)
		procs[name].kill()
		time.Sleep(200 * time.Millisecond)
		procs[name] = startProc(t, url, name, makers[name])
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusCreated && c != http.StatusGatewayTimeout {
			t.Fatalf("pod %d: HTTP %d", i, c)
		}
	}
	all := waitAll(t, conn, n, 2*time.Minute, isReady)
	for i := 0; i < n; i++ {
		if p := all[fmt.Sprintf("default/c-%d", i)]; p == nil || !isReady(p) {
			t.Errorf("pod c-%d is not ready: %v", i, p.GetStatus())
		}
	}
	bound := boundNodes(t, conn)
	for _, p := range all {
		if nodes := bound[p.GetMetadata().GetUid()]; len(nodes) != 1 {
			t.Errorf("pod %s bound to %v", p.GetMetadata().GetName(), nodes)
		}
	}
	checkInvariants(t, conn)
}
