// Package convert turns Kubernetes API objects (k8s.io/api/core/v1) into podbus's protobuf messages and
// back, and holds the API's defaulting and validation of pods. It is used only at the API edge.
package convert

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// PodToPB converts an API pod. Fields podbus does not support are reported as warnings
// ("spec.volumes[0].hostPath: not supported by podbus, ignored").
func PodToPB(p *corev1.Pod) (out *pb.Pod, warnings []string) { panic("TODO") }

// PodFromPB converts a stored pod; resourceVersion is the KV revision.
func PodFromPB(p *pb.Pod, revision uint64) *corev1.Pod { panic("TODO") }

// NodeToPB converts an API node.
func NodeToPB(n *corev1.Node) *pb.Node { panic("TODO") }

// NodeFromPB converts a stored node.
func NodeFromPB(n *pb.Node, revision uint64) *corev1.Node { panic("TODO") }

// EventFromPB converts a recorded event; resourceVersion is its stream sequence.
func EventFromPB(e *pb.Event, seq uint64) *corev1.Event { panic("TODO") }

// DefaultPod applies Kubernetes' defaults (restartPolicy, dnsPolicy, terminationGracePeriodSeconds,
// schedulerName, imagePullPolicy, protocol, probe timings, enableServiceLinks, ...).
func DefaultPod(p *corev1.Pod) { panic("TODO") }

// ValidatePod validates a new pod as kube-apiserver does (names, containers, quantities, ...).
func ValidatePod(p *corev1.Pod) field.ErrorList { panic("TODO") }

// ValidatePodUpdate validates an update: only mutable fields may change (images, activeDeadlineSeconds,
// added tolerations, labels, annotations).
func ValidatePodUpdate(newPod, oldPod *corev1.Pod) field.ErrorList { panic("TODO") }
