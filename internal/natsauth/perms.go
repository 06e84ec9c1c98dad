// Package natsauth makes the bus a security boundary with nats-server's own authorization: one nkey user
// per role (the server holds public keys only; each client holds its seed in a credential file), each
// allowed exactly the subjects and JetStream API calls its role makes, and a per-role inbox prefix so no
// role can read another's replies. See docs/design.md, "The bus as a security boundary".
package natsauth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/podbus/podbus/bus"
)

// Roles. An agent of one real node is AgentRole(node).
const (
	RoleAdmin       = "admin"         // everything: provisions streams, buckets and consumers
	RoleAdmission   = "admission"     // the API server
	RoleStore       = "store"         // pod commands -> pods bucket
	RoleScheduler   = "scheduler"     // pending pods -> decisions
	RoleBinder      = "binder"        // decisions -> bindings
	RoleStatus      = "status"        // agents' reports -> pods and nodes buckets
	RoleNamespaces  = "namespaces"    // namespace deletion
	RoleNodeLife    = "nodelifecycle" // node taints and taint evictions
	RoleControllers = "controllers"   // DaemonSets, disruption budgets' status, garbage collection
	RoleWorkloads   = "workloads"     // ReplicaSet and Deployment controllers
	RoleReader      = "reader"        // audit and tools: read-only
	RoleAuditSeal   = "auditseal"     // the audit sealer: reads AUDIT, appends signed blocks to its own stream
	// RoleSimAgents is for simulated nodes whose names are not known in advance (compose's scaled
	// agents, named after their containers): the agent subjects of every node, consumers of any name on
	// PODS but the services', no bucket write.
	RoleSimAgents = "agents"
	// agentRolePrefix + Token(node) is the role of one node's agent (AgentRole), poolRolePrefix + Token(host)
	// that of a process running many simulated nodes (PoolRole).
	agentRolePrefix = "agent-"
	poolRolePrefix  = "agents-"
)

// ServiceRoles are the roles `up` and `natsauth init` make besides per-node agents.
var ServiceRoles = []string{RoleAdmin, RoleAdmission, RoleStore, RoleScheduler, RoleBinder, RoleStatus,
	RoleNamespaces, RoleNodeLife, RoleControllers, RoleWorkloads, RoleReader, RoleAuditSeal}

// ErrRole is returned for a role that does not exist or a node that cannot have an agent credential.
var ErrRole = errors.New("natsauth: unknown role")

// AgentRole is the role of node's agent.
func AgentRole(node string) string { return agentRolePrefix + bus.Token(node) }

// PoolRole is the role of an agent host running many simulated nodes (`podbus agent --runtime fake
// --nodes N --node host`, `up`'s simulated nodes): one process serving many nodes cannot be held to one
// node's subjects, so it may publish the status and heartbeats of every node and answer every node's
// log requests, but use no consumer other than the host's own (bus.ConsumerAgentHost(host)) and write
// no bucket.
func PoolRole(host string) string { return poolRolePrefix + bus.Token(host) }

// InboxPrefix is where role's clients receive replies (nats.CustomInboxPrefix): _INBOX.<role>, readable
// by that role alone.
func InboxPrefix(role string) string { return "_INBOX." + role }

// Perms are one role's permissions: allow lists, and deny lists that hold even where an allow matches.
type Perms struct {
	PubAllow, PubDeny, SubAllow, SubDeny []string
	// Responses lets the role answer requests it received (one reply each), wherever their reply
	// subject is: agents answer the API's log requests on the API's inbox.
	Responses bool
}

// Server is p as nats-server permissions.
func (p Perms) Server() *server.Permissions {
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.PubAllow, Deny: p.PubDeny},
		Subscribe: &server.SubjectPermission{Allow: p.SubAllow, Deny: p.SubDeny},
	}
	if p.Responses {
		sp.Response = &server.ResponsePermission{MaxMsgs: 1}
	}
	return sp
}

const api = "$JS.API."

