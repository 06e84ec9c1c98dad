package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

var podKind = &kind{
	version: "v1", kind: "Pod", resource: "pods", singular: "pod", namespaced: true,
	shortNames: []string{"po"}, categories: []string{"all"},
	newObject: func() runtime.Object { return &corev1.Pod{} },
	columns:   podColumns,
	cells:     func(o runtime.Object) []any { return podRow(o.(*corev1.Pod)) },
	fields: func(o runtime.Object) fields.Set {
		p := o.(*corev1.Pod)
		return fields.Set{
			"metadata.name":            p.Name,
			"metadata.namespace":       p.Namespace,
			"spec.nodeName":            p.Spec.NodeName,
			"spec.restartPolicy":       string(p.Spec.RestartPolicy),
			"spec.schedulerName":       p.Spec.SchedulerName,
			"spec.serviceAccountName":  p.Spec.ServiceAccountName,
			"spec.hostNetwork":         strconv.FormatBool(p.Spec.HostNetwork),
			"status.phase":             string(p.Status.Phase),
			"status.podIP":             p.Status.PodIP,
			"status.nominatedNodeName": p.Status.NominatedNodeName,
		}
	},
	ownField: "status.podIP",
	storage: &kvStorage{
		spec:     bus.BucketSpec{Name: bus.BucketPods},
		pipeline: true,
		encode: func(o runtime.Object) ([]byte, error) {
			p, _ := convert.PodToPB(o.(*corev1.Pod))
			return proto.Marshal(p)
		},
		decode: func(data []byte) (runtime.Object, error) {
			p := &pb.Pod{}
			if err := proto.Unmarshal(data, p); err != nil {
				return nil, errors.Join(bus.ErrMalformed, err)
			}
			return convert.PodFromPB(p, 0), nil
		},
		index: indexPod,
	},
	subresources: []subresourceInfo{
		{name: "status", kind: "Pod", verbs: []string{"get"}},
		{name: "log", kind: "Pod", verbs: []string{"get"}},
		// kubectl drain evicts through this when discovery lists it (policy/v1).
		{name: "eviction", kind: "Eviction", group: "policy", verbs: []string{"create"}},
		{name: "exec", kind: "PodExecOptions", verbs: []string{"create", "get"}},
		{name: "attach", kind: "PodAttachOptions", verbs: []string{"create", "get"}},
		{name: "portforward", kind: "PodPortForwardOptions", verbs: []string{"create", "get"}},
	},
}

// podIndexMask is what the watch cache indexes of a pod: its labels and podFieldsPB's fields.
var podIndexMask = bus.NewMask(&pb.Pod{}, "metadata.name", "metadata.namespace", "metadata.labels",
	"spec.node_name", "spec.restart_policy", "spec.scheduler_name", "spec.service_account_name",
	"spec.host_network", "status.phase", "status.pod_ip", "status.nominated_node_name")

// indexPod is a stored pod's labels and fields, decoding only those: the watch cache indexes every
// change of every pod.
func indexPod(data []byte) (map[string]string, fields.Set, error) {
	if labels, f, ok := wireIndex(data); ok {
		return labels, f, nil
	}
	return decodeIndex(data)
}

// decodeIndex is indexPod through the decoder, which takes any form of the pod.
func decodeIndex(data []byte) (map[string]string, fields.Set, error) {
	pruned, ok := bus.Prune(data, podIndexMask)
	if !ok {
		return nil, nil, fmt.Errorf("pod: %w", bus.ErrMalformed)
	}
	p := &pb.Pod{}
	if err := proto.Unmarshal(pruned, p); err != nil {
		return nil, nil, errors.Join(bus.ErrMalformed, err)
	}
	return p.GetMetadata().GetLabels(), podFieldsPB(p), nil
}

// podFieldsPB is podKind's fields of a stored pod, as they read on the pod convert.PodFromPB makes.
func podFieldsPB(p *pb.Pod) fields.Set {
	return fields.Set{
		"metadata.name":            p.GetMetadata().GetName(),
		"metadata.namespace":       p.GetMetadata().GetNamespace(),
		"spec.nodeName":            p.GetSpec().GetNodeName(),
		"spec.restartPolicy":       p.GetSpec().GetRestartPolicy(),
		"spec.schedulerName":       p.GetSpec().GetSchedulerName(),
		"spec.serviceAccountName":  p.GetSpec().GetServiceAccountName(),
		"spec.hostNetwork":         strconv.FormatBool(p.GetSpec().GetHostNetwork()),
		"status.phase":             p.GetStatus().GetPhase(),
		"status.podIP":             p.GetStatus().GetPodIp(),
		"status.nominatedNodeName": p.GetStatus().GetNominatedNodeName(),
	}
}

