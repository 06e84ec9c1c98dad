package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	containerdimages "github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/images"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The containerd run's pod ranges and names: apart from `podbus up`'s real node (10.244.1.0/24) and the
// agent/cri tests (10.250.x.0/24).
const (
	realPodCIDR = "10.248.1.0/24"
	barePodCIDR = "10.248.2.0/24"
	realPods    = 20 // default of --pods with --runtime containerd
)

// RealResult is the outcome of a containerd run: podbus and the bare runtime starting the same pods, one
// by one and all at once. Latencies in milliseconds; podbus's from the POST, the bare path's from the
// first runtime call.
type RealResult struct {
	Pods int `json:"pods"`
	// Podbus stages for pods started one by one (each after the previous one was Ready) and all at once.
	PodbusSequential map[string]Percentiles `json:"podbus_sequential"`
	PodbusParallel   map[string]Percentiles `json:"podbus_parallel"`
	// Bare: netns + CNI ADD + container create + task start through agent/cri's runtime.
	BareSequential Percentiles `json:"bare_sequential"`
	BareParallel   Percentiles `json:"bare_parallel"`
	// Throughput of the parallel batch, pods per second: first POST (first runtime call) to last Ready
	// (last task started).
	PodbusThroughput float64 `json:"podbus_pods_per_s"`
	BareThroughput   float64 `json:"bare_pods_per_s"`
}

// ErrLeftBehind is returned, wrapped with what was left, when a containerd run could not remove all it
// made in containerd or on the host.
var ErrLeftBehind = errors.New("loadtest: the containerd run left resources behind")

