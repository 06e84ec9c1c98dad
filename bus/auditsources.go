package bus

import "slices"

// auditedAPIBuckets are the API buckets whose every write AUDIT keeps, as kube's audit log records the
// writes of the workload objects: who changed a Deployment, a DaemonSet or a budget is part of why pods
// came and went. Secrets are never among them.
var auditedAPIBuckets = []string{BucketReplicaSets, BucketDeployments, BucketDaemonSets, BucketPDBs}

// auditedBuckets are the buckets of o.Buckets that AUDIT sources: only those Provision creates, so
// that AUDIT never sources a stream that does not exist.
func auditedBuckets(o Options) []string {
	var out []string
	for _, b := range auditedAPIBuckets {
		if slices.ContainsFunc(o.Buckets, func(s BucketSpec) bool { return s.Name == b }) {
			out = append(out, KVStream(b))
		}
	}
	return out
}
