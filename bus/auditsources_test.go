package bus_test

import (
	"slices"
	"testing"

	"github.com/podbus/podbus/bus"
)

// AUDIT sources the workload buckets when it is provisioned with them (a checker reads Deployments'
// history there), never a bucket it is not provisioned with, and never the secrets.
func TestAuditSourcesWorkloadBuckets(t *testing.T) {
	names := func(o bus.Options) []string {
		var out []string
		for _, s := range bus.AuditConfig(o).Sources {
			out = append(out, s.Name)
		}
		return out
	}
	bare := names(bus.Options{})
	withApps := names(bus.Options{Buckets: []bus.BucketSpec{{Name: bus.BucketReplicaSets}, {Name: bus.BucketDeployments}, {Name: bus.BucketSecrets}}})
	for _, b := range []string{bus.BucketReplicaSets, bus.BucketDeployments} {
		if slices.Contains(bare, bus.KVStream(b)) {
			t.Errorf("sources %s without the bucket provisioned: %v", b, bare)
		}
		if !slices.Contains(withApps, bus.KVStream(b)) {
			t.Errorf("does not source %s: %v", b, withApps)
		}
	}
	if slices.Contains(withApps, bus.KVStream(bus.BucketSecrets)) {
		t.Errorf("sources the secrets: %v", withApps)
	}
}
