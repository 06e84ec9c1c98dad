package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/secretbox"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Volumes, as the kubelet's volume manager: once the sandbox exists and before any container, a runtime
// that mounts volumes (VolumeManager) sets up the pod's; a failure is a FailedMount event and a retry
// with back-off while the pod stays ContainerCreating. Every VolumeSyncPeriod the set-up runs again, so
// ConfigMap and Secret changes reach the files, and an emptyDir over its sizeLimit evicts the pod.

// DefaultVolumeSyncPeriod is Config.VolumeSyncPeriod's default.
const DefaultVolumeSyncPeriod = 10 * time.Second

// ObjectGetter reads the ConfigMaps and Secrets volumes name; ErrNotFound (wrapped) when absent.
type ObjectGetter interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// VolumeManager is implemented by runtimes that mount volumes (agent/cri); the agent accepts pods with
// volumes on others (agent/fake) and mounts nothing.
type VolumeManager interface {
	// SetupVolumes makes the pod's volumes ready for its containers, or brings their contents up to
	// date. It is idempotent. A *VolumeRefusedError fails the pod; an *EvictionError evicts it.
	SetupVolumes(ctx context.Context, pod *pb.Pod, objs ObjectGetter) error
}

// VolumeRefusedError: the node will not mount one of the pod's volumes (a hostPath without the agent's
// opt-in, an unsupported source). The pod fails with Reason and Message.
type VolumeRefusedError struct{ Reason, Message string }

func (e *VolumeRefusedError) Error() string { return e.Message }

// EvictionError: a volume is over its limit; the pod is evicted with Message, as the kubelet does.
type EvictionError struct{ Message string }

func (e *EvictionError) Error() string { return e.Message }

// volumeState is a worker's volume bookkeeping, guarded by w.mu.
type volumeState struct {
	// failReason and failMessage, once set, end the pod Failed (an eviction, a refused volume) when its
	// goroutines have stopped (endFailed).
	failReason, failMessage string
}

func (a *Agent) volumeSync() time.Duration {
	if a.cfg.VolumeSyncPeriod > 0 {
		return a.cfg.VolumeSyncPeriod
	}
	return DefaultVolumeSyncPeriod
}

// mountVolumes sets up the pod's volumes before its containers, retrying with back-off. False: the pod
// cannot go on (stopped, or a volume was refused).
func (w *podWorker) mountVolumes(ctx context.Context) bool {
	vm, ok := w.a.rt.(VolumeManager)
	if !ok || len(w.pod.GetSpec().GetVolumes()) == 0 {
		return true
	}
	delay := w.a.cfg.BackoffBase / 10
	for {
		err := vm.SetupVolumes(ctx, w.pod, w.a.objects())
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var refused *VolumeRefusedError
		if errors.As(err, &refused) {
			w.fail(refused.Reason, refused.Message, "FailedMount")
			return false
		}
		w.a.log.Warn("mount volumes failed", "pod", w.key(), "err", err)
		if !w.backOff(ctx, "FailedMount", "MountVolume.SetUp failed: "+err.Error(), &delay) {
			return false
		}
	}
}

// volumeLoop refreshes the volumes every sync period and evicts the pod when one is over its limit.
func (w *podWorker) volumeLoop(ctx context.Context) {
	vm, ok := w.a.rt.(VolumeManager)
	if !ok || len(w.pod.GetSpec().GetVolumes()) == 0 {
		return
	}
	t := time.NewTicker(w.a.volumeSync())
	defer t.Stop()
	// The first pass runs at once: a pod adopted after an agent restart has its volumes recorded again
	// before a container of it is recreated.
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		err := vm.SetupVolumes(ctx, w.pod, w.a.objects())
		var evict *EvictionError
		switch {
		case errors.As(err, &evict):
			w.fail("Evicted", evict.Message, "Evicted")
			return
		case err != nil && ctx.Err() == nil:
			w.a.log.Warn("refresh volumes failed", "pod", w.key(), "err", err)
		}
	}
}

