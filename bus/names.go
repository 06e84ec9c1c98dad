// Package bus is the one place that knows how podbus talks over NATS JetStream: the names of subjects,
// streams, consumers, KV buckets and headers, their provisioning, the connection, and typed
// publish/consume helpers that every service uses.
//
// The pod pipeline (every arrow is a JetStream subject on a limits-retention stream, so the whole
// history can be replayed):
//
//	kubectl ─HTTP─▶ admission ─pod.cmd.*─▶ store ─pod.pending.*─▶ scheduler(s) ─pod.scheduled─▶ binder
//	                    ▲  (reply: core NATS)   │ KV create/CAS                                    │ CAS alloc + pod
//	                    └──────────────────────┘                                                   ▼
//	status ◀─status.pod.<node>, node.heartbeat.<node>── agent(<node>) ◀──pod.bound.<node>, pod.terminate.<node>
//	  │ CAS pod/node status, delete gone pods ─pod.deleted─▶ binder (release), scheduler (requeue)
//	  └─event.<ns>.<name> (every service records Kubernetes events)
package bus

import (
	"crypto/rand"
	"hash/fnv"
	"strconv"
	"strings"
)

// Streams. All use limits retention: a message stays after it is consumed, for auditing and replay.
const (
	StreamPods       = "PODS"       // pod.>: commands and pipeline steps
	StreamStatus     = "STATUS"     // status.>: agent status reports
	StreamHeartbeats = "HEARTBEATS" // node.>: node heartbeats
	StreamEvents     = "EVENTS"     // event.>: Kubernetes events
	StreamDead       = "DEAD"       // dead.>: messages that could not be handled, parked for inspection
	// StreamAudit sources PODS, STATUS, EVENTS, DEAD and the streams of the pods, nodes and workload buckets:
	// every state change, kept with its original subject and headers, never deleted or purged.
	StreamAudit = "AUDIT"
	// StreamAuditSeal holds the audit sealer's signed blocks: each covers a contiguous range of AUDIT
	// sequences with every record's chained digest (package audit, services/auditseal).
	StreamAuditSeal = "AUDITSEAL"
)

// SubjAuditSeal carries the audit seal blocks, one message per block.
const SubjAuditSeal = "auditseal.block"

// KVStream is the name of the stream behind a KV bucket ("KV_pods").
func KVStream(bucket string) string { return "KV_" + bucket }

// SubjKV is the subject prefix of a bucket's records ("$KV.pods."); the key follows it.
func SubjKV(bucket string) string { return "$KV." + bucket + "." }

// HdrKVOperation marks a KV record that deletes its key ("DEL") or purges it ("PURGE"); absent on puts.
const HdrKVOperation = "KV-Operation"

// Subjects. Node, namespace and pod names inside subjects always go through Token.
const (
	SubjPodCreate   = "pod.cmd.create"
	SubjPodUpdate   = "pod.cmd.update"
	SubjPodDelete   = "pod.cmd.delete"
	SubjPodCommands = "pod.cmd.*"
	// SubjPodPending carries pods without inter-pod constraints, shared by every scheduler replica;
	// a pod that has them goes to SubjPodPendingGroup (see PendingSubject).
	SubjPodPending     = "pod.pending.any"
	SubjPodPendingAll  = "pod.pending.>"
	subjPodPendingPref = "pod.pending.g"
	SubjPodScheduled   = "pod.scheduled"
	SubjPodDeleted     = "pod.deleted"
	subjPodBoundPrefix = "pod.bound."
	subjPodTermPrefix  = "pod.terminate."
	subjStatusPodPref  = "status.pod."
	subjHeartbeatPref  = "node.heartbeat."
	subjEventPrefix    = "event."
	SubjDeadPrefix     = "dead."
	// SubjDeadFallback is where a message is parked when it cannot be on dead.<its subject> (that is
	// not a valid subject, or the publish there failed for good); HdrDeadSubject then quotes its subject.
	SubjDeadFallback = "dead.=unparkable"

	SubjAllPods       = "pod.>"
	SubjAllStatus     = "status.>"
	SubjAllPodStatus  = "status.pod.*"
	SubjAllHeartbeats = "node.heartbeat.*"
	SubjAllEvents     = "event.>"
	SubjAllDead       = "dead.>"
	SubjPodBoundAll   = "pod.bound.*"
	SubjPodTermAll    = "pod.terminate.*"
)

