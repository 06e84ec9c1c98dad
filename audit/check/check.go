// Package check is a history checker, in the manner of Jepsen's: it reads every record of the audit
// log (and what a workload's clients were answered) and names each broken promise by pod and store
// revision, rather than only looking at the end state.
//
// Over the whole history (every pods-bucket revision, in order):
//   - lost: a pod the store answered 201 for that never appears, or disappears without a delete request
//     (a pod.cmd.delete for it, from a client, a preemption or the workload);
//   - rebound: a pod bound to one node and later to another; double-bind: pod.bound sent for one pod to
//     two nodes;
//   - overcommit: at some revision a node's committed requests (its pods bound by a binder,
//     PodScheduled=True, neither terminal nor force-deleted) exceed its allocatable at that moment;
//   - lost-update: a workload's update generation (GenLabel, GenAnnotation) going back at some revision
//     (an older copy written over a newer one), the label and annotation of one update stored apart, or
//     an update answered 200 whose generation the history never shows.
//
// At the end (Options.EndState), over the last state of the history and the live DEAD stream:
//   - not-ready: a pod neither Ready nor in a terminal phase (Succeeded, Failed);
//   - terminating: a pod still being deleted;
//   - dead-letter: a message parked on dead.>;
//   - container-left, container-not-running (containers.go): with Options.Containers, a container a
//     node's runtime still holds for a pod no longer stored, or a Ready pod's container not running.
//
// Deployments (deploy.go), from the ReplicaSets and Deployments buckets' records and the pods':
//   - surge: a Deployment gaining a pod while its pods (all its ReplicaSets', neither terminating nor
//     terminal) exceed replicas + maxSurge (over the whole history);
//   - rollout: at the end, a Deployment without exactly spec.replicas Ready pods of its current
//     template, or with pods of older ReplicaSets;
//   - orphan: at the end, a ReplicaSet or pod of a deleted Deployment left behind.
package check

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// ErrViolations is returned by Check when the history breaks a promise; the result lists each.
var ErrViolations = errors.New("the history breaks a promise")

// Violation kinds.
const (
	KindLost        = "lost"
	KindRebound     = "rebound"
	KindDoubleBind  = "double-bind"
	KindOvercommit  = "overcommit"
	KindNotReady    = "not-ready"
	KindTerminating = "terminating"
	KindDeadLetter  = "dead-letter"
	KindLostUpdate  = "lost-update"
)

// A workload's updates set both to the same increasing generation, so that every revision of a pod
// shows which updates it holds.
const (
	GenLabel      = "chaos.podbus.io/gen"
	GenAnnotation = "chaos.podbus.io/gen"
)

// Violation is one broken promise.
type Violation struct {
	Kind string
	Pod  string // namespace/name ("" for a dead letter of no pod)
	// Deployment is the namespace/name of the Deployment a surge, rollout or orphan is about.
	Deployment string
	UID        string
	Node       string
	Revision   uint64 // the pods-bucket revision where it shows (0: none, see Seq)
	Seq        uint64 // the audit record (or DEAD message) where it shows
	Detail     string
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	if v.Deployment != "" {
		fmt.Fprintf(&b, " deployment=%s", v.Deployment)
	}
	if v.Pod != "" || v.Deployment == "" {
		fmt.Fprintf(&b, " pod=%s", v.Pod)
	}
	if v.UID != "" {
		fmt.Fprintf(&b, " uid=%s", v.UID)
	}
	if v.Node != "" {
		fmt.Fprintf(&b, " node=%s", v.Node)
	}
	if v.Revision != 0 {
		fmt.Fprintf(&b, " revision=%d", v.Revision)
	}
	if v.Seq != 0 {
		fmt.Fprintf(&b, " seq=%d", v.Seq)
	}
	if v.Detail != "" {
		fmt.Fprintf(&b, ": %s", v.Detail)
	}
	return b.String()
}

// WorkloadOp is one line of a workload log (JSON lines): a request a client made and the answer's code.
type WorkloadOp struct {
	Op        string `json:"op"` // "create", "update" or "delete"
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"` // of the created pod, from the 201's body; of the updated one
	Gen       int    `json:"gen,omitempty"` // of an update: the generation it set
	Code      int    `json:"code"`
	Error     string `json:"error,omitempty"` // the message of an answer other than a success
}

// ReadWorkload reads a workload log.
func ReadWorkload(r io.Reader) ([]WorkloadOp, error) {
	var out []WorkloadOp
	dec := json.NewDecoder(r)
	for {
		var op WorkloadOp
		err := dec.Decode(&op)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("workload log, entry %d: %w", len(out)+1, err)
		}
		out = append(out, op)
	}
}

