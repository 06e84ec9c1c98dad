// Package workload holds what the API server and the workload controllers (services/workloads) share
// about apps/v1 objects: how the apps buckets store them, and the labels and annotations kube's
// controllers use.
//
// A stored ReplicaSet or Deployment is its API JSON plus its pod template already converted to the
// pipeline's form (podbusTemplate: a pb.Pod, defaulted by the API when the object was written), so the
// controllers create pods with the API's defaulting and conversion without importing the API server.
package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"

	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Labels and annotations of kube's deployment controller.
const (
	LabelPodTemplateHash   = appsv1.DefaultDeploymentUniqueLabelKey // "pod-template-hash"
	AnnotationRevision     = "deployment.kubernetes.io/revision"
	AnnotationRevisionHist = "deployment.kubernetes.io/revision-history"
	AnnotationDesired      = "deployment.kubernetes.io/desired-replicas"
	AnnotationMaxReplicas  = "deployment.kubernetes.io/max-replicas"
	AnnotationChangeCause  = "kubernetes.io/change-cause"
	AnnotationLastApplied  = corev1.LastAppliedConfigAnnotation
)

// Encode returns the stored form of obj (without type and resourceVersion) with its converted template.
func Encode(obj any, template *pb.Pod) ([]byte, error) {
	objJSON, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(objJSON, &fields); err != nil {
		return nil, err
	}
	delete(fields, "kind")
	delete(fields, "apiVersion")
	if md, ok := fields["metadata"]; ok {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(md, &m); err == nil {
			delete(m, "resourceVersion")
			if fields["metadata"], err = json.Marshal(m); err != nil {
				return nil, err
			}
		}
	}
	if template != nil {
		t, err := proto.Marshal(template)
		if err != nil {
			return nil, err
		}
		if fields["podbusTemplate"], err = json.Marshal(t); err != nil {
			return nil, err
		}
	}
	return json.Marshal(fields)
}

// Decode reads a stored object into obj and returns its converted template (nil if none was stored).
func Decode(data []byte, obj any) (*pb.Pod, error) {
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, errors.Join(bus.ErrMalformed, err)
	}
	var t struct {
		Template []byte `json:"podbusTemplate"`
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, errors.Join(bus.ErrMalformed, err)
	}
	if len(t.Template) == 0 {
		return nil, nil
	}
	p := &pb.Pod{}
	if err := proto.Unmarshal(t.Template, p); err != nil {
		return nil, errors.Join(bus.ErrMalformed, fmt.Errorf("template: %w", err))
	}
	return p, nil
}

// GroupVersion is apps/v1.
var GroupVersion = schema.GroupVersion{Group: "apps", Version: "v1"}

// TemplateHash is the pod-template-hash of a Deployment's template: stable for equal templates, and
// changed by collisionCount, as kube's ComputeHash. The template is hashed without the label itself.
func TemplateHash(t *corev1.PodTemplateSpec, collisionCount *int32) string {
	c := t.DeepCopy()
	delete(c.Labels, LabelPodTemplateHash)
	data, _ := json.Marshal(c)
	h := fnv.New32a()
	_, _ = h.Write(data)
	if collisionCount != nil {
		_, _ = fmt.Fprintf(h, "/%d", *collisionCount)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// EqualIgnoreHash reports whether two templates are the same but for the pod-template-hash label.
func EqualIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	ca, cb := a.DeepCopy(), b.DeepCopy()
	delete(ca.Labels, LabelPodTemplateHash)
	delete(cb.Labels, LabelPodTemplateHash)
	if len(ca.Labels) == 0 {
		ca.Labels = nil
	}
	if len(cb.Labels) == 0 {
		cb.Labels = nil
	}
	ja, _ := json.Marshal(ca)
	jb, _ := json.Marshal(cb)
	return string(ja) == string(jb)
}