// KV buckets: the consistent store. Every write is a compare-and-set on the entry's revision.
const (
	BucketPods  = "pods"  // key PodKey(ns, name) -> podbusv1.Pod; resourceVersion = revision
	BucketNodes = "nodes" // key NodeKey(name) -> podbusv1.Node
	// BucketLeases holds each node's heartbeat lease (LeaseKey(name) -> podbusv1.NodeLease), renewed by
	// the status service on every heartbeat, so the nodes bucket changes only when a node's status does
	// (Kubernetes' node leases). Not sourced into AUDIT: a renewal is no state change.
	BucketLeases = "leases"
	// BucketAlloc holds what the binder committed per node, one key per placed pod (AllocPodKey ->
	// podbusv1.PodAllocation) and one for the node's preemptions (AllocMetaKey -> podbusv1.NodeAllocation
	// with nominated pods and, under pods, the victims' preempted_by only). Every write is a
	// compare-and-set on the last revision of any key of the node (WriteUnder, AllocNodeFilter).
	BucketAlloc = "alloc"
	// BucketCommit holds KeyInterPodCommit, a token whose revision every binder compare-and-sets when it
	// commits a pod that inter-pod constraints concern, so such commits are checked one at a time against a
	// view that includes every earlier one (see services/binder/commitcheck.go).
	BucketCommit      = "commit"
	KeyInterPodCommit = "inter-pod"
	// Buckets of API objects that have no pipeline, written by the API server with compare-and-set and
	// provisioned from the API server's kinds (admission.Buckets). Keys: ObjectKey or NodeKey.
	BucketNamespaces = "namespaces" // key NodeKey(name) -> the Namespace's JSON
	BucketConfigMaps = "configmaps" // key ObjectKey(ns, name) -> the ConfigMap's JSON
	// BucketSecrets: key ObjectKey(ns, name) -> the Secret's JSON sealed by internal/secretbox (AES-GCM),
	// never sourced into AUDIT.
	BucketSecrets = "secrets"
	// RBAC: the authorizer reads them from the API server's watch caches.
	BucketRoles               = "roles"               // key ObjectKey(ns, name) -> the Role's JSON
	BucketRoleBindings        = "rolebindings"        // key ObjectKey(ns, name) -> the RoleBinding's JSON
	BucketClusterRoles        = "clusterroles"        // key NodeKey(name) -> the ClusterRole's JSON
	BucketClusterRoleBindings = "clusterrolebindings" // key NodeKey(name) -> the ClusterRoleBinding's JSON
	// apps/v1, written by the API and the workload controllers (internal/workload.Record).
	BucketReplicaSets = "replicasets" // key ObjectKey(ns, name) -> the ReplicaSet's record
	BucketDeployments = "deployments" // key ObjectKey(ns, name) -> the Deployment's record
)

// Durable consumer names. Consumers with the same name are shared by all replicas of a service.
const (
	ConsumerStore     = "store"
	ConsumerScheduler = "scheduler"
	// ConsumerSchedulerGroup + partition: the consumer of one partition of constrained pods. Its priority
	// group PriorityGroupScheduler is pinned, so one replica at a time serves the partition.
	ConsumerSchedulerGroup = "scheduler-g"
	PriorityGroupScheduler = "schedulers"
	ConsumerBinder         = "binder"
	ConsumerBinderDeleted  = "binder-deleted"
	ConsumerStatus         = "status"
	ConsumerHeartbeats     = "status-heartbeats"
	consumerAgentPrefix    = "agent-"
	consumerAgentHostPref  = "agenthost-"
)

// Headers carried by every pipeline message.
const (
	HdrMsgID       = "Nats-Msg-Id" // JetStream de-duplication
	HdrCorrelation = "Podbus-Correlation"
	HdrActor       = "Podbus-Actor" // service/replica that published the message
	HdrPodUID      = "Podbus-Pod-Uid"
	HdrKey         = "Podbus-Key"   // namespace/name of the pod, for per-pod ordering without decoding
	HdrReply       = "Podbus-Reply" // core NATS subject where the store answers a command
	HdrUser        = "Podbus-User"
	// HdrTrigger names a change ("a<rev>": alloc bucket revision) the receiver's view should include
	// before it acts on the message (a conflict requeue says which record refused the decision).
	HdrTrigger     = "Podbus-Trigger"
	HdrDeadReason  = "Podbus-Dead-Reason"
	HdrDeadSubject = "Podbus-Dead-Subject"
	// HdrSubject is a batch entry's own subject, when it is not its batch's (events of several objects
	// share their namespace's batch, see GroupSubject). Unbatch moves it to Entry.Subject.
	HdrSubject = "Podbus-Subject"
)

