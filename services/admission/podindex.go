package admission

import (
	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/wire"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// wireIndex is indexPod read straight from the pod's wire form: the watch cache indexes every change
// of every pod, and decoding one first makes messages and a map it drops at once. The values pods
// share (namespace, node, phase, ...) are interned from their bytes. It reports false, leaving the
// pod to the decoder, for anything but the plain form an encoder writes (a malformed pod, a string
// that is not UTF-8, a field of the wrong wire type, a message field given twice, which a decoder
// merges); TestWireIndexMatchesDecode and FuzzWireIndex hold the two to the same result.
func wireIndex(data []byte) (map[string]string, fields.Set, bool) {
	var (
		labels                                     map[string]string
		name, ip                                   []byte
		ns, node, restart, sched, sa, phase, nomin string
		hostNetwork                                uint64
		seen                                       uint64
	)
	for len(data) > 0 {
		num, typ, v, rest, ok := wire.Next(data)
		if !ok {
			return nil, nil, false
		}
		data = rest
		if num != fPodMeta && num != fPodSpec && num != fPodStatus {
			continue
		}
		if typ != protowire.BytesType || !wire.Once(&seen, num) {
			return nil, nil, false
		}
		for len(v) > 0 {
			n, t, b, r, ok := wire.Next(v)
			if !ok {
				return nil, nil, false
			}
			v = r
			switch {
			case num == fPodMeta && n == fMetaName:
				name, ok = wire.String(t, b)
			case num == fPodMeta && n == fMetaNamespace:
				ns, ok = interned(t, b)
			case num == fPodMeta && n == fMetaLabels:
				var k, val []byte
				if k, val, ok = wire.MapEntry(b); ok && t == protowire.BytesType {
					if labels == nil {
						labels = make(map[string]string, 4)
					}
					labels[string(k)] = string(val)
				} else {
					ok = false
				}
			case num == fPodSpec && n == fSpecNode:
				node, ok = interned(t, b)
			case num == fPodSpec && n == fSpecRestart:
				restart, ok = interned(t, b)
			case num == fPodSpec && n == fSpecScheduler:
				sched, ok = interned(t, b)
			case num == fPodSpec && n == fSpecServiceAccount:
				sa, ok = interned(t, b)
			case num == fPodSpec && n == fSpecHostNetwork:
				hostNetwork, ok = wire.Varint(t, b)
			case num == fPodStatus && n == fStatusPhase:
				phase, ok = interned(t, b)
			case num == fPodStatus && n == fStatusPodIP:
				ip, ok = wire.String(t, b)
			case num == fPodStatus && n == fStatusNominated:
				nomin, ok = interned(t, b)
			}
			if !ok {
				return nil, nil, false
			}
		}
	}
	host := "false"
	if hostNetwork != 0 {
		host = "true"
	}
	return labels, fields.Set{
		"metadata.name":            string(name),
		"metadata.namespace":       ns,
		"spec.nodeName":            node,
		"spec.restartPolicy":       restart,
		"spec.schedulerName":       sched,
		"spec.serviceAccountName":  sa,
		"spec.hostNetwork":         host,
		"status.phase":             phase,
		"status.podIP":             string(ip),
		"status.nominatedNodeName": nomin,
	}, true
}

// interned is a string field's value, interned.
func interned(typ protowire.Type, v []byte) (string, bool) {
	b, ok := wire.String(typ, v)
	return intern.Bytes(b), ok
}

// The numbers of the fields wireIndex reads, from the messages' descriptors.
var (
	fPodMeta, fPodSpec, fPodStatus = wire.Field(&pb.Pod{}, "metadata"), wire.Field(&pb.Pod{}, "spec"), wire.Field(&pb.Pod{}, "status")

	fMetaName, fMetaNamespace = wire.Field(&pb.ObjectMeta{}, "name"), wire.Field(&pb.ObjectMeta{}, "namespace")
	fMetaLabels               = wire.Field(&pb.ObjectMeta{}, "labels")

	fSpecNode, fSpecRestart = wire.Field(&pb.PodSpec{}, "node_name"), wire.Field(&pb.PodSpec{}, "restart_policy")
	fSpecScheduler          = wire.Field(&pb.PodSpec{}, "scheduler_name")
	fSpecServiceAccount     = wire.Field(&pb.PodSpec{}, "service_account_name")
	fSpecHostNetwork        = wire.Field(&pb.PodSpec{}, "host_network")

	fStatusPhase, fStatusPodIP = wire.Field(&pb.PodStatus{}, "phase"), wire.Field(&pb.PodStatus{}, "pod_ip")
	fStatusNominated           = wire.Field(&pb.PodStatus{}, "nominated_node_name")
)