// podFromPB is convert.PodFromPB with the type and version the API shows.
func podFromPB(p *pb.Pod, rev uint64) *corev1.Pod {
	out := convert.PodFromPB(p, rev)
	podKind.stamp(out, rev)
	return out
}

// updateAttempts bounds the re-read-and-retry loop of a PATCH that lost a race in the store.
const updateAttempts = 5

// createPod is step 1 of the pipeline: decode, default, validate, and hand the pod to the store.
func (s *Service) createPod(w http.ResponseWriter, r *http.Request, req request) {
	start := time.Now()
	pod, warnings, err := s.decodePodBody(w, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if pod.Namespace == "" {
		pod.Namespace = req.ns
	} else if pod.Namespace != req.ns {
		writeStatus(w, badRequest("the namespace of the provided object does not match the namespace sent on the request"))
		return
	}
	if pod.Name == "" && pod.GenerateName != "" {
		pod.Name = generateName(pod.GenerateName)
	}
	if err := s.admitNamespace(r.Context(), podKind, pod.Name, req.ns); err != nil {
		writeStatus(w, err)
		return
	}
	// The Priority admission plugin (kube runs it after defaulting, which leaves priority alone; here
	// DefaultPod would fill it in, so the plugin goes first).
	if err := s.cfg.PriorityClasses.AdmitPod(pod); err != nil {
		msg := strings.TrimPrefix(err.Error(), convert.ErrPriorityClass.Error()+": ")
		writeStatus(w, apierrors.NewForbidden(grPods, pod.Name, errors.New(msg)))
		return
	}
	convert.DefaultPod(pod)
	// Server-owned fields, as the pod strategy's PrepareForCreate sets them.
	now := metav1.Now()
	pod.UID = types.UID(uuid.NewString())
	pod.CreationTimestamp = metav1.NewTime(now.Rfc3339Copy().Time)
	pod.ResourceVersion = ""
	pod.DeletionTimestamp = nil
	pod.DeletionGracePeriodSeconds = nil
	pod.Generation = 1
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: convert.QOSClass(pod)}
	if errs := convert.ValidatePod(pod); len(errs) > 0 {
		writeStatus(w, apierrors.NewInvalid(gkPod, pod.Name, errs))
		return
	}
	p, convWarnings := convert.PodToPB(pod)
	warnings = append(warnings, convWarnings...)
	correlation := uuid.NewString()
	p.Internal = &pb.PodInternal{CorrelationId: correlation}
	if err := s.checkObjectSize(proto.Size(p)); err != nil {
		writeStatus(w, err)
		return
	}
	addWarnings(w, warnings)
	if dryRun(req) {
		writeObject(w, http.StatusCreated, req, podKind, podFromPB(p, 0))
		return
	}
	uid := string(pod.UID)
	res, err := s.command(r.Context(), bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, Pod: p, User: req.user.Name, OmitSentPod: true}, bus.Meta{
		MsgID: "create-" + uid, Correlation: correlation, PodUID: uid, Key: pod.Namespace + "/" + pod.Name, User: req.user.Name,
	}, func(ctx context.Context) (*pb.CommandResult, bool) {
		return s.createdAfterAll(ctx, pod.Namespace, pod.Name, uid)
	})
	if err != nil {
		writeStatus(w, commandError(err))
		return
	}
	if res.GetCode() >= 300 {
		writeStatus(w, resultError(res, pod.Name))
		return
	}
	code := int(res.GetCode())
	if code == 0 {
		code = http.StatusCreated
	}
	metrics.StageAdmission.Since(start)
	stored := res.GetPod()
	if res.GetPodAsSent() {
		stored = p
	}
	writeObject(w, code, req, podKind, podFromPB(stored, res.GetRevision()))
}

// The looks of command (service.go) for a command whose answer has not come: each reads the pod's key
// (from the leader, as every bucket read) and answers from it when what is stored shows the command's
// effect; anything else leaves the outcome unknown (504 at the reply timeout). The command is never
// sent again: a command still on its way may yet take effect, and one sent twice could act twice.

