package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
)

// provision creates the streams and buckets. With one replica it is bus.Provision. With more it creates
// the same streams, and the KV buckets' streams with direct gets off: a direct get may be answered by any
// replica, including a follower a few writes behind, so a binder could read "no such pod" just after
// the store created it and drop the decision (seen in the compose test: ~2% of pods stuck in Pending).
// Without direct gets every KV read goes to the stream leader, which has applied every acknowledged write.
// The buckets are created as streams (never through CreateKeyValue, which would turn direct gets back on),
// so every replica of every service provisions the same configuration and nothing flips back and forth.
func provision(ctx context.Context, js jetstream.JetStream, replicas int) error {
	o := bus.Options{Replicas: replicas}
	if replicas <= 1 {
		return bus.Provision(ctx, js, o)
	}
	for _, cfg := range bus.StreamConfigs(o) {
		if err := retryProvision(ctx, func() error { _, err := js.CreateOrUpdateStream(ctx, cfg); return err }); err != nil {
			return fmt.Errorf("provision stream %s: %w", cfg.Name, err)
		}
	}
	for _, kv := range bus.KVConfigs(o) {
		cfg := kvStreamConfig(kv)
		if err := retryProvision(ctx, func() error { _, err := js.CreateOrUpdateStream(ctx, cfg); return err }); err != nil {
			return fmt.Errorf("provision bucket %s: %w", kv.Bucket, err)
		}
	}
	return nil
}

// kvStreamConfig is the stream nats.go creates for a KV bucket (jetstream.CreateKeyValue), without direct gets.
func kvStreamConfig(kv jetstream.KeyValueConfig) jetstream.StreamConfig {
	history := int64(max(kv.History, 1))
	return jetstream.StreamConfig{
		Name:              "KV_" + kv.Bucket,
		Description:       kv.Description,
		Subjects:          []string{"$KV." + kv.Bucket + ".>"},
		MaxMsgsPerSubject: history,
		MaxBytes:          -1,
		MaxMsgSize:        -1,
		MaxAge:            kv.TTL,
		Storage:           kv.Storage,
		Replicas:          max(kv.Replicas, 1),
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        2 * time.Minute,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       false,
		Discard:           jetstream.DiscardNew,
	}
}

// retryProvision retries while a cluster elects leaders or other replicas provision at the same time.
func retryProvision(ctx context.Context, f func() error) error {
	var err error
	for attempt := 0; attempt < 40; attempt++ {
		if err = f(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(min(100*(attempt+1), 1000)) * time.Millisecond):
		}
	}
	return err
}