// runContainerd measures podbus on a real node against the bare containerd runtime. Without containerd
// (or root, or busybox-static) it says so in one line and returns nil, so that `make bench` goes on.
// What it made in containerd is removed however the run ends; what could not be is in the error.
func runContainerd(ctx context.Context, cfg Config, w io.Writer) (err error) {
	if err := cri.Check(ctx, cfg.ContainerdAddress, nil); err != nil {
		fmt.Fprintf(w, "loadtest --runtime containerd skipped: %v\n", err)
		return nil
	}
	img, err := images.BusyboxImage(images.DefaultBusybox)
	if err != nil {
		fmt.Fprintf(w, "loadtest --runtime containerd skipped: %v\n", err)
		return nil
	}
	if cfg.Pods <= 0 {
		cfg.Pods = realPods
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runID := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	dir, err := dataDir(cfg.DataDir, "podbus-loadtest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The image comes from a registry on loopback, as in `podbus up`; each path pulls it before it is timed.
	image, closeRegistry, err := serveImage(ctx, img)
	if err != nil {
		return err
	}
	defer closeRegistry()

	node, bareNode := "bench-"+runID, "bench-bare-"+runID
	nsPodbus, nsBare := "podbus-bench-"+runID, "podbus-bench-bare-"+runID
	defer func() {
		err = errors.Join(err, cleanupContainerd(cfg.ContainerdAddress, []string{nsPodbus, nsBare}, []string{node, bareNode}))
	}()

	pods, stopPodbus, err := startPodbus(ctx, cfg, filepath.Join(dir, "cluster"), node, nsPodbus, image, log)
	if err != nil {
		return fmt.Errorf("podbus: %w", err)
	}
	defer func() { err = errors.Join(err, stopPodbus()) }()
	bare, stopBare, err := startBare(ctx, cfg, filepath.Join(dir, "bare"), bareNode, nsBare, image, log)
	if err != nil {
		return fmt.Errorf("bare runtime: %w", err)
	}
	defer stopBare()

	// The first pod of a node pulls the image and creates the node's bridge: a warm-up on each path.
	if err := pods.one(ctx, fmt.Sprintf("ctrd-%s-warm", runID)); err != nil {
		return fmt.Errorf("podbus warm-up pod: %w", err)
	}
	if _, err := bare.one(ctx, "bare-warm"); err != nil {
		return fmt.Errorf("bare warm-up pod: %w", err)
	}
	// One by one, the two paths taking turns so that both see the same load on the machine.
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	seq, par := make([]string, cfg.Pods), make([]string, cfg.Pods)
	var bareSeq []float64
	for i := range cfg.Pods {
		seq[i], par[i] = fmt.Sprintf("ctrd-%s-seq-%d", runID, i), fmt.Sprintf("ctrd-%s-par-%d", runID, i)
		if err := pods.one(ctx, seq[i]); err != nil {
			return fmt.Errorf("podbus: %w", err)
		}
		d, err := bare.one(ctx, fmt.Sprintf("bare-seq-%d", i))
		if err != nil {
			return fmt.Errorf("bare runtime: %w", err)
		}
		bareSeq = append(bareSeq, ms(d))
	}
	// All at once: podbus's batch, then the bare one.
	res := &RealResult{Pods: cfg.Pods, BareSequential: percentiles(bareSeq)}
	if res.PodbusThroughput, err = pods.batch(ctx, par); err != nil {
		return fmt.Errorf("podbus: %w", err)
	}
	bpar := make([]string, cfg.Pods)
	for i := range bpar {
		bpar[i] = fmt.Sprintf("bare-par-%d", i)
	}
	ds, wall, err := bare.batch(ctx, bpar)
	if err != nil {
		return fmt.Errorf("bare runtime: %w", err)
	}
	res.BareParallel, res.BareThroughput = percentiles(ds), float64(len(bpar))/wall.Seconds()
	pods.t.mu.Lock()
	res.PodbusSequential, res.PodbusParallel = pods.t.stages(seq), pods.t.stages(par)
	pods.t.mu.Unlock()
	if cfg.JSON {
		return writeJSON(w, res)
	}
	printReal(w, res)
	if cfg.Verbose {
		printHandlerTimes(w)
	}
	return nil
}

// podbusBench creates pods through the API of an embedded cluster whose only node is real.
type podbusBench struct {
	api *realAPI
	t   *tracker

	mu      sync.Mutex
	created []string
}

// serveImage pushes img to a registry on loopback and returns its reference there; closeRegistry stops
// the registry.
func serveImage(ctx context.Context, img v1.Image) (image string, closeRegistry func(), err error) {
	reg, err := images.StartRegistry(ctx, "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	image = reg.Addr() + "/" + images.Busybox
	ref, err := name.ParseReference(image)
	if err == nil {
		err = remote.Write(ref, img, remote.WithContext(ctx))
	}
	if err != nil {
		reg.Close()
		return "", nil, fmt.Errorf("push %s: %w", image, err)
	}
	return image, func() { reg.Close() }, nil
}

// startPodbus starts the cluster. stop deletes every pod created through the API (the agent removes
// their sandboxes), stops the cluster, then removes through containerd whatever pods are left, as
// `podbus down --keep-data` does: all of them when the API had already stopped, as when the run is
// interrupted or the cluster failed. Its error names the node and containerd namespace left.
func startPodbus(ctx context.Context, cfg Config, dir, node, ns, image string, log *slog.Logger) (*podbusBench, func() error, error) {
	cctx, ccancel := context.WithCancel(ctx)
	cl, err := up.Start(cctx, up.Config{
		NATSPort: -1, DataDir: dir, APIAddr: "127.0.0.1:0", Nodes: 0,
		Runtime: up.RuntimeContainerd, ContainerdAddress: cfg.ContainerdAddress, RealNode: node,
		RealNodePodCIDR: realPodCIDR, ContainerdNamespace: ns, Memory: cfg.Memory, NoAudit: cfg.NoAudit, Logger: log,
		// A pressure taint on a nearly full disk would stop the run instead of timing it.
		RealNodeEvictionHard: agent.EvictionNone,
	})
	if err != nil {
		ccancel()
		return nil, nil, err
	}
	conn, err := bus.Connect(ctx, cl.NATSURL, "podbus-loadtest")
	if err != nil {
		ccancel()
		_ = cl.Wait()
		return nil, nil, err
	}
	client := cl.HTTPClient()
	client.Timeout = 30 * time.Second
	b := &podbusBench{
		api: &realAPI{url: cl.APIURL, ns: cfg.Namespace, image: image, client: client},
		t:   &tracker{pods: map[string]*podTimes{}, uids: map[string]string{}},
	}
	err = ensureNamespace(ctx, b.api.client, cl.APIURL, cfg.Namespace)
	if err != nil {
		conn.NC.Close()
		ccancel()
		_ = cl.Wait()
		return nil, nil, err
	}
	stopObserving, err := b.t.observe(ctx, conn, cfg.Namespace)
	if err != nil {
		conn.NC.Close()
		ccancel()
		_ = cl.Wait()
		return nil, nil, err
	}
	stop := func() error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		b.mu.Lock()
		created := b.created
		b.mu.Unlock()
		apiErr := b.api.deleteAll(dctx, created)
		stopObserving()
		conn.NC.Close()
		ccancel()
		_ = cl.Wait()
		// With the cluster stopped no agent starts a pod again, so the teardown is final.
		err := up.Down(dctx, up.DownConfig{DataDir: dir, ContainerdAddress: cfg.ContainerdAddress,
			ContainerdNamespace: ns, RealNodePodCIDR: realPodCIDR, KeepData: true, Logger: log})
		if err != nil {
			return fmt.Errorf("%w: pods of node %s in containerd namespace %s: %w", ErrLeftBehind, node, ns, errors.Join(apiErr, err))
		}
		if apiErr != nil {
			log.Warn("pods not deleted through the API; removed through containerd", "node", node, "err", apiErr)
		}
		return nil
	}
	return b, stop, nil
}

func (b *podbusBench) add(names ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = append(b.created, names...)
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	for _, n := range names {
		b.t.pods[n] = &podTimes{}
	}
}

// one creates a pod and waits until it is Ready.
func (b *podbusBench) one(ctx context.Context, name string) error {
	b.add(name)
	if err := b.api.create(ctx, b.t, name); err != nil {
		return err
	}
	return b.t.waitReady(ctx, name)
}

// batch creates the pods all at once, waits until all are Ready and returns the throughput: pods per
// second from the first POST to the last Ready.
func (b *podbusBench) batch(ctx context.Context, names []string) (float64, error) {
	b.add(names...)
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.api.create(ctx, b.t, n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	for _, n := range names {
		if err := b.t.waitReady(ctx, n); err != nil {
			return 0, err
		}
	}
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	var first, last time.Time
	for _, n := range names {
		p := b.t.pods[n]
		if first.IsZero() || p.sent.Before(first) {
			first = p.sent
		}
		if p.at[4].After(last) {
			last = p.at[4]
		}
	}
	return float64(len(names)) / last.Sub(first).Seconds(), nil
}

// stages are the percentiles of each stage of the named pods. Called with t.mu held.
func (t *tracker) stages(names []string) map[string]Percentiles {
	out := map[string]Percentiles{}
	for si, s := range stages {
		var ds []float64
		for _, n := range names {
			if p := t.pods[n]; !p.at[si].IsZero() {
				ds = append(ds, float64(p.at[si].Sub(p.sent))/float64(time.Millisecond))
			}
		}
		out[s] = percentiles(ds)
	}
	return out
}

// waitReady polls until the pod was seen Ready.
func (t *tracker) waitReady(ctx context.Context, name string) error {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		t.mu.Lock()
		ready := !t.pods[name].at[4].IsZero()
		t.mu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s not ready: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

// realAPI creates and deletes the benchmark's pods through the Kubernetes API.
type realAPI struct {
	url, ns, image string
	client         *http.Client
}

func (a *realAPI) podsURL() string { return fmt.Sprintf("%s/api/v1/namespaces/%s/pods", a.url, a.ns) }

// create POSTs a busybox pod that sleeps: no readiness probe, so Ready follows Running once the pod's
// network passed its CNI CHECK. Requests are small so that 2×pods fit on a small machine.
func (a *realAPI) create(ctx context.Context, t *tracker, name string) error {
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q,"labels":{"app":"loadtest"}},`+
		`"spec":{"terminationGracePeriodSeconds":0,"containers":[{"name":"app","image":%q,"imagePullPolicy":"IfNotPresent",`+
		`"command":["sleep","3600"],"resources":{"requests":{"cpu":"10m","memory":"8Mi"}}}]}}`, name, a.ns, a.image)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.podsURL(), strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	t.mu.Lock()
	t.pods[name].sent = time.Now()
	t.mu.Unlock()
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("create pod %s: %w", name, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("create pod %s: %s: %s", name, resp.Status, b)
	}
	t.mark(name, 0, time.Now())
	return nil
}

// deleteAll deletes the pods (grace period 0) and waits until every one has left the API.
func (a *realAPI) deleteAll(ctx context.Context, names []string) error {
	for _, n := range names {
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, a.podsURL()+"/"+n+"?gracePeriodSeconds=0", nil)
		if err != nil {
			return err
		}
		resp, err := a.client.Do(req)
		if err != nil {
			return fmt.Errorf("delete pod %s: %w", n, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusNotFound {
			return fmt.Errorf("delete pod %s: %s", n, resp.Status)
		}
	}
	for _, n := range names {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.podsURL()+"/"+n, nil)
			if err != nil {
				return err
			}
			resp, err := a.client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusNotFound {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("pod %s not gone: %w", n, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// bareBench starts the same pods straight through agent/cri's runtime: netns + CNI ADD + container
// create + task start, no API, bus or agent.
type bareBench struct {
	rt    *cri.Runtime
	ns    string
	image string

	mu  sync.Mutex
	sbs []agent.Sandbox
}

// startBare makes the runtime and pulls the image; stop removes every sandbox started.
func startBare(ctx context.Context, cfg Config, dir, node, ns, image string, log *slog.Logger) (*bareBench, func(), error) {
	rt, err := cri.New(ctx, cri.Config{NodeName: node, Address: cfg.ContainerdAddress, Namespace: ns,
		PodCIDR: barePodCIDR, StateDir: dir, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	b := &bareBench{rt: rt, ns: cfg.Namespace, image: image}
	stop := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		for _, sb := range b.sbs {
			if err := rt.RemoveSandbox(dctx, sb); err != nil {
				log.Error("remove sandbox", "pod", sb.Name, "err", err)
			}
		}
		_ = rt.Close()
	}
	if _, err := rt.PullImage(ctx, image, "IfNotPresent"); err != nil {
		stop()
		return nil, nil, err
	}
	return b, stop, nil
}

// one starts one pod and returns how long it took.
func (b *bareBench) one(ctx context.Context, name string) (time.Duration, error) {
	p := &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: name, Namespace: b.ns, Uid: fmt.Sprintf("%s-%d", name, time.Now().UnixNano())},
		Spec: &pb.PodSpec{RestartPolicy: "Always", Containers: []*pb.Container{{
			Name: "app", Image: b.image, ImagePullPolicy: "IfNotPresent", Command: []string{"sleep", "3600"},
		}}},
	}
	t0 := time.Now()
	sb, err := b.rt.RunSandbox(ctx, p)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	b.sbs = append(b.sbs, sb)
	b.mu.Unlock()
	id, err := b.rt.CreateContainer(ctx, sb, p.Spec.Containers[0], 0)
	if err != nil {
		return 0, err
	}
	if err := b.rt.StartContainer(ctx, id); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// batch starts the pods all at once and returns each one's time (ms) and the batch's.
func (b *bareBench) batch(ctx context.Context, names []string) ([]float64, time.Duration, error) {
	ds := make([]float64, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := b.one(ctx, n)
			ds[i], errs[i] = float64(d)/float64(time.Millisecond), err
		}()
	}
	wg.Wait()
	return ds, time.Since(t0), errors.Join(errs...)
}

// cleanupContainerd removes what the run left in containerd and on the host once the pods are gone: the
// images and the containerd namespaces, and the nodes' bridges. It goes on past a failure and returns
// each, wrapping ErrLeftBehind and naming what is left.
func cleanupContainerd(address string, nss, nodes []string) error {
	if address == "" {
		address = cri.DefaultAddress
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	client, err := containerd.New(address)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: containerd namespaces %s: %w", ErrLeftBehind, strings.Join(nss, ", "), err))
	} else {
		defer client.Close()
		for _, ns := range nss {
			if err := removeNamespace(ctx, client, ns); err != nil {
				errs = append(errs, fmt.Errorf("%w: %w", ErrLeftBehind, err))
			}
		}
	}
	for _, n := range nodes {
		if out, err := exec.Command("ip", "link", "del", cri.BridgeFor(n)).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
			errs = append(errs, fmt.Errorf("%w: bridge %s: %v: %s", ErrLeftBehind, cri.BridgeFor(n), err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// removeNamespace deletes a containerd namespace's images and then the namespace; when it cannot, the
// error lists the containers and images still in it.
func removeNamespace(ctx context.Context, client *containerd.Client, ns string) error {
	nctx := namespaces.WithNamespace(ctx, ns)
	var errs []error
	imgs, err := client.ListImages(nctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("images: %w", err))
	}
	for _, im := range imgs {
		if err := client.ImageService().Delete(nctx, im.Name(), containerdimages.SynchronousDelete()); err != nil {
			errs = append(errs, fmt.Errorf("image %s: %w", im.Name(), err))
		}
	}
	err = client.NamespaceService().Delete(ctx, ns)
	if err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	var left []string
	if cs, lerr := client.Containers(nctx); lerr == nil {
		for _, c := range cs {
			left = append(left, "container "+c.ID())
		}
	}
	if imgs, lerr := client.ListImages(nctx); lerr == nil {
		for _, im := range imgs {
			left = append(left, "image "+im.Name())
		}
	}
	return fmt.Errorf("containerd namespace %s, holding [%s]: %w", ns, strings.Join(left, ", "), errors.Join(append(errs, err)...))
}

func printReal(w io.Writer, r *RealResult) {
	fmt.Fprintf(w, "containerd: %d pods one by one (each after the previous is Ready; podbus and bare taking turns), then %d at once;\n", r.Pods, r.Pods)
	fmt.Fprintf(w, "busybox `sleep`, ")
	fmt.Fprintf(w, "no readiness probe; the image was pulled by a warm-up pod first, so no pull is measured.\n")
	fmt.Fprintf(w, "podbus: POST → phase Running / Ready=True in the store; bare: netns + CNI ADD + create + task start via agent/cri.\n")
	fmt.Fprintf(w, "%-28s %9s %9s %9s %9s\n", "", "p50 ms", "p90 ms", "p99 ms", "max ms")
	row := func(label string, p Percentiles) {
		fmt.Fprintf(w, "%-28s %9.1f %9.1f %9.1f %9.1f\n", label, p.P50, p.P90, p.P99, p.Max)
	}
	for _, run := range []struct {
		name   string
		podbus map[string]Percentiles
		bare   Percentiles
	}{{"one by one", r.PodbusSequential, r.BareSequential}, {"at once", r.PodbusParallel, r.BareParallel}} {
		for _, s := range stages {
			row(fmt.Sprintf("podbus %-10s %s", run.name, s), run.podbus[s])
		}
		row(fmt.Sprintf("bare   %-10s running", run.name), run.bare)
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	fmt.Fprintf(w, "p50 create→Ready one by one: podbus %.1f ms, bare %.1f ms (×%.2f)\n",
		r.PodbusSequential[StageReady].P50, r.BareSequential.P50, ratio(r.PodbusSequential[StageReady].P50, r.BareSequential.P50))
	fmt.Fprintf(w, "throughput of the batch: podbus %.1f pods/s, bare %.1f pods/s (%.0f %% of bare)\n",
		r.PodbusThroughput, r.BareThroughput, 100*ratio(r.PodbusThroughput, r.BareThroughput))
}