// Options shape Check.
type Options struct {
	Stream   string       // the history (default bus.StreamAudit)
	Workload []WorkloadOp // what the clients were answered; may be empty
	// EndState adds the checks of the last state: every pod Ready or terminal, none terminating, no
	// dead letter. Leave it off while the system is still moving.
	EndState bool
	// Containers lists, by node name, the runtimes whose containers are held to the end state
	// (container-left, container-not-running); checked with EndState only.
	Containers map[string]ContainerLister
	// Origins, when sampled during the run, time the buckets' records closer than AUDIT does.
	Origins Origins
}

// Result is what Check found.
type Result struct {
	Records    int // audit records read
	Pods       int // pod incarnations (uids) seen
	Created    int // 201s in the workload
	Deleted    int // pod incarnations deleted
	Violations []Violation
}

// Check reads the history and returns every violation, with ErrViolations when there is one.
func Check(ctx context.Context, js jetstream.JetStream, o Options) (Result, error) {
	h := newHistory()
	h.deploys.origins = o.Origins
	var res Result
	err := audit.Scan(ctx, js, audit.ScanOptions{Stream: o.Stream,
		Filters: []string{bus.SubjKV(bus.BucketPods) + ">", bus.SubjKV(bus.BucketNodes) + ">", bus.SubjPodBoundAll, bus.SubjPodDelete,
			bus.SubjKV(bus.BucketReplicaSets) + ">", bus.SubjKV(bus.BucketDeployments) + ">"}},
		func(r *audit.Record) error {
			res.Records++
			return h.apply(r)
		})
	if err != nil {
		return res, err
	}
	res.Pods, res.Deleted = len(h.uids), h.deleted
	vs := append(h.violations, h.deploys.surges()...)
	for _, op := range o.Workload {
		if op.Op == "update" && op.Code == 200 {
			vs = append(vs, h.checkUpdate(op)...)
			continue
		}
		if op.Op != "create" || op.Code != 201 {
			continue
		}
		res.Created++
		if op.UID != "" && h.uids[op.UID] == nil {
			vs = append(vs, Violation{Kind: KindLost, Pod: op.Namespace + "/" + op.Name, UID: op.UID,
				Detail: "answered 201, never stored"})
		}
	}
	if o.EndState {
		vs = append(vs, h.endState()...)
		vs = append(vs, h.deploys.endState(h)...)
		dead, err := deadLetters(ctx, js)
		if err != nil {
			return res, err
		}
		vs = append(vs, dead...)
		rts, err := h.runtimes(ctx, o.Containers)
		if err != nil {
			return res, err
		}
		vs = append(vs, rts...)
	}
	res.Violations = vs
	if len(vs) > 0 {
		return res, fmt.Errorf("%w: %d violations", ErrViolations, len(vs))
	}
	return res, nil
}

// incarnation is one pod uid's history.
type incarnation struct {
	key       string // namespace/name
	node      string // the node a binder bound it to, once bound
	deleteReq bool   // a delete was requested while it was stored
	last      *pb.Pod
	lastRev   uint64
	gone      bool
	gen       int // the highest update generation stored
}

// stored is what a pods-bucket key holds now.
type stored struct {
	uid  string
	node string        // the node its requests count on, "" if none
	req  *pb.Resources // those requests
}

type history struct {
	uids       map[string]*incarnation // by uid
	keys       map[string]*stored      // by bucket key
	allocs     map[string]*pb.Resources
	used       map[string]*pb.Resources
	bound      map[string]string // uid -> node of its first pod.bound
	deleted    int
	violations []Violation
	deploys    *deployments
}

func newHistory() *history {
	return &history{uids: map[string]*incarnation{}, keys: map[string]*stored{}, allocs: map[string]*pb.Resources{},
		used: map[string]*pb.Resources{}, bound: map[string]string{}, deploys: newDeployments()}
}

func (h *history) add(v Violation) { h.violations = append(h.violations, v) }

func (h *history) apply(r *audit.Record) error {
	if bucket, key, ok := r.Bucket(); ok {
		_, rev, _ := r.Origin()
		switch bucket {
		case bus.BucketPods:
			return h.applyPod(r, key, rev)
		case bus.BucketNodes:
			return h.applyNode(r, key)
		case bus.BucketDeployments:
			h.deploys.applyDeployment(r, key)
		case bus.BucketReplicaSets:
			h.deploys.applyReplicaSet(r, key, rev)
		}
		return nil
	}
	switch {
	case strings.HasPrefix(r.Subject, "pod.bound."):
		return h.applyBound(r)
	case r.Subject == bus.SubjPodDelete:
		return h.applyDelete(r)
	}
	return nil
}

func (h *history) applyNode(r *audit.Record, key string) error {
	name, ok := bus.Untoken(key)
	if !ok || r.Deleted() {
		return nil // a removed node keeps its last allocatable: its pods still count on it
	}
	n := &pb.Node{}
	if err := proto.Unmarshal(r.Data, n); err != nil {
		return nil // reported by audit verify; nothing to check here
	}
	h.allocs[name] = podutil.NodeAllocatable(n)
	return nil
}

