package controllers

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/metrics"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// cache is what the watches brought: the controllers' objects decoded, every object's ownership.
type cache struct {
	pods      map[string]*podEntry // by pod key
	strs      *intern.Strings      // the pods' repeated strings
	labelSets *intern.StringSlices // the pods' label sets (see labelSet)
	nodes     map[string]*pb.Node  // by node name
	dsets     map[string]*dsEntry  // by object key
	pdbs      map[string]*pdbEntry // by object key
	// The collector's graph: every object of every kind by uid, its dependents by owner uid.
	objects    map[string]*object
	byKey      map[bucketKey]string // -> uid
	dependents map[string]map[string]bool
}

// bucketKey names a stored object: a pair, not a string made per object.
type bucketKey struct{ bucket, key string }

type dsEntry struct {
	ds  *appsv1.DaemonSet
	rev uint64
}

type pdbEntry struct {
	pdb *policyv1.PodDisruptionBudget
	rev uint64
}

// object is one stored object as the collector sees it.
type object struct {
	kind       *bus.KindBucket
	key        string
	rev        uint64
	ns, name   string
	uid        string
	owners     []metav1.OwnerReference
	finalizers []string
	deleting   bool
}

func newCache() cache {
	return cache{
		pods: map[string]*podEntry{}, strs: intern.NewStrings(intern.DefaultLimit),
		labelSets: intern.NewStringSlices(intern.DefaultLimit), nodes: map[string]*pb.Node{}, dsets: map[string]*dsEntry{},
		pdbs: map[string]*pdbEntry{}, objects: map[string]*object{}, byKey: map[bucketKey]string{},
		dependents: map[string]map[string]bool{},
	}
}

// apply takes one watched change into the cache and marks what it concerns dirty.
func (s *Service) apply(c change) {
	e, kb := c.entry, c.kind
	put := e.Operation() == jetstream.KeyValuePut
	var meta *metav1.ObjectMeta
	switch {
	case !put:
	case kb.Bucket == bus.BucketPods:
		pe, m, ok := s.newPodEntry(e.Value(), e.Revision())
		if !ok {
			metrics.Count("controllers.malformed", 1)
			return
		}
		meta = m
		s.onPod(e.Key(), pe)
	case kb.Bucket == bus.BucketNodes:
		n := &pb.Node{}
		if proto.Unmarshal(e.Value(), n) != nil {
			metrics.Count("controllers.malformed", 1)
			return
		}
		intern.Node(n)
		meta = &metav1.ObjectMeta{Name: n.GetMetadata().GetName(), UID: typesUID(n.GetMetadata().GetUid())}
		name := n.GetMetadata().GetName()
		if old := s.nodes[name]; old == nil || !sameForDaemons(old, n) {
			s.markDaemonSets()
		}
		s.nodes[name] = n
	case kb.Proto:
		return // no other protobuf kind takes part
	default:
		var head struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if json.Unmarshal(e.Value(), &head) != nil {
			metrics.Count("controllers.malformed", 1)
			return
		}
		meta = &head.Metadata
		s.onJSON(kb, e)
	}
	if !put {
		s.onGone(kb, e.Key())
		return
	}
	s.track(kb, e.Key(), e.Revision(), meta)
}

// onPod caches a pod and marks its DaemonSet and its namespace's budgets.
func (s *Service) onPod(key string, pe *podEntry) {
	if old := s.pods[key]; old != nil {
		s.markForPod(old)
	}
	s.pods[key] = pe
	s.markForPod(pe)
}

func (s *Service) markForPod(pe *podEntry) {
	ns := pe.ns
	for _, ref := range pe.owners {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "DaemonSet" {
			s.dirtyDS[bus.ObjectKey(ns, ref.Name)] = true
		}
	}
	for key, e := range s.pdbs {
		if e.pdb.Namespace == ns {
			s.dirtyPDB[key] = true
		}
	}
}