// Stream-management calls no service credential makes: admin's alone. Denied explicitly so that no allow
// (a wildcard for the reader) can ever let them through.
var manage = []string{
	api + "STREAM.CREATE.>", api + "STREAM.UPDATE.>", api + "STREAM.DELETE.>", api + "STREAM.PURGE.>",
	api + "STREAM.MSG.DELETE.>", api + "STREAM.SNAPSHOT.>", api + "STREAM.RESTORE.>",
	api + "STREAM.PEER.>", api + "STREAM.LEADER.>", api + "CONSUMER.DURABLE.CREATE.>",
	api + "CONSUMER.LEADER.>", api + "CONSUMER.PAUSE.>", api + "CONSUMER.UNPIN.>",
	api + "ACCOUNT.>", api + "META.>", api + "SERVER.>", "$SYS.>",
}

// durables are every service's durable consumers (agents' are per node): only their owner may create
// or delete them, so a role allowed other consumers on a stream cannot reconfigure them.
func durables() []string {
	out := []string{bus.ConsumerStore, bus.ConsumerScheduler, bus.ConsumerBinder, bus.ConsumerBinderDeleted,
		bus.ConsumerStatus, bus.ConsumerHeartbeats}
	for i := range bus.PendingPartitions {
		out = append(out, bus.ConsumerSchedulerPartition(i))
	}
	return out
}

// grants accumulates a role's permissions.
type grants struct{ Perms }

func (g *grants) pub(s ...string)  { g.PubAllow = append(g.PubAllow, s...) }
func (g *grants) sub(s ...string)  { g.SubAllow = append(g.SubAllow, s...) }
func (g *grants) deny(s ...string) { g.PubDeny = append(g.PubDeny, s...) }

// readStream: stream info, ephemeral (ordered) consumers with any name, their deletion (nats.go deletes
// a watcher's consumer when it stops), direct and leader gets. Only for streams without durable consumers
// or with the durables' names denied (see durables).
func (g *grants) readStream(stream string) {
	g.pub(api+"STREAM.INFO."+stream, api+"CONSUMER.CREATE."+stream, api+"CONSUMER.CREATE."+stream+".>",
		api+"CONSUMER.INFO."+stream+".*", api+"CONSUMER.MSG.NEXT."+stream+".*", api+"CONSUMER.DELETE."+stream+".*",
		api+"DIRECT.GET."+stream, api+"DIRECT.GET."+stream+".>", api+"STREAM.MSG.GET."+stream,
		"$JS.ACK."+stream+".>", "$JS.FC."+stream+".>")
}

// readKV reads buckets (Get, Watch, Keys).
func (g *grants) readKV(buckets ...string) {
	for _, b := range buckets {
		g.readStream(bus.KVStream(b))
	}
}

// writeKV lets the role write (put, create, update, delete) every key of buckets: a KV write is a
// JetStream publish on $KV.<bucket>.<key>.
func (g *grants) writeKV(buckets ...string) {
	for _, b := range buckets {
		g.pub(bus.SubjKV(b) + ">")
	}
}

// durable lets the role create, use and ack its own durable consumer on stream, filtered on filter only:
// the filtered create subject carries the filter, and nats-server refuses a request whose configuration
// names another.
func (g *grants) durable(stream, name, filter string) {
	g.pub(api+"STREAM.INFO."+stream, api+"CONSUMER.CREATE."+stream+"."+name+"."+filter,
		api+"CONSUMER.INFO."+stream+"."+name, api+"CONSUMER.MSG.NEXT."+stream+"."+name,
		"$JS.ACK."+stream+"."+name+".>")
}

// park lets the role park what its consumers cannot handle (bus.Consume: dead.<subject>, or the
// fallback subject).
func (g *grants) park(subjects ...string) {
	for _, s := range subjects {
		g.pub(bus.SubjDeadPrefix + s)
	}
	g.pub(bus.SubjDeadFallback)
}

// openBuckets is what bus.OpenBuckets reads: the info of the pipeline's four buckets.
func (g *grants) openBuckets() {
	for _, b := range []string{bus.BucketPods, bus.BucketNodes, bus.BucketAlloc, bus.BucketCommit} {
		g.pub(api + "STREAM.INFO." + bus.KVStream(b))
	}
}