func (h *history) applyBound(r *audit.Record) error {
	b := &pb.PodBinding{}
	if err := proto.Unmarshal(r.Data, b); err != nil {
		return nil
	}
	uid, node := b.GetPod().GetMetadata().GetUid(), b.GetPod().GetSpec().GetNodeName()
	if uid == "" || node == "" {
		return nil
	}
	if first, ok := h.bound[uid]; ok && first != node {
		md := b.GetPod().GetMetadata()
		h.add(Violation{Kind: KindDoubleBind, Pod: md.GetNamespace() + "/" + md.GetName(), UID: uid, Node: node, Seq: r.Seq,
			Detail: fmt.Sprintf("pod.bound to %s after pod.bound to %s", node, first)})
		return nil
	}
	h.bound[uid] = node
	return nil
}

func (h *history) applyDelete(r *audit.Record) error {
	cmd := &pb.PodCommand{}
	if err := proto.Unmarshal(r.Data, cmd); err != nil {
		return nil
	}
	md := cmd.GetPod().GetMetadata()
	if s := h.keys[bus.PodKey(md.GetNamespace(), md.GetName())]; s != nil {
		if p := cmd.GetPreconditionUid(); p == "" || p == s.uid {
			h.uids[s.uid].deleteReq = true
		}
	}
	return nil
}

func (h *history) applyPod(r *audit.Record, key string, rev uint64) error {
	ns, name, _ := bus.SplitPodKey(key)
	ref := ns + "/" + name
	prev := h.keys[key]
	var p *pb.Pod
	if !r.Deleted() {
		p = &pb.Pod{}
		if err := proto.Unmarshal(r.Data, p); err != nil {
			return nil
		}
	}
	h.deploys.applyPod(r, key, rev, p)
	uid := p.GetMetadata().GetUid()
	if prev != nil && prev.uid != uid {
		// The incarnation at key is gone (deleted, or replaced without a delete record in between).
		inc := h.uids[prev.uid]
		inc.gone = true
		h.deleted++
		if !inc.deleteReq {
			h.add(Violation{Kind: KindLost, Pod: ref, UID: prev.uid, Revision: rev, Seq: r.Seq, Detail: "removed from the store without a delete request"})
		}
		h.uncount(prev)
		delete(h.keys, key)
		prev = nil
	}
	if p == nil {
		return nil
	}
	inc := h.uids[uid]
	if inc == nil {
		inc = &incarnation{key: ref}
		h.uids[uid] = inc
	}
	inc.last, inc.lastRev = p, rev
	h.checkGen(inc, p, ref, rev, r.Seq)
	if p.GetMetadata().GetDeletionTimestamp() != nil {
		// Marked by the store, which only does so on a delete request (a preemption's included).
		inc.deleteReq = true
	}

	node := p.GetSpec().GetNodeName()
	committed := node != "" && podutil.PodCondition(p, podutil.PodScheduled).GetStatus() == podutil.True
	if committed {
		if inc.node != "" && inc.node != node {
			h.add(Violation{Kind: KindRebound, Pod: ref, UID: uid, Node: node, Revision: rev, Seq: r.Seq,
				Detail: fmt.Sprintf("bound to %s, earlier to %s", node, inc.node)})
		}
		inc.node = node
	}
	counts := committed && !podutil.IsTerminal(p) && !forceDeleted(p)
	cur := &stored{uid: uid}
	if counts {
		cur.node, cur.req = node, podutil.PodRequests(p)
	}
	if prev != nil {
		h.uncount(prev)
	}
	h.keys[key] = cur
	if cur.node == "" {
		return nil
	}
	used := h.used[cur.node]
	if used == nil {
		used = &pb.Resources{}
		h.used[cur.node] = used
	}
	// Judged as the binder judges a reservation: the pod's requests on top of the others'.
	added := prev == nil || prev.node != cur.node
	if alloc := h.allocs[cur.node]; added && alloc != nil {
		if short := podutil.Insufficient(alloc, used, cur.req); len(short) > 0 {
			h.add(Violation{Kind: KindOvercommit, Pod: ref, UID: uid, Node: cur.node, Revision: rev, Seq: r.Seq,
				Detail: fmt.Sprintf("committed requests exceed allocatable in %s", strings.Join(short, ","))})
		}
	}
	podutil.Add(used, cur.req)
	return nil
}