// SubjReplyPrefix is where admission replicas receive the store's answers (SubjReply).
const SubjReplyPrefix = "podbus.reply."

// SubjReply is the subject where the store answers one command of an admission replica: token is
// ReplyToken's, fresh per command, so a client that does not see the command cannot answer in the
// store's place. (Core NATS does not say who published a reply: who may publish on SubjReplyPrefix,
// and read the commands that name these subjects, is for NATS permissions to restrict.)
func SubjReply(replica, token string) string { return SubjReplyPrefix + Token(replica) + "." + token }

// SubjReplies filters the replies to one admission replica.
func SubjReplies(replica string) string { return SubjReplyPrefix + Token(replica) + ".*" }

// IsReplySubject reports whether subject is one SubjReply makes: the store answers nowhere else, so a
// command cannot turn its answer into a message on any other subject (a JetStream API call, say).
func IsReplySubject(subject string) bool {
	rest, ok := strings.CutPrefix(subject, SubjReplyPrefix)
	replica, token, ok2 := strings.Cut(rest, ".")
	return ok && ok2 && validToken(replica) && validToken(token)
}

// validToken reports whether t is one literal subject token: not empty, no wildcard, no separator or
// white space.
func validToken(t string) bool {
	if t == "" || t == "*" || t == ">" {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c == '.' || c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// ValidSubject reports whether s is a literal subject a message can be published on: tokens as
// validToken says, at least one.
func ValidSubject(s string) bool {
	for {
		t, rest, more := strings.Cut(s, ".")
		if !validToken(t) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

// ReplyToken returns an unguessable subject token (128 random bits) for one command's reply subject.
func ReplyToken() string { return rand.Text() }

// SubjSchedulerMembers is the core NATS subject on which scheduler replicas announce their ids, to
// share the pinned pending partitions fairly (see the scheduler service's balance.go).
const SubjSchedulerMembers = "podbus.schedulers"

// SubjLogsPrefix is the request/reply subject prefix for a node agent's container logs.
const SubjLogsPrefix = "podbus.logs."

// PendingPartitions is how many partitions the pending pods with inter-pod constraints are spread over.
// Every replica consumes every partition, but each partition's consumer is pinned to one replica at a
// time: pods whose constraints concern each other (same group) are then decided by one replica, in
// order, against its own assumptions, instead of racing each other's commits at the binder.
const PendingPartitions = 8

// PendingSubject is where a pending pod is published: group is podutil.ConstraintGroup of the pod, ""
// for a pod without inter-pod constraints.
func PendingSubject(group string) string {
	if group == "" {
		return SubjPodPending
	}
	return SubjPodPendingGroup(PendingPartition(group))
}

// PendingPartition is the partition of a constraint group.
func PendingPartition(group string) int {
	h := fnv.New32a() // stable across processes and versions
	_, _ = h.Write([]byte(group))
	return int(h.Sum32() % PendingPartitions)
}

// SubjPodPendingGroup is the subject of one partition of constrained pending pods.
func SubjPodPendingGroup(partition int) string {
	return subjPodPendingPref + strconv.Itoa(partition)
}

// ConsumerSchedulerPartition is the durable consumer of one partition of constrained pending pods.
func ConsumerSchedulerPartition(partition int) string {
	return ConsumerSchedulerGroup + strconv.Itoa(partition)
}

// SubjPodBound is the subject on which the binder hands a pod to a node's agent.
func SubjPodBound(node string) string { return subjPodBoundPrefix + Token(node) }

// SubjPodTerminate is the subject on which a node's agent is told to stop a pod.
func SubjPodTerminate(node string) string { return subjPodTermPrefix + Token(node) }

// SubjAgent filters both SubjPodBound(node) and SubjPodTerminate(node) with one subject, pod.*.<node>,
// so that a node's agent creates its consumer through the filtered create API subject, which NATS
// permissions can limit to that node (see internal/natsauth). AgentFilterOK says for which nodes it
// matches nothing else.
func SubjAgent(node string) string { return "pod.*." + Token(node) }

// AgentFilterOK reports whether SubjAgent(node) matches only the node's agent subjects: false for the
// few names that are the last token of another pipeline subject (pod.pending.any, pod.cmd.create, ...).
func AgentFilterOK(node string) bool {
	t := Token(node)
	if t == "any" || t == "create" || t == "update" || t == "delete" {
		return false
	}
	if p, ok := strings.CutPrefix(t, "g"); ok {
		if _, err := strconv.Atoi(p); err == nil {
			return false
		}
	}
	return true
}

// SplitAgentSubject reads a subject meant for a node's agent: the node's token (Token of its name) and
// whether it is a termination (SubjPodTerminate) rather than a binding (SubjPodBound).
func SplitAgentSubject(subject string) (nodeToken string, terminate, ok bool) {
	if t, found := strings.CutPrefix(subject, subjPodBoundPrefix); found && t != "" && !strings.Contains(t, ".") {
		return t, false, true
	}
	if t, found := strings.CutPrefix(subject, subjPodTermPrefix); found && t != "" && !strings.Contains(t, ".") {
		return t, true, true
	}
	return "", false, false
}

// SubjPodStatus is the subject of a node's pod status reports.
func SubjPodStatus(node string) string { return subjStatusPodPref + Token(node) }

// SubjHeartbeat is the subject of a node's heartbeats.
func SubjHeartbeat(node string) string { return subjHeartbeatPref + Token(node) }

// SubjEvent is the subject of events about one object: event.<ns>.<name> ("=" for cluster-scoped).
func SubjEvent(namespace, name string) string {
	return subjEventPrefix + Token(namespace) + "." + Token(name)
}

// SubjEventsFor filters events of one namespace ("" for all).
func SubjEventsFor(namespace string) string {
	if namespace == "" {
		return SubjAllEvents
	}
	return subjEventPrefix + Token(namespace) + ".*"
}

// GroupSubject is the subject of the batches that may hold a message on subject (see Batcher): the
// subject itself, except for events, which are grouped per namespace (event.<ns>) because each names
// its own object. A group of one is stored on its own subject.
func GroupSubject(subject string) string {
	if !strings.HasPrefix(subject, subjEventPrefix) {
		return subject
	}
	ns, name, ok := strings.Cut(subject[len(subjEventPrefix):], ".")
	if !ok || name == "" || strings.Contains(name, ".") {
		return subject
	}
	return subjEventPrefix + ns
}

// ReadFilters are the subjects to read for the messages that match filters: the filters plus the group
// subjects whose batches may hold some (GroupSubject), without repeats or subjects another one
// covers (a consumer refuses overlapping filters). The entries read must then be matched against the
// filters one by one (SubjectMatches on each entry's subject).
func ReadFilters(filters ...string) []string {
	var all []string
	for _, f := range filters {
		all = append(all, f)
		if g := GroupSubject(f); g != f {
			all = append(all, g)
		}
	}
	var out []string
	for i, f := range all {
		covered := false
		for j, o := range all {
			if j != i && SubjectMatches(o, f) && (o != f || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, f)
		}
	}
	return out
}

// SubjectMatches reports whether subject matches a NATS filter with "*" and ">" wildcards.
func SubjectMatches(filter, subject string) bool {
	for {
		ftok, frest, fmore := strings.Cut(filter, ".")
		if ftok == ">" {
			return subject != ""
		}
		stok, srest, smore := strings.Cut(subject, ".")
		if subject == "" || (ftok != "*" && ftok != stok) {
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}

// SubjLogs is the request subject of one node agent's log service.
func SubjLogs(node string) string { return SubjLogsPrefix + Token(node) }

// ConsumerAgent is the durable consumer name of one node's agent.
func ConsumerAgent(node string) string { return consumerAgentPrefix + Token(node) }

// ConsumerAgentHost is the durable consumer name of a process that runs many nodes' agents (simulated
// nodes): one consumer for all of them, so consumers grow with processes, not with nodes.
func ConsumerAgentHost(name string) string { return consumerAgentHostPref + Token(name) }

// IsAgentConsumer reports whether a durable consumer is a node agent's or an agent host's.
func IsAgentConsumer(durable string) bool {
	return strings.HasPrefix(durable, consumerAgentPrefix) || strings.HasPrefix(durable, consumerAgentHostPref)
}

// PodKey is the KV key of a pod. Namespaces are DNS labels (no dots), so the first token is always
// the namespace and a watch on PodKeyPrefix(ns) selects one namespace.
func PodKey(namespace, name string) string { return Token(namespace) + "." + Token(name) }

// ObjectKey is the KV key of any namespaced object: PodKey's layout.
func ObjectKey(namespace, name string) string { return PodKey(namespace, name) }

// PodKeyPrefix filters pod keys of one namespace ("" for all); the same for any ObjectKey.
func PodKeyPrefix(namespace string) string {
	if namespace == "" {
		return ">"
	}
	return Token(namespace) + ".>"
}

// SplitPodKey reverses PodKey.
func SplitPodKey(key string) (namespace, name string, ok bool) {
	ns, n, found := strings.Cut(key, ".")
	if !found {
		return "", "", false
	}
	namespace, ok1 := Untoken(ns)
	name, ok2 := Untoken(n)
	return namespace, name, ok1 && ok2
}

// NodeKey is the KV key of a node (nodes and alloc buckets).
func NodeKey(name string) string { return Token(name) }

// NamespaceNodeLease is the namespace of the nodes' leases, as in Kubernetes.
const NamespaceNodeLease = "kube-node-lease"

// LeaseKey is the KV key of a node's lease (leases bucket): the ObjectKey of the Lease the API serves.
func LeaseKey(node string) string { return ObjectKey(NamespaceNodeLease, node) }

// LeaseNodeKey is the NodeKey of the node whose lease has key, or "" for a key LeaseKey does not make.
func LeaseNodeKey(key string) string {
	node, ok := strings.CutPrefix(key, Token(NamespaceNodeLease)+".")
	if !ok {
		return ""
	}
	return node
}

// Token encodes a Kubernetes name as one subject token and one KV key part. Names are DNS subdomains
// ([a-z0-9.-]), where '.' would split a subject: it becomes '_'. Anything else outside [A-Za-z0-9-]
// (never valid in a name, but names from elsewhere, such as host names, may have it) becomes =XX.
func Token(s string) string {
	if s != "" && allPlain(s) {
		return s
	}
	if s == "" {
		return "="
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isPlain(c):
			b.WriteByte(c)
		case c == '.':
			b.WriteByte('_')
		default:
			const hex = "0123456789ABCDEF"
			b.WriteByte('=')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		}
	}
	return b.String()
}

// Untoken reverses Token.
func Untoken(t string) (string, bool) {
	if t == "=" {
		return "", true
	}
	// Most tokens escape nothing: they are their own value, and need no copy.
	if allPlain(t) {
		return t, true
	}
	var b strings.Builder
	b.Grow(len(t))
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '_':
			b.WriteByte('.')
		case c == '=':
			if i+2 >= len(t) {
				return "", false
			}
			hi, ok1 := unhex(t[i+1])
			lo, ok2 := unhex(t[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			b.WriteByte(hi<<4 | lo)
			i += 2
		case isPlain(c):
			b.WriteByte(c)
		default:
			return "", false
		}
	}
	return b.String(), true
}

// allPlain: s is the same as a name and as a token.
func allPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isPlain(s[i]) {
			return false
		}
	}
	return true
}

func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Resource usage (package internal/usage), on core NATS: only the latest value matters. A node's
// agent reports its node on SubjUsageNode; a process of many simulated nodes reports them together
// on SubjUsagePool, named after the process.
const (
	SubjUsagePrefix   = "podbus.usage."
	subjUsageNodePref = SubjUsagePrefix + "node."
	subjUsagePoolPref = SubjUsagePrefix + "pool."
	SubjUsageAll      = SubjUsagePrefix + ">"
	SubjUsageNodes    = subjUsageNodePref + "*"
	SubjUsagePools    = subjUsagePoolPref + "*"
)

// SubjUsageNode is where node's agent reports its node's usage.
func SubjUsageNode(node string) string { return subjUsageNodePref + Token(node) }

// SubjUsagePool is where the process host reports the usage of its simulated nodes.
func SubjUsagePool(host string) string { return subjUsagePoolPref + Token(host) }

// UsageSubjectNode returns the node a usage subject belongs to; ok is false for a pool's subject,
// which may report any node, or a subject that is not a usage one.
func UsageSubjectNode(subject string) (node string, ok bool) {
	tok, ok := strings.CutPrefix(subject, subjUsageNodePref)
	if !ok {
		return "", false
	}
	return Untoken(tok)
}
