package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/admission/convert"
)

var gkNode = schema.GroupKind{Kind: "Node"}

// nodeUpdateAttempts bounds the re-read-and-retry loop of a node write that lost a compare-and-set
// (heartbeats and other users write the same record), like the store's loops.
const nodeUpdateAttempts = 16

func decodeNode(_ string, value []byte, rev uint64) (runtime.Object, error) {
	n := &pb.Node{}
	if err := proto.Unmarshal(value, n); err != nil {
		return nil, fmt.Errorf("decode node: %w", errors.Join(bus.ErrMalformed, err))
	}
	return nodeFromPB(n, rev), nil
}

// nodeFromPB is convert.NodeFromPB with the type and version the API shows.
func nodeFromPB(n *pb.Node, rev uint64) *corev1.Node {
	out := convert.NodeFromPB(n, rev)
	out.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
	if rev != 0 {
		out.ResourceVersion = strconv.FormatUint(rev, 10)
	}
	return out
}

func nodeTombstone(key string, _ uint64) runtime.Object {
	name, _ := bus.Untoken(key)
	return &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func (s *Service) nodeSource() *kvSource {
	return &kvSource{js: s.conn.JS, kv: s.nodes, ki: nodeKind, decode: decodeNode, tombstone: nodeTombstone}
}

// serveNodes serves nodes. Unlike pods, nodes have no pipeline: admission writes the nodes bucket itself,
// compare-and-set on the revision it read, and the status service merges heartbeats into the same
// records the same way (see docs/design.md, "Nodes").
func (s *Service) serveNodes(w http.ResponseWriter, r *http.Request, req request) {
	if !clusterScoped(w, r, req) {
		return
	}
	if req.sub != "" && (req.sub != "status" || req.name == "") {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	switch {
	case r.Method == http.MethodGet && (req.watch || req.name == ""):
		s.listOrWatch(w, r, req, s.nodeSource(), ">", func(m matcher) string {
			if name := m.fieldValue("metadata.name"); name != "" {
				return bus.NodeKey(name)
			}
			if req.name != "" {
				return bus.NodeKey(req.name)
			}
			return ""
		})
	case r.Method == http.MethodGet:
		o, _, err := s.nodeSource().get(r.Context(), bus.NodeKey(req.name), req.name)
		if err != nil {
			writeStatus(w, err)
			return
		}
		writeObject(w, http.StatusOK, req, nodeKind, o)
	case r.Method == http.MethodPost && req.name == "":
		s.createNode(w, r, req)
	case (r.Method == http.MethodPatch || r.Method == http.MethodPut) && req.name != "":
		s.updateNode(w, r, req)
	case r.Method == http.MethodDelete && req.name != "" && req.sub == "":
		s.deleteNode(w, r, req)
	default:
		writeStatus(w, methodNotAllowed(grNodes, r.Method))
	}
}

// createNode registers a node straight through the API, as kwok does: the body's spec and status
// (capacity, allocatable, conditions) are stored as given. Such a node has no agent; the status
// service's monitor leaves it alone until an agent heartbeats for it (see status.AnnotationHeartbeat).
func (s *Service) createNode(w http.ResponseWriter, r *http.Request, req request) {
	mode, err := fieldValidation(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	data, err := s.readBody(w, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	data, err = toJSON(data, r.Header.Get("Content-Type"), mode == validationStrict, "Node")
	if err != nil {
		writeStatus(w, err)
		return
	}
	node := &corev1.Node{}
	warnings, err := decodeStrict(data, mode, "Node", node)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if err := checkTypeMeta(node.TypeMeta, "Node"); err != nil {
		writeStatus(w, err)
		return
	}
	if node.Name == "" && node.GenerateName != "" {
		node.Name = generateName(node.GenerateName)
	}
	node.TypeMeta = metav1.TypeMeta{}
	node.UID = types.UID(uuid.NewString())
	node.CreationTimestamp = metav1.NewTime(metav1.Now().Rfc3339Copy().Time)
	node.ResourceVersion = ""
	node.DeletionTimestamp, node.DeletionGracePeriodSeconds = nil, nil
	node.Generation = 0
	if errs := convert.ValidateNode(node); len(errs) > 0 {
		writeStatus(w, apierrors.NewInvalid(gkNode, node.Name, errs))
		return
	}
	n := convert.NodeToPB(node)
	addWarnings(w, warnings)
	if dryRun(req) {
		writeObject(w, http.StatusCreated, req, nodeKind, nodeFromPB(n, 0))
		return
	}
	rev, err := bus.Create(r.Context(), s.nodes, bus.NodeKey(node.Name), n)
	if errors.Is(err, bus.ErrExists) {
		writeStatus(w, apierrors.NewAlreadyExists(grNodes, node.Name))
		return
	}
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("create node %s: %w", node.Name, err)))
		return
	}
	writeObject(w, http.StatusCreated, req, nodeKind, nodeFromPB(n, rev))
}

// updateNode serves PATCH (strategic merge, JSON merge, JSON patch) and PUT of a node and of its status
// subresource. The main resource keeps the stored status; the status subresource keeps metadata and spec.
func (s *Service) updateNode(w http.ResponseWriter, r *http.Request, req request) {
	mode, err := fieldValidation(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	// A resourceVersion in the body is a precondition: then a lost race is the client's Conflict;
	// otherwise the change is applied again on top of the newer node.
	apply, precondition, err := s.updateRequest(w, r, mode, "Node", corev1.Node{}, grNodes)
	if err != nil {
		writeStatus(w, err)
		return
	}
	for attempt := 1; ; attempt++ {
		out, warnings, err := s.updateNodeOnce(r.Context(), req, mode, apply)
		if errors.Is(err, bus.ErrConflict) {
			if !precondition && attempt < nodeUpdateAttempts {
				metrics.Count("admission.update.retries", 1)
				continue
			}
			err = nodeConflict(req.name)
		}
		if err != nil {
			writeStatus(w, err)
			return
		}
		addWarnings(w, warnings)
		writeObject(w, http.StatusOK, req, nodeKind, out)
		return
	}
}

// updateNodeOnce reads the node, applies the change, validates it and writes it back (CAS on the
// revision read). bus.ErrConflict: the node changed in between, or the body's resourceVersion is stale.
func (s *Service) updateNodeOnce(ctx context.Context, req request, mode string, apply func([]byte) ([]byte, error)) (*corev1.Node, []string, error) {
	key := bus.NodeKey(req.name)
	stored := &pb.Node{}
	rev, err := bus.Get(ctx, s.nodes, key, stored)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil, apierrors.NewNotFound(grNodes, req.name)
	}
	if err != nil {
		return nil, nil, err
	}
	old := nodeFromPB(stored, rev)
	cur, err := json.Marshal(old)
	if err != nil {
		return nil, nil, fmt.Errorf("encode node: %w", err)
	}
	patched, err := apply(cur)
	if err != nil {
		return nil, nil, err
	}
	node := &corev1.Node{}
	warnings, err := decodeStrict(patched, mode, "Node", node)
	if err != nil {
		return nil, nil, err
	}
	if err := checkTypeMeta(node.TypeMeta, "Node"); err != nil {
		return nil, nil, err
	}
	switch {
	case node.Name != "" && node.Name != req.name:
		return nil, nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", node.Name, req.name)
	case node.ResourceVersion != "" && node.ResourceVersion != old.ResourceVersion:
		return nil, nil, bus.ErrConflict
	case node.UID != "" && node.UID != old.UID:
		//lint:ignore ST1005 Kubernetes' exact message
		return nil, nil, apierrors.NewConflict(grNodes, req.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", node.UID, old.UID))
	}
	// What the API owns, as the node strategies' PrepareForUpdate keep it.
	node.TypeMeta = old.TypeMeta
	node.Name, node.UID, node.ResourceVersion = old.Name, old.UID, old.ResourceVersion
	node.CreationTimestamp, node.Generation = old.CreationTimestamp, old.Generation
	node.DeletionTimestamp, node.DeletionGracePeriodSeconds = old.DeletionTimestamp, old.DeletionGracePeriodSeconds
	if req.sub == "status" {
		node.ObjectMeta, node.Spec = old.ObjectMeta, old.Spec
	} else {
		node.Status = old.Status
	}
	if equality.Semantic.DeepEqual(node, old) {
		return old, warnings, nil
	}
	if errs := convert.ValidateNodeUpdate(node, old); len(errs) > 0 {
		return nil, nil, apierrors.NewInvalid(gkNode, req.name, errs)
	}
	n := convert.NodeToPB(node)
	if dryRun(req) {
		return nodeFromPB(n, rev), warnings, nil
	}
	newRev, err := bus.Update(ctx, s.nodes, key, n, rev)
	if err != nil {
		return nil, nil, fmt.Errorf("update node %s: %w", req.name, err)
	}
	return nodeFromPB(n, newRev), warnings, nil
}

func nodeConflict(name string) error {
	return apierrors.NewConflict(grNodes, name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// deleteNode removes the node record (CAS). Pods bound to it stay as they are (Kubernetes' pod garbage
// collector would delete them later; podbus has none), and so does its allocation record, so a node
// re-registered under the same name still counts them.
func (s *Service) deleteNode(w http.ResponseWriter, r *http.Request, req request) {
	opts, err := s.deleteOptions(w, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	key := bus.NodeKey(req.name)
	stored := &pb.Node{}
	rev, err := bus.Get(r.Context(), s.nodes, key, stored)
	if errors.Is(err, bus.ErrNotFound) {
		writeStatus(w, apierrors.NewNotFound(grNodes, req.name))
		return
	}
	if err != nil {
		writeStatus(w, err)
		return
	}
	uid := stored.GetMetadata().GetUid()
	if pre := opts.Preconditions; pre != nil {
		if pre.UID != nil && string(*pre.UID) != uid {
			//lint:ignore ST1005 Kubernetes' exact message
			writeStatus(w, apierrors.NewConflict(grNodes, req.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *pre.UID, uid)))
			return
		}
		if pre.ResourceVersion != nil && *pre.ResourceVersion != strconv.FormatUint(rev, 10) {
			//lint:ignore ST1005 Kubernetes' exact message
			writeStatus(w, apierrors.NewConflict(grNodes, req.name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *pre.ResourceVersion, rev)))
			return
		}
	}
	if !dryRun(req) && len(opts.DryRun) == 0 {
		err := bus.Delete(r.Context(), s.nodes, key, rev)
		if errors.Is(err, bus.ErrConflict) {
			writeStatus(w, nodeConflict(req.name))
			return
		}
		if err != nil {
			writeStatus(w, apierrors.NewInternalError(fmt.Errorf("delete node %s: %w", req.name, err)))
			return
		}
	}
	writeJSON(w, http.StatusOK, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: req.name, Kind: "nodes", UID: types.UID(uid)},
	})
}
