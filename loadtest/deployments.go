package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// ScenarioDeployments measures the workload controllers: Deployments created through the API until all
// their pods are Ready (pods/s created→ready), then a rolling update of all of them (a new image) until
// every Deployment has rolled.
const ScenarioDeployments = "deployments"

// Sizes of the deployments scenario unless given.
const (
	deploymentsDefault        = 20
	deploymentReplicasDefault = 50
	deploymentsNodesDefault   = 100
)

// DeploymentsResult is what the deployments scenario measures.
type DeploymentsResult struct {
	Deployments int `json:"deployments"`
	Replicas    int `json:"replicas"`
	Nodes       int `json:"nodes"`
	Pods        int `json:"pods"`
	// Created→ready: from the first Deployment sent until every pod is Ready.
	ReadySeconds   float64     `json:"ready_seconds"`
	ReadyPodsPerS  float64     `json:"ready_pods_per_s"`
	PodCreateReady Percentiles `json:"pod_created_to_ready"`
	// Rolling update of every Deployment at once (maxUnavailable and maxSurge 25%).
	RolloutSeconds  float64 `json:"rollout_seconds"`
	RolloutPodsPerS float64 `json:"rollout_pods_per_s"`
}

// podClock follows the Deployments' pods: when each was created and became Ready.
type podClock struct {
	mu      sync.Mutex
	created map[string]time.Time // uid -> creationTimestamp
	readyAt map[string]time.Time // uid -> first seen Ready
	ready   map[string]bool      // uid -> Ready and not terminating now
	image   map[string]string    // uid -> first container's image
}

func (c *podClock) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	p := &pb.Pod{}
	if proto.Unmarshal(e.Value(), p) != nil || p.GetMetadata().GetLabels()["loadtest"] != "deployments" {
		return
	}
	uid := p.GetMetadata().GetUid()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.created[uid]; !ok {
		c.created[uid] = p.GetMetadata().GetCreationTimestamp().AsTime()
		if cs := p.GetSpec().GetContainers(); len(cs) > 0 {
			c.image[uid] = cs[0].GetImage()
		}
	}
	cond := podutil.PodCondition(p, podutil.PodReady)
	ready := cond != nil && cond.GetStatus() == podutil.True && p.GetMetadata().GetDeletionTimestamp() == nil
	if ready {
		if _, ok := c.readyAt[uid]; !ok {
			c.readyAt[uid] = time.Now()
		}
	}
	c.ready[uid] = ready
}

// readyWith counts the pods Ready now with image.
func (c *podClock) readyWith(image string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for uid, r := range c.ready {
		if r && c.image[uid] == image {
			n++
		}
	}
	return n
}

func runDeployments(ctx context.Context, cfg Config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if cfg.API == "" {
		stop, err := startEmbedded(ctx, &cfg, "podbus-bench-", nil)
		if err != nil {
			return err
		}
		defer stop()
	}
	res, err := Deployments(ctx, cfg, progress(cfg))
	if res == nil {
		return err
	}
	if cfg.JSON {
		return errors.Join(err, writeJSON(w, res))
	}
	fmt.Fprintf(w, "deployments %d × %d replicas on %d nodes: %d pods Ready in %.2fs, created→ready %.0f pods/s (p50 %.0f ms, p99 %.0f ms)\n",
		res.Deployments, res.Replicas, res.Nodes, res.Pods, res.ReadySeconds, res.ReadyPodsPerS, res.PodCreateReady.P50, res.PodCreateReady.P99)
	fmt.Fprintf(w, "rolling update of all of them: %.2fs (%.0f pods/s replaced)\n", res.RolloutSeconds, res.RolloutPodsPerS)
	return err
}

