package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/bus"
)

// Namespaces are not stored: the well-known ones always exist, and any namespace that has pods.
var fixedNamespaces = []string{"default", "kube-node-lease", "kube-public", "kube-system"}

// bootTime stands in for the creation time of namespaces nobody created.
var bootTime = metav1.NewTime(time.Now().Truncate(time.Second))

func namespaceObject(name string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			UID:               "",
			CreationTimestamp: bootTime,
			Labels:            map[string]string{"kubernetes.io/metadata.name": name},
		},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
}

// namespaces lists the namespace names in use.
func (s *Service) namespaces(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	out := []string{}
	for _, n := range fixedNamespaces {
		seen[n] = true
		out = append(out, n)
	}
	keys, err := s.pods.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pod keys: %w", err)
	}
	defer func() { _ = keys.Stop() }()
	for k := range keys.Keys() {
		if ns, _, ok := bus.SplitPodKey(k); ok && !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	return out, nil
}

func (s *Service) serveNamespaces(w http.ResponseWriter, r *http.Request, req request) {
	if req.sub != "" {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if r.Method != http.MethodGet || req.watch {
		writeStatus(w, methodNotAllowed(grNamespaces, r.Method))
		return
	}
	m, err := newMatcher(req.q, namespaceKind)
	if err != nil {
		writeStatus(w, err)
		return
	}
	names, err := s.namespaces(r.Context())
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		writeStatus(w, err)
		return
	}
	if len(names) == 0 {
		names = fixedNamespaces
	}
	if req.name != "" {
		for _, n := range names {
			if n == req.name {
				writeObject(w, http.StatusOK, req, namespaceKind, namespaceObject(n))
				return
			}
		}
		writeStatus(w, apierrors.NewNotFound(grNamespaces, req.name))
		return
	}
	var objs []runtime.Object
	for _, n := range names {
		if o := namespaceObject(n); m.matches(namespaceKind, o) {
			objs = append(objs, o)
		}
	}
	writeList(w, req, namespaceKind, objs, 0)
}
