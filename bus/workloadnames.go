package bus

// Buckets of the API kinds the controllers service drives (see services/controllers), provisioned from
// the API server's kinds like the other API buckets.
const (
	BucketDaemonSets = "daemonsets"           // key ObjectKey(ns, name) -> the DaemonSet's JSON
	BucketPDBs       = "poddisruptionbudgets" // key ObjectKey(ns, name) -> the PodDisruptionBudget's JSON
)

// KindBucket says where objects of one API kind are kept: what the garbage collector needs to find an
// owner named by an ownerReference, and to watch every kind whose objects may be dependents.
type KindBucket struct {
	APIVersion, Kind string
	Bucket           string
	Namespaced       bool
	// Proto: the bucket holds podbusv1 messages (pods, nodes), the others hold the objects' JSON.
	Proto bool
}