// Deployments runs the deployments scenario against cfg.API and cfg.NATS.
func Deployments(ctx context.Context, cfg Config, log io.Writer) (*DeploymentsResult, error) {
	opts, _, err := natsauth.ClientOptions(cfg.NATSCreds, cfg.NATSCA)
	if err != nil {
		return nil, err
	}
	conn, err := bus.Connect(ctx, cfg.NATS, "podbus-loadtest", opts...)
	if err != nil {
		return nil, err
	}
	defer conn.NC.Close()
	kv, err := bus.OpenBucket(ctx, conn.JS, bus.BucketPods)
	if err != nil {
		return nil, err
	}
	clock := &podClock{created: map[string]time.Time{}, readyAt: map[string]time.Time{}, ready: map[string]bool{}, image: map[string]string{}}
	watcher, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = watcher.Stop() }()
	go func() {
		for e := range watcher.Updates() {
			if e != nil {
				clock.apply(e)
			}
		}
	}()
	client, err := apiClient(cfg)
	if err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, client, cfg.API, cfg.Namespace); err != nil {
		return nil, err
	}
	d, r := cfg.Deployments, cfg.DeploymentReplicas
	res := &DeploymentsResult{Deployments: d, Replicas: r, Nodes: cfg.Nodes, Pods: d * r}
	base := fmt.Sprintf("%s/apis/apps/v1/namespaces/%s/deployments", cfg.API, cfg.Namespace)
	image1, image2 := "example.local/app:1", "example.local/app:2"

	start := time.Now()
	if err := forEach(ctx, d, cfg.Concurrency, func(i int) error {
		return send(ctx, client, http.MethodPost, base, "application/json", deploymentJSON(i, r, image1, cfg), http.StatusCreated)
	}); err != nil {
		return res, err
	}
	if err := waitFor(ctx, log, "Ready", d*r, func() int { return clock.readyWith(image1) }); err != nil {
		return res, err
	}
	res.ReadySeconds = time.Since(start).Seconds()
	res.ReadyPodsPerS = float64(d*r) / res.ReadySeconds
	clock.mu.Lock()
	var lat []float64
	for uid, at := range clock.readyAt {
		lat = append(lat, float64(at.Sub(clock.created[uid]).Milliseconds()))
	}
	clock.mu.Unlock()
	res.PodCreateReady = percentiles(lat)

	start = time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, image2)
	if err := forEach(ctx, d, cfg.Concurrency, func(i int) error {
		return send(ctx, client, http.MethodPatch, fmt.Sprintf("%s/lt-%d", base, i), "application/strategic-merge-patch+json", []byte(patch), http.StatusOK)
	}); err != nil {
		return res, err
	}
	rolled := func() int {
		n, err := rolledDeployments(ctx, client, base, r)
		if err != nil {
			return 0
		}
		return n
	}
	if err := waitFor(ctx, log, "Deployments rolled", d, rolled); err != nil {
		return res, err
	}
	res.RolloutSeconds = time.Since(start).Seconds()
	res.RolloutPodsPerS = float64(d*r) / res.RolloutSeconds
	return res, nil
}

func deploymentJSON(i, replicas int, image string, cfg Config) []byte {
	name := fmt.Sprintf("lt-%d", i)
	labels := map[string]string{"app": name, "loadtest": "deployments"}
	d := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": map[string]string{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": image,
					"resources": map[string]any{"requests": map[string]string{"cpu": cfg.CPURequest, "memory": cfg.MemRequest}}}}},
			},
		},
	}
	data, _ := json.Marshal(d)
	return data
}

func send(ctx context.Context, client *http.Client, method, url, contentType string, body []byte, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s %s", method, url, resp.Status, msg)
	}
	return nil
}

// forEach runs f for 0..n-1, concurrency at a time, and returns the first error.
func forEach(ctx context.Context, n, concurrency int, f func(i int) error) error {
	sem := make(chan struct{}, max(1, concurrency))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// waitFor polls count until it reaches want, printing progress every few seconds.
func waitFor(ctx context.Context, log io.Writer, what string, want int, count func() int) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		n := count()
		if n >= want {
			return nil
		}
		if time.Since(last) > 5*time.Second {
			fmt.Fprintf(log, "%s: %d/%d\n", what, n, want)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %d of %d: %w", what, n, want, ctx.Err())
		case <-tick.C:
		}
	}
}

// rolledDeployments counts the Deployments whose rollout is complete, as kubectl rollout status judges.
func rolledDeployments(ctx context.Context, client *http.Client, url string, replicas int) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"?labelSelector=", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var list appsv1.DeploymentList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, err
	}
	n := 0
	for _, d := range list.Items {
		st, r := d.Status, int32(replicas)
		if st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == r && st.Replicas == r && st.AvailableReplicas == r {
			n++
		}
	}
	return n, nil
}