// createdAfterAll: the pod stored under the name with the create's uid is that create's.
func (s *Service) createdAfterAll(ctx context.Context, ns, name, uid string) (*pb.CommandResult, bool) {
	stored, rev, err := s.readAfterAll(ctx, ns, name)
	if err != nil || stored.GetMetadata().GetUid() != uid {
		return nil, false
	}
	s.answeredFromBucket("create", ns, name, uid)
	return &pb.CommandResult{Code: http.StatusCreated, Pod: stored, Revision: rev}, true
}

// updatedAfterAll: the same pod (uid) at a later revision than the one the update was made against,
// holding what the store writes for the update (podutil.MergeUpdate over what is stored now), has the
// update's effect. A later update that only changed status still matches; one that changed metadata or
// spec does not, and the outcome stays unknown.
func (s *Service) updatedAfterAll(ctx context.Context, ns, name, uid string, rev uint64, sent *pb.Pod) (*pb.CommandResult, bool) {
	stored, cur, err := s.readAfterAll(ctx, ns, name)
	if err != nil || stored.GetMetadata().GetUid() != uid || cur <= rev ||
		!proto.Equal(podutil.MergeUpdate(stored, sent), stored) {
		return nil, false
	}
	s.answeredFromBucket("update", ns, name, uid)
	return &pb.CommandResult{Code: http.StatusOK, Pod: stored, Revision: cur}, true
}

// deletedAfterAll: the pod (uid) gone, or marked for deletion where it was not when the delete was sent,
// is deleted; kube-apiserver answers a delete of a terminating pod with the pod, as here. The answer
// for a pod already gone is the pod as the API read it before sending the delete.
func (s *Service) deletedAfterAll(ctx context.Context, ns, name string, before *pb.Pod) (*pb.CommandResult, bool) {
	uid := before.GetMetadata().GetUid()
	stored, cur, err := s.readAfterAll(ctx, ns, name)
	switch {
	case errors.Is(err, bus.ErrNotFound), err == nil && stored.GetMetadata().GetUid() != uid:
		s.answeredFromBucket("delete", ns, name, uid)
		return &pb.CommandResult{Code: http.StatusOK}, true
	case err == nil && before.GetMetadata().GetDeletionTimestamp() == nil && stored.GetMetadata().GetDeletionTimestamp() != nil:
		s.answeredFromBucket("delete", ns, name, uid)
		return &pb.CommandResult{Code: http.StatusOK, Pod: stored, Revision: cur}, true
	}
	return nil, false
}

// readAfterAll reads the pod within afterAllTimeout.
func (s *Service) readAfterAll(ctx context.Context, ns, name string) (*pb.Pod, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, afterAllTimeout)
	defer cancel()
	stored := &pb.Pod{}
	rev, err := bus.Get(ctx, s.pods, bus.PodKey(ns, name), stored)
	return stored, rev, err
}

func (s *Service) answeredFromBucket(op, ns, name, uid string) {
	metrics.Count("admission."+op+".answered_from_bucket", 1)
	s.log.Info("the store's answer to a "+op+" did not come; the bucket shows its effect", "pod", ns+"/"+name, "uid", uid)
}

// afterAllTimeout bounds a look's read: at the reply timeout, the request has already waited that long.
const afterAllTimeout = 5 * time.Second

// decodePodBody reads and decodes a pod from the request body.
func (s *Service) decodePodBody(w http.ResponseWriter, r *http.Request) (*corev1.Pod, []string, error) {
	o, warnings, err := s.decodeBody(w, r, podKind)
	if err != nil {
		return nil, nil, err
	}
	pod := o.(*corev1.Pod)
	pod.TypeMeta = metav1.TypeMeta{}
	return pod, warnings, nil
}

// commandError maps a failure to reach the store onto a Status.
func commandError(err error) error {
	if errors.Is(err, ErrReplyTimeout) {
		return apierrors.NewTimeoutError("request did not complete within requested timeout - the store may still "+
			"carry it out", 0)
	}
	return apierrors.NewInternalError(err)
}

func dryRun(req request) bool {
	for _, v := range req.q["dryRun"] {
		if v == metav1.DryRunAll {
			return true
		}
	}
	return false
}

// generateName appends five random characters, as the apiserver's name generator does.
func generateName(base string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	const maxBase = 63 - 5
	if len(base) > maxBase {
		base = base[:maxBase]
	}
	b := []byte(base)
	for range 5 {
		b = append(b, alphabet[rand.IntN(len(alphabet))])
	}
	return string(b)
}