// apiBuckets are the buckets of the API's kinds that are not the pipeline's.
var apiBuckets = []string{bus.BucketNamespaces, bus.BucketConfigMaps, bus.BucketRoles, bus.BucketRoleBindings,
	bus.BucketClusterRoles, bus.BucketClusterRoleBindings, bus.BucketSecrets, bus.BucketDaemonSets, bus.BucketPDBs,
	bus.BucketReplicaSets, bus.BucketDeployments}

// volumeBuckets are what agents read to fill the pods' configMap and secret volumes.
var volumeBuckets = []string{bus.BucketConfigMaps, bus.BucketSecrets}

// Permissions returns role's permissions; ErrRole for an unknown role.
func Permissions(role string) (Perms, error) {
	g := &grants{}
	g.pub(api + "INFO")
	g.sub(InboxPrefix(role) + ".>")
	switch role {
	case RoleAdmin:
		return Perms{PubAllow: []string{">"}, SubAllow: []string{">"}}, nil
	case RoleStore:
		g.durable(bus.StreamPods, bus.ConsumerStore, bus.SubjPodCommands)
		g.openBuckets()
		g.readKV(bus.BucketPods)
		g.writeKV(bus.BucketPods)
		g.pub(bus.SubjPodPendingAll, bus.SubjPodDeleted, bus.SubjPodTermAll, bus.SubjReplyPrefix+">", bus.SubjAllEvents)
		g.park(bus.SubjPodCommands)
	case RoleScheduler:
		g.durable(bus.StreamPods, bus.ConsumerScheduler, bus.SubjPodPending)
		for i := range bus.PendingPartitions {
			g.durable(bus.StreamPods, bus.ConsumerSchedulerPartition(i), bus.SubjPodPendingGroup(i))
		}
		// The ordered consumer of deletions: any name, that filter only.
		g.pub(api+"CONSUMER.CREATE."+bus.StreamPods+".*."+bus.SubjPodDeleted,
			api+"CONSUMER.INFO."+bus.StreamPods+".*", api+"CONSUMER.MSG.NEXT."+bus.StreamPods+".*")
		g.openBuckets()
		g.readKV(bus.BucketPods, bus.BucketNodes, bus.BucketAlloc, bus.BucketCommit)
		g.pub(bus.SubjPodScheduled, bus.SubjPodPendingAll, bus.SubjAllEvents, bus.SubjSchedulerMembers)
		g.sub(bus.SubjSchedulerMembers)
		g.park(bus.SubjPodPendingAll)
	case RoleBinder:
		g.durable(bus.StreamPods, bus.ConsumerBinder, bus.SubjPodScheduled)
		g.durable(bus.StreamPods, bus.ConsumerBinderDeleted, bus.SubjPodDeleted)
		g.openBuckets()
		g.readKV(bus.BucketPods, bus.BucketNodes, bus.BucketAlloc, bus.BucketCommit)
		g.writeKV(bus.BucketPods, bus.BucketAlloc, bus.BucketCommit)
		g.pub(bus.SubjPodBoundAll, bus.SubjPodPendingAll, bus.SubjPodDelete, bus.SubjAllEvents)
		g.park(bus.SubjPodScheduled, bus.SubjPodDeleted)
	case RoleStatus:
		g.durable(bus.StreamStatus, bus.ConsumerStatus, bus.SubjAllPodStatus)
		g.durable(bus.StreamHeartbeats, bus.ConsumerHeartbeats, bus.SubjAllHeartbeats)
		g.openBuckets()
		g.readKV(bus.BucketPods, bus.BucketNodes, bus.BucketLeases)
		g.writeKV(bus.BucketPods, bus.BucketNodes, bus.BucketLeases)
		g.pub(bus.SubjPodDeleted, bus.SubjAllEvents)
		g.park(bus.SubjAllPodStatus, bus.SubjAllHeartbeats)
	case RoleNamespaces:
		g.readKV(append([]string{bus.BucketPods}, apiBuckets...)...)
		g.writeKV(apiBuckets...)
		g.pub(bus.SubjPodDelete, bus.SubjAllEvents)
		// Deleting a namespace removes its events, as Kubernetes does: the one purge a service makes. The
		// AUDIT stream keeps its copies.
		g.pub(api+"STREAM.INFO."+bus.StreamEvents, api+"STREAM.PURGE."+bus.StreamEvents)
	case RoleNodeLife:
		// Reads pods and nodes, writes nodes' taints; pods go through the store like the API's deletions.
		g.readKV(bus.BucketPods, bus.BucketNodes)
		g.writeKV(bus.BucketNodes)
		g.pub(bus.SubjPodDelete, bus.SubjAllEvents)
	case RoleControllers:
		// Reads every kind (the collector's graph), writes the API kinds (status, finalizers, owners);
		// pods go through the store's commands.
		g.readKV(append([]string{bus.BucketPods, bus.BucketNodes}, apiBuckets...)...)
		g.writeKV(apiBuckets...)
		g.pub(bus.SubjPodCreate, bus.SubjPodUpdate, bus.SubjPodDelete, bus.SubjAllEvents)
	case RoleWorkloads:
		// Reads pods, writes the apps buckets; pods are created, adopted and deleted through the store.
		g.readKV(bus.BucketPods, bus.BucketReplicaSets, bus.BucketDeployments, bus.BucketNamespaces)
		g.writeKV(bus.BucketReplicaSets, bus.BucketDeployments)
		g.pub(bus.SubjPodCreate, bus.SubjPodUpdate, bus.SubjPodDelete, bus.SubjAllEvents)
	case RoleAdmission:
		g.readKV(append([]string{bus.BucketPods, bus.BucketNodes, bus.BucketLeases}, apiBuckets...)...)
		g.writeKV(append([]string{bus.BucketNodes}, apiBuckets...)...)
		g.readStream(bus.StreamEvents)
		g.readStream(bus.StreamAudit) // the web view's pod timelines
		g.pub(bus.SubjPodCommands, bus.SubjAllEvents, bus.SubjLogsPrefix+"*")
		g.sub(bus.SubjReplyPrefix+">", bus.SubjUsageAll)
		g.apiStreams()
	case RoleAuditSeal:
		g.readStream(bus.StreamAudit)
		g.readStream(bus.StreamAuditSeal)
		g.pub(bus.SubjAuditSeal)
	case RoleSimAgents:
		g.pub(api+"STREAM.INFO."+bus.StreamPods, api+"CONSUMER.CREATE."+bus.StreamPods+".*",
			api+"CONSUMER.CREATE."+bus.StreamPods+".*.>", api+"CONSUMER.INFO."+bus.StreamPods+".*",
			api+"CONSUMER.MSG.NEXT."+bus.StreamPods+".*", "$JS.ACK."+bus.StreamPods+".*.>")
		g.agent(bus.SubjAllPodStatus, bus.SubjAllHeartbeats, bus.SubjLogsPrefix+"*", bus.SubjPodBoundAll, bus.SubjPodTermAll)
		g.pub(bus.SubjUsageNodes, bus.SubjUsagePools)
		g.anyAgentStreams()
	case RoleReader:
		// podbus cluster lists consumers for their lag and counts the schedulers' announcements.
		g.sub(bus.SubjSchedulerMembers)
		g.pub(api+"STREAM.INFO.*", api+"STREAM.NAMES", api+"STREAM.LIST", api+"CONSUMER.CREATE.*",
			api+"CONSUMER.CREATE.*.>", api+"CONSUMER.INFO.*.*", api+"CONSUMER.LIST.*", api+"CONSUMER.NAMES.*", api+"CONSUMER.MSG.NEXT.*.*",
			api+"CONSUMER.DELETE.*.*", api+"DIRECT.GET.*", api+"DIRECT.GET.*.>", api+"STREAM.MSG.GET.*",
			"$JS.ACK.>", "$JS.FC.>")
	default:
		if tok, ok := strings.CutPrefix(role, poolRolePrefix); ok && validTok(tok) {
			// One consumer for all the process's nodes, with many filters: the unfiltered create subject, on
			// the host's own consumer only.
			name := bus.ConsumerAgentHost(mustUntoken(tok))
			g.pub(api+"STREAM.INFO."+bus.StreamPods, api+"CONSUMER.CREATE."+bus.StreamPods+"."+name,
				api+"CONSUMER.INFO."+bus.StreamPods+"."+name, api+"CONSUMER.MSG.NEXT."+bus.StreamPods+"."+name,
				"$JS.ACK."+bus.StreamPods+"."+name+".>")
			g.agent(bus.SubjAllPodStatus, bus.SubjAllHeartbeats, bus.SubjLogsPrefix+"*", bus.SubjPodBoundAll, bus.SubjPodTermAll)
			g.pub(bus.SubjUsagePool(mustUntoken(tok)))
			g.anyAgentStreams()
			break
		}
		tok, ok := strings.CutPrefix(role, agentRolePrefix)
		if !ok || !validTok(tok) {
			return Perms{}, fmt.Errorf("%w %q", ErrRole, role)
		}
		node := mustUntoken(tok)
		if !bus.AgentFilterOK(node) {
			return Perms{}, fmt.Errorf("%w %q: node name collides with a pipeline subject", ErrRole, role)
		}
		name := bus.ConsumerAgent(node)
		g.durable(bus.StreamPods, name, bus.SubjAgent(node))
		g.agent(bus.SubjPodStatus(node), bus.SubjHeartbeat(node), bus.SubjLogs(node), bus.SubjPodBound(node), bus.SubjPodTerminate(node))
		g.pub(bus.SubjUsageNode(node))
		g.agentStreams(node)
	}
	g.PubDeny = append(g.PubDeny, manage...)
	if role != RoleNamespaces {
		g.deny(api + "STREAM.PURGE.>")
	} else {
		for _, s := range []string{bus.StreamPods, bus.StreamStatus, bus.StreamHeartbeats, bus.StreamDead, bus.StreamAudit} {
			g.deny(api + "STREAM.PURGE." + s)
		}
		for _, b := range append([]string{bus.BucketPods, bus.BucketNodes, bus.BucketLeases, bus.BucketAlloc, bus.BucketCommit}, apiBuckets...) {
			g.deny(api + "STREAM.PURGE." + bus.KVStream(b))
		}
		g.PubDeny = slices.DeleteFunc(g.PubDeny, func(s string) bool { return s == api+"STREAM.PURGE.>" })
	}
	if role == RoleReader || role == RoleSimAgents {
		for _, d := range durables() {
			g.deny(api+"CONSUMER.CREATE.*."+d, api+"CONSUMER.CREATE.*."+d+".>", api+"CONSUMER.DELETE.*."+d,
				api+"CONSUMER.MSG.NEXT.*."+d, "$JS.ACK.*."+d+".>")
		}
	}
	p := g.Perms
	p.PubAllow, p.PubDeny, p.SubAllow = unique(p.PubAllow), unique(p.PubDeny), unique(p.SubAllow)
	return p, nil
}

// unique drops repeats, keeping the first of each.
func unique(s []string) []string {
	seen := map[string]bool{}
	return slices.DeleteFunc(s, func(x string) bool {
		dup := seen[x]
		seen[x] = true
		return dup
	})
}

// agent grants what a node agent does besides its consumer: status and heartbeats, log answers, the
// pods bucket read once at start (to re-adopt its pods), parking its own malformed messages. No KV write.
func (g *grants) agent(status, heartbeat, logs, bound, term string) {
	g.pub(status, heartbeat)
	g.sub(logs)
	g.Responses = true
	g.openBuckets()
	g.readKV(bus.BucketPods)
	// ConfigMaps and Secrets for the pods' volumes: every key, as the bus cannot tell which a node's pods
	// name (kube's node authorizer can); Secrets stay sealed without the encryption key.
	g.readKV(volumeBuckets...)
	g.park(bound, term)
	g.deny("$KV.>")
}

// validTok reports whether t is what bus.Token makes of some name.
func validTok(t string) bool {
	n, ok := bus.Untoken(t)
	return ok && t != "" && bus.Token(n) == t
}

func mustUntoken(t string) string {
	n, _ := bus.Untoken(t)
	return n
}
