package admission

import (
	"k8s.io/apimachinery/pkg/fields"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
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
		pf, rest, ok := bus.NextField(data)
		if !ok {
			return nil, nil, false
		}
		data = rest
		if pf.Num != fPodMeta && pf.Num != fPodSpec && pf.Num != fPodStatus {
			continue
		}
		if !pf.FirstOf(&seen) {
			return nil, nil, false
		}
		for v := pf.Value; len(v) > 0; {
			f, r, ok := bus.NextField(v)
			if !ok {
				return nil, nil, false
			}
			v = r
			switch {
			case pf.Num == fPodMeta && f.Num == fMetaName:
				name, ok = f.StringBytes()
			case pf.Num == fPodMeta && f.Num == fMetaNamespace:
				ns, ok = interned(f)
			case pf.Num == fPodMeta && f.Num == fMetaLabels:
				var k, val []byte
				if k, val, ok = f.MapEntry(); ok {
					if labels == nil {
						labels = make(map[string]string, 4)
					}
					labels[string(k)] = string(val)
				}
			case pf.Num == fPodSpec && f.Num == fSpecNode:
				node, ok = interned(f)
			case pf.Num == fPodSpec && f.Num == fSpecRestart:
				restart, ok = interned(f)
			case pf.Num == fPodSpec && f.Num == fSpecScheduler:
				sched, ok = interned(f)
			case pf.Num == fPodSpec && f.Num == fSpecServiceAccount:
				sa, ok = interned(f)
			case pf.Num == fPodSpec && f.Num == fSpecHostNetwork:
				hostNetwork, ok = f.Varint()
			case pf.Num == fPodStatus && f.Num == fStatusPhase:
				phase, ok = interned(f)
			case pf.Num == fPodStatus && f.Num == fStatusPodIP:
				ip, ok = f.StringBytes()
			case pf.Num == fPodStatus && f.Num == fStatusNominated:
				nomin, ok = interned(f)
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

// interned is a string field's value, interned from its bytes.
func interned(f bus.WireField) (string, bool) {
	b, ok := f.StringBytes()
	return intern.Bytes(b), ok
}

// The numbers of the fields wireIndex reads, from the messages' descriptors.
var (
	fPodMeta, fPodSpec, fPodStatus = bus.FieldNumber(&pb.Pod{}, "metadata"), bus.FieldNumber(&pb.Pod{}, "spec"), bus.FieldNumber(&pb.Pod{}, "status")

	fMetaName, fMetaNamespace = bus.FieldNumber(&pb.ObjectMeta{}, "name"), bus.FieldNumber(&pb.ObjectMeta{}, "namespace")
	fMetaLabels               = bus.FieldNumber(&pb.ObjectMeta{}, "labels")

	fSpecNode, fSpecRestart = bus.FieldNumber(&pb.PodSpec{}, "node_name"), bus.FieldNumber(&pb.PodSpec{}, "restart_policy")
	fSpecScheduler          = bus.FieldNumber(&pb.PodSpec{}, "scheduler_name")
	fSpecServiceAccount     = bus.FieldNumber(&pb.PodSpec{}, "service_account_name")
	fSpecHostNetwork        = bus.FieldNumber(&pb.PodSpec{}, "host_network")

	fStatusPhase, fStatusPodIP = bus.FieldNumber(&pb.PodStatus{}, "phase"), bus.FieldNumber(&pb.PodStatus{}, "pod_ip")
	fStatusNominated           = bus.FieldNumber(&pb.PodStatus{}, "nominated_node_name")
)