// updatePod serves PATCH (strategic merge, JSON merge, JSON patch) and PUT of a pod.
func (s *Service) updatePod(w http.ResponseWriter, r *http.Request, req request) {
	mode, err := fieldValidation(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	// A resourceVersion in the body is a precondition: then a lost race is the client's Conflict.
	apply, precondition, err := s.updateRequest(w, r, mode, podKind, corev1.Pod{})
	if err != nil {
		writeStatus(w, err)
		return
	}
	key := bus.PodKey(req.ns, req.name)
	ctx := r.Context()
	for attempt := 1; ; attempt++ {
		res, warnings, err := s.updateOnce(ctx, req, key, mode, apply)
		if err != nil {
			writeStatus(w, err)
			return
		}
		if res.code == http.StatusConflict && !precondition && attempt < updateAttempts {
			metrics.Count("admission.update.retries", 1)
			continue
		}
		addWarnings(w, warnings)
		if res.err != nil {
			writeStatus(w, res.err)
			return
		}
		writeObject(w, http.StatusOK, req, podKind, res.pod)
		return
	}
}

type updateResult struct {
	code int
	err  error
	pod  *corev1.Pod
}

// updateOnce reads the pod, applies the change, validates it and sends the update to the store.
func (s *Service) updateOnce(ctx context.Context, req request, key, mode string, apply func([]byte) ([]byte, error)) (updateResult, []string, error) {
	stored := &pb.Pod{}
	rev, err := bus.Get(ctx, s.pods, key, stored)
	if errors.Is(err, bus.ErrNotFound) {
		return updateResult{}, nil, apierrors.NewNotFound(grPods, req.name)
	}
	if err != nil {
		return updateResult{}, nil, err
	}
	old := podFromPB(stored, rev)
	o, warnings, err := applyUpdate(req, mode, old, apply)
	if errors.Is(err, bus.ErrConflict) {
		return updateResult{code: http.StatusConflict, err: conflictError(podKind, req.name)}, nil, nil
	}
	if err != nil {
		return updateResult{}, nil, err
	}
	// Status has its own subresource.
	pod := o.(*corev1.Pod)
	pod.Status = old.Status
	convert.DefaultPod(pod)
	if equality.Semantic.DeepEqual(pod, old) {
		return updateResult{code: http.StatusOK, pod: old}, warnings, nil
	}
	if errs := convert.ValidatePodUpdate(pod, old); len(errs) > 0 {
		return updateResult{}, nil, apierrors.NewInvalid(gkPod, req.name, errs)
	}
	p, convWarnings := convert.PodToPB(pod)
	warnings = append(warnings, convWarnings...)
	p.Internal = stored.GetInternal()
	if err := s.checkObjectSize(proto.Size(p)); err != nil {
		return updateResult{}, nil, err
	}
	if dryRun(req) {
		return updateResult{code: http.StatusOK, pod: podFromPB(p, rev)}, warnings, nil
	}
	correlation := stored.GetInternal().GetCorrelationId()
	// A de-duplication id of the request's own, so that the batcher may send the command again when its
	// acknowledgement is lost; two requests for the same change are two commands.
	res, err := s.command(ctx, bus.SubjPodUpdate, &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: p, ExpectedRevision: rev, User: req.user.Name}, bus.Meta{
		MsgID: "update-" + uuid.NewString(), Correlation: correlation, PodUID: string(old.UID), Key: req.ns + "/" + req.name, User: req.user.Name,
	}, func(ctx context.Context) (*pb.CommandResult, bool) {
		return s.updatedAfterAll(ctx, req.ns, req.name, string(old.UID), rev, p)
	})
	if err != nil {
		return updateResult{}, nil, commandError(err)
	}
	if res.GetCode() >= 300 {
		return updateResult{code: int(res.GetCode()), err: resultError(res, req.name)}, warnings, nil
	}
	return updateResult{code: http.StatusOK, pod: podFromPB(res.GetPod(), res.GetRevision())}, warnings, nil
}

// deletePod sends a delete command; the store deletes unbound pods at once and marks bound ones
// terminating, so the answer is the object as the store left it.
func (s *Service) deletePod(w http.ResponseWriter, r *http.Request, req request) {
	opts, err := s.deleteOptions(w, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if v := req.q.Get("gracePeriodSeconds"); v != "" && opts.GracePeriodSeconds == nil {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeStatus(w, badRequest("invalid gracePeriodSeconds %q", v))
			return
		}
		opts.GracePeriodSeconds = &n
	}
	out, err := s.deletePodWith(r.Context(), req, opts, "")
	if err != nil {
		writeStatus(w, err)
		return
	}
	writeObject(w, http.StatusOK, req, podKind, out)
}