// sameForDaemons reports whether two versions of a node judge daemon pods alike: heartbeats change
// nodes all the time, their labels and taints seldom.
func sameForDaemons(a, b *pb.Node) bool {
	return maps.Equal(a.GetMetadata().GetLabels(), b.GetMetadata().GetLabels()) &&
		slices.EqualFunc(a.GetSpec().GetTaints(), b.GetSpec().GetTaints(), func(x, y *pb.Taint) bool { return proto.Equal(x, y) })
}

func (s *Service) markDaemonSets() {
	for key := range s.dsets {
		s.dirtyDS[key] = true
	}
}

// onJSON caches the controllers' JSON kinds.
func (s *Service) onJSON(kb *bus.KindBucket, e jetstream.KeyValueEntry) {
	switch kb.Bucket {
	case bus.BucketDaemonSets:
		d := &appsv1.DaemonSet{}
		if json.Unmarshal(e.Value(), d) != nil {
			return
		}
		s.dsets[e.Key()] = &dsEntry{ds: d, rev: e.Revision()}
		s.dirtyDS[e.Key()] = true
	case bus.BucketPDBs:
		p := &policyv1.PodDisruptionBudget{}
		if json.Unmarshal(e.Value(), p) != nil {
			return
		}
		s.pdbs[e.Key()] = &pdbEntry{pdb: p, rev: e.Revision()}
		s.dirtyPDB[e.Key()] = true
	}
}

// onGone forgets a deleted object, marking its owners and dependents for the collector.
func (s *Service) onGone(kb *bus.KindBucket, key string) {
	switch kb.Bucket {
	case bus.BucketPods:
		if old := s.pods[key]; old != nil {
			s.markForPod(old)
		}
		delete(s.pods, key)
	case bus.BucketNodes:
		if name, ok := bus.Untoken(key); ok {
			delete(s.nodes, name)
		}
		s.markDaemonSets()
	case bus.BucketDaemonSets:
		delete(s.dsets, key)
	case bus.BucketPDBs:
		delete(s.pdbs, key)
	}
	bk := bucketKey{kb.Bucket, key}
	uid, ok := s.byKey[bk]
	if !ok {
		return
	}
	delete(s.byKey, bk)
	o := s.objects[uid]
	delete(s.objects, uid)
	s.unlink(o)
	for dep := range s.dependents[uid] {
		s.dirtyGC[dep] = true
	}
}

// track records an object's ownership for the collector.
func (s *Service) track(kb *bus.KindBucket, key string, rev uint64, m *metav1.ObjectMeta) {
	bk := bucketKey{kb.Bucket, key}
	if old, ok := s.byKey[bk]; ok {
		if o := s.objects[old]; o != nil {
			s.unlink(o)
		}
		if old != string(m.UID) {
			delete(s.objects, old)
			for dep := range s.dependents[old] {
				s.dirtyGC[dep] = true
			}
		}
	}
	o := &object{kind: kb, key: key, rev: rev, ns: m.Namespace, name: m.Name, uid: string(m.UID),
		owners: m.OwnerReferences, finalizers: m.Finalizers, deleting: m.DeletionTimestamp != nil}
	s.byKey[bk] = o.uid
	s.objects[o.uid] = o
	for _, ref := range o.owners {
		u := string(ref.UID)
		if s.dependents[u] == nil {
			s.dependents[u] = map[string]bool{}
		}
		s.dependents[u][o.uid] = true
		s.dirtyGC[u] = true
	}
	if len(o.owners) > 0 || o.deleting {
		s.dirtyGC[o.uid] = true
	}
}

// unlink removes o from its owners' dependents, marking the owners.
func (s *Service) unlink(o *object) {
	if o == nil {
		return
	}
	for _, ref := range o.owners {
		u := string(ref.UID)
		delete(s.dependents[u], o.uid)
		if len(s.dependents[u]) == 0 {
			delete(s.dependents, u)
		}
		s.dirtyGC[u] = true
	}
}