// checkGen holds a pod's revision to the workload's update generations: never lower than an earlier
// revision's, label and annotation alike.
func (h *history) checkGen(inc *incarnation, p *pb.Pod, ref string, rev, seq uint64) {
	md := p.GetMetadata()
	label, lok := md.GetLabels()[GenLabel]
	ann, aok := md.GetAnnotations()[GenAnnotation]
	if !lok && !aok {
		if inc.gen > 0 {
			h.add(Violation{Kind: KindLostUpdate, Pod: ref, UID: md.GetUid(), Revision: rev, Seq: seq,
				Detail: fmt.Sprintf("generation %d gone", inc.gen)})
		}
		return
	}
	if label != ann {
		h.add(Violation{Kind: KindLostUpdate, Pod: ref, UID: md.GetUid(), Revision: rev, Seq: seq,
			Detail: fmt.Sprintf("label generation %q, annotation generation %q: one update stored in part", label, ann)})
	}
	gen, err := strconv.Atoi(label)
	if err != nil {
		return
	}
	if gen < inc.gen {
		h.add(Violation{Kind: KindLostUpdate, Pod: ref, UID: md.GetUid(), Revision: rev, Seq: seq,
			Detail: fmt.Sprintf("generation %d written over %d", gen, inc.gen)})
		return
	}
	inc.gen = gen
}

// checkUpdate holds an update answered 200 to showing in the history.
func (h *history) checkUpdate(op WorkloadOp) []Violation {
	inc := h.uids[op.UID]
	if op.UID == "" || inc == nil || inc.gen >= op.Gen {
		return nil // a pod never stored is reported as lost by its create
	}
	return []Violation{{Kind: KindLostUpdate, Pod: op.Namespace + "/" + op.Name, UID: op.UID,
		Detail: fmt.Sprintf("update to generation %d answered 200, the history shows at most %d", op.Gen, inc.gen)}}
}

func (h *history) uncount(s *stored) {
	if s.node != "" {
		podutil.Sub(h.used[s.node], s.req)
	}
}

// forceDeleted: deleted with grace 0, gone from the API's view although its record is still there
// while the store finishes (the binder releases its room at once).
func forceDeleted(p *pb.Pod) bool {
	md := p.GetMetadata()
	return md.GetDeletionTimestamp() != nil && md.GetDeletionGracePeriodSeconds() == 0
}

// endState checks the last state of every stored pod.
func (h *history) endState() []Violation {
	var out []Violation
	for _, k := range slices.Sorted(maps.Keys(h.keys)) {
		s := h.keys[k]
		inc := h.uids[s.uid]
		p := inc.last
		v := Violation{Pod: inc.key, UID: s.uid, Node: p.GetSpec().GetNodeName(), Revision: inc.lastRev}
		switch {
		case p.GetMetadata().GetDeletionTimestamp() != nil:
			v.Kind, v.Detail = KindTerminating, "still being deleted"
		case podutil.IsTerminal(p):
			continue
		case podutil.PodCondition(p, podutil.PodReady).GetStatus() != podutil.True:
			v.Kind, v.Detail = KindNotReady, "phase "+p.GetStatus().GetPhase()
			if c := podutil.PodCondition(p, podutil.PodScheduled); c.GetStatus() == podutil.False {
				v.Detail += ", unschedulable: " + c.GetMessage()
			}
		default:
			continue
		}
		out = append(out, v)
	}
	return out
}

// deadLetters lists the messages parked on dead.>.
func deadLetters(ctx context.Context, js jetstream.JetStream) ([]Violation, error) {
	st, err := bus.Stream(ctx, js, bus.StreamDead)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", bus.StreamDead, err)
	}
	info := st.CachedInfo()
	var out []Violation
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := bus.Retry(ctx, 0, func(ctx context.Context) (*jetstream.RawStreamMsg, error) { return st.GetMsg(ctx, seq) })
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("read %s: %w", bus.StreamDead, err)
		}
		out = append(out, Violation{Kind: KindDeadLetter, Pod: m.Header.Get(bus.HdrKey), UID: m.Header.Get(bus.HdrPodUID), Seq: seq,
			Detail: m.Subject + ": " + m.Header.Get(bus.HdrDeadReason)})
	}
	return out, nil
}

// CaughtUp reports whether the history stream (default bus.StreamAudit) has seen the last message of
// each of its sources. Check a history only once it has, or its last changes are missing.
func CaughtUp(ctx context.Context, js jetstream.JetStream, stream string) (bool, error) {
	if stream == "" {
		stream = bus.StreamAudit
	}
	info, err := streamInfo(ctx, js, stream)
	if err != nil {
		return false, err
	}
	seen := map[string]uint64{}
	for _, src := range info.Sources {
		if src != nil {
			seen[src.Name] = src.Seq
		}
	}
	for _, src := range info.Config.Sources {
		si, err := streamInfo(ctx, js, src.Name)
		if err != nil {
			return false, err
		}
		if si.State.Msgs > 0 && seen[src.Name] < si.State.LastSeq {
			return false, nil
		}
	}
	return true, nil
}

func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	st, err := bus.Stream(ctx, js, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return st.CachedInfo(), nil
}