// deletePodWith checks the delete options and preconditions and sends the delete command, with reason
// (the eviction's, for the DisruptionTarget condition and the audit log) if any; it returns the pod as
// the store left it.
func (s *Service) deletePodWith(ctx context.Context, req request, opts metav1.DeleteOptions, reason string) (runtime.Object, error) {
	if opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds < 0 {
		return nil, apierrors.NewInvalid(gkPod, req.name, nil)
	}
	opts.DryRun = append(opts.DryRun, req.q["dryRun"]...)
	stored := &pb.Pod{}
	rev, err := bus.Get(ctx, s.pods, bus.PodKey(req.ns, req.name), stored)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, apierrors.NewNotFound(grPods, req.name)
	}
	if err != nil {
		return nil, err
	}
	cmd := &pb.PodCommand{
		Op:                 pb.PodCommand_OP_DELETE,
		Pod:                &pb.Pod{Metadata: &pb.ObjectMeta{Name: req.name, Namespace: req.ns, Uid: stored.GetMetadata().GetUid()}},
		GracePeriodSeconds: opts.GracePeriodSeconds,
		User:               req.user.Name,
		Reason:             reason,
	}
	if pre := opts.Preconditions; pre != nil {
		if pre.UID != nil {
			if string(*pre.UID) != stored.GetMetadata().GetUid() {
				//lint:ignore ST1005 Kubernetes' exact message
				return nil, apierrors.NewConflict(grPods, req.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *pre.UID, stored.GetMetadata().GetUid()))
			}
			cmd.PreconditionUid = string(*pre.UID)
		}
		if pre.ResourceVersion != nil {
			want, err := parseRV(*pre.ResourceVersion)
			if err != nil || want != rev {
				//lint:ignore ST1005 Kubernetes' exact message
				return nil, apierrors.NewConflict(grPods, req.name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *pre.ResourceVersion, rev))
			}
			cmd.ExpectedRevision = rev
		}
	}
	if len(opts.DryRun) > 0 {
		return podFromPB(stored, rev), nil
	}
	res, err := s.command(ctx, bus.SubjPodDelete, cmd, bus.Meta{
		MsgID: "delete-" + uuid.NewString(), Correlation: stored.GetInternal().GetCorrelationId(), PodUID: stored.GetMetadata().GetUid(), Key: req.ns + "/" + req.name, User: req.user.Name,
	}, func(ctx context.Context) (*pb.CommandResult, bool) {
		return s.deletedAfterAll(ctx, req.ns, req.name, stored)
	})
	if err != nil {
		return nil, commandError(err)
	}
	if res.GetCode() >= 300 {
		return nil, resultError(res, req.name)
	}
	if res.GetPod() != nil {
		return podFromPB(res.GetPod(), res.GetRevision()), nil
	}
	return podFromPB(stored, rev), nil
}

// updateRequest reads an update's body and returns the change to apply to the stored object's JSON: the
// body itself for PUT, the patch for PATCH (strategic merge, JSON merge or JSON patch against dataStruct),
// and whether the body names a resourceVersion (a precondition: a lost race is then the client's Conflict).
func (s *Service) updateRequest(w http.ResponseWriter, r *http.Request, mode string, k *kind, dataStruct any) (apply func(cur []byte) ([]byte, error), precondition bool, err error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, false, err
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Method == http.MethodPut {
		js, err := toJSON(body, ct, mode == validationStrict, k)
		if err != nil {
			return nil, false, err
		}
		apply = func([]byte) ([]byte, error) { return js, nil }
	} else if apply, err = s.patcher(ct, body, dataStruct, k.gr()); err != nil {
		return nil, false, err
	}
	return apply, bytes.Contains(body, []byte("resourceVersion")), nil
}

var deleteOptionsKind = &kind{version: "v1", kind: "DeleteOptions", newObject: func() runtime.Object { return &metav1.DeleteOptions{} }}

// deleteOptions reads a DELETE's optional DeleteOptions body.
func (s *Service) deleteOptions(w http.ResponseWriter, r *http.Request) (metav1.DeleteOptions, error) {
	var opts metav1.DeleteOptions
	body, err := s.readBody(w, r)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return opts, err
	}
	js, err := toJSON(body, r.Header.Get("Content-Type"), false, deleteOptionsKind)
	if err == nil {
		err = json.Unmarshal(js, &opts)
	}
	if err != nil {
		return opts, badRequest("invalid DeleteOptions: %v", err)
	}
	return opts, nil
}