// fail records why the pod ends and stops its goroutines; endFailed then stops its containers.
func (w *podWorker) fail(reason, msg, eventReason string) {
	w.mu.Lock()
	if w.vol.failReason == "" {
		w.vol.failReason, w.vol.failMessage = reason, msg
		w.eventLocked("Warning", eventReason, msg, "")
	}
	w.mu.Unlock()
	w.stop()
}

// endFailed ends a pod that fail stopped: its containers killed at once (as the kubelet evicts for local
// storage), the sandbox removed, Failed with the reason reported. Called once the pod's goroutines
// have returned; a termination under way does the rest itself.
func (w *podWorker) endFailed(ctx context.Context) {
	w.mu.Lock()
	if w.vol.failReason == "" || w.terminating || w.finished {
		w.mu.Unlock()
		return
	}
	w.reason, w.message = w.vol.failReason, w.vol.failMessage
	sb := w.sandbox
	var running []*ctr
	for _, c := range append(append([]*ctr{}, w.init...), w.ctrs...) {
		if c.id != "" && c.state.GetRunning() != nil {
			running = append(running, c)
			w.eventLocked("Normal", "Killing", "Stopping container "+c.spec.GetName(), fieldPath(c))
		}
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.a.rt.StopContainer(ctx, c.id, 0); err != nil && !errors.Is(err, ErrNotFound) {
				w.a.log.Warn("stop container of failed pod", "pod", w.key(), "container", c.spec.GetName(), "err", err)
			}
			if st, err := w.a.rt.ContainerStatus(ctx, c.id); err == nil {
				w.onExit(c, st)
			}
		}()
	}
	wg.Wait()
	if sb != nil {
		if err := w.a.rt.RemoveSandbox(ctx, *sb); err != nil {
			w.a.log.Warn("remove sandbox of failed pod", "pod", w.key(), "err", err)
		}
	}
	w.mu.Lock()
	w.sandbox, w.finished = nil, true
	w.a.recount()
	for _, c := range append(append([]*ctr{}, w.init...), w.ctrs...) {
		c.done, c.ready = true, false
	}
	w.mu.Unlock()
	w.reportRetry(ctx)
	w.markStarted()
}

// objects is the agent's reader of ConfigMaps and Secrets, made on first use.
func (a *Agent) objects() ObjectGetter {
	a.objsOnce.Do(func() { a.objs = &kvObjects{js: a.conn.JS, box: a.cfg.SecretBox, kvs: map[string]jetstream.KeyValue{}} })
	return a.objs
}

// kvObjects reads ConfigMaps and Secrets from their buckets, opening Secrets with the API's key.
type kvObjects struct {
	js  jetstream.JetStream
	box *secretbox.Box
	mu  sync.Mutex
	kvs map[string]jetstream.KeyValue
}

func (o *kvObjects) get(ctx context.Context, bucket, ns, name string) (string, []byte, error) {
	o.mu.Lock()
	kv := o.kvs[bucket]
	o.mu.Unlock()
	if kv == nil {
		var err error
		if kv, err = o.js.KeyValue(ctx, bucket); err != nil {
			return "", nil, fmt.Errorf("open bucket %s: %w", bucket, err)
		}
		o.mu.Lock()
		o.kvs[bucket] = kv
		o.mu.Unlock()
	}
	key := bus.ObjectKey(ns, name)
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return key, nil, ErrNotFound
	}
	if err != nil {
		return key, nil, err
	}
	return key, e.Value(), nil
}

func (o *kvObjects) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	_, data, err := o.get(ctx, bus.BucketConfigMaps, ns, name)
	if err != nil {
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}
	cm := &corev1.ConfigMap{}
	if err := json.Unmarshal(data, cm); err != nil {
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}
	return cm, nil
}

func (o *kvObjects) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	key, data, err := o.get(ctx, bus.BucketSecrets, ns, name)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	plain, err := o.box.Open(key, data)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	s := &corev1.Secret{}
	if err := json.Unmarshal(plain, s); err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return s, nil
}
