package admission

import (
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/admission/convert"
)

func decodeNode(_ string, value []byte, rev uint64) (runtime.Object, error) {
	n := &pb.Node{}
	if err := proto.Unmarshal(value, n); err != nil {
		return nil, fmt.Errorf("decode node: %w", errors.Join(bus.ErrMalformed, err))
	}
	out := convert.NodeFromPB(n, rev)
	out.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
	out.ResourceVersion = fmt.Sprint(rev)
	return out, nil
}

func nodeTombstone(key string, _ uint64) runtime.Object {
	name, _ := bus.Untoken(key)
	return &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func (s *Service) nodeSource() *kvSource {
	return &kvSource{js: s.conn.JS, kv: s.nodes, ki: nodeKind, decode: decodeNode, tombstone: nodeTombstone}
}

// serveNodes serves nodes read-only; the status service writes them from the agents' heartbeats.
func (s *Service) serveNodes(w http.ResponseWriter, r *http.Request, req request) {
	if !clusterScoped(w, r, req) {
		return
	}
	switch {
	case req.sub != "":
		writeStatus(w, notFoundPath(r.URL.Path))
	case r.Method != http.MethodGet:
		writeStatus(w, methodNotAllowed(grNodes, r.Method))
	case req.watch || req.name == "":
		s.listOrWatch(w, r, req, s.nodeSource(), ">", func(m matcher) string {
			if name := m.fieldValue("metadata.name"); name != "" {
				return bus.NodeKey(name)
			}
			if req.name != "" {
				return bus.NodeKey(req.name)
			}
			return ""
		})
	default:
		o, _, err := s.nodeSource().get(r.Context(), bus.NodeKey(req.name), req.name)
		if err != nil {
			writeStatus(w, err)
			return
		}
		writeObject(w, http.StatusOK, req, nodeKind, o)
	}
}
