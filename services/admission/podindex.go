package admission

import (
	"k8s.io/apimachinery/pkg/fields"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podfields"
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
		if pf.Num != podfields.PodMeta && pf.Num != podfields.PodSpec && pf.Num != podfields.PodStatus {
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
			case pf.Num == podfields.PodMeta && f.Num == podfields.MetaName:
				name, ok = f.StringBytes()
			case pf.Num == podfields.PodMeta && f.Num == podfields.MetaNamespace:
				ns, ok = podfields.Interned(f)
			case pf.Num == podfields.PodMeta && f.Num == podfields.MetaLabels:
				var k, val []byte
				if k, val, ok = f.MapEntry(); ok {
					if labels == nil {
						labels = make(map[string]string, 4)
					}
					labels[string(k)] = string(val)
				}
			case pf.Num == podfields.PodSpec && f.Num == podfields.SpecNode:
				node, ok = podfields.Interned(f)
			case pf.Num == podfields.PodSpec && f.Num == podfields.SpecRestart:
				restart, ok = podfields.Interned(f)
			case pf.Num == podfields.PodSpec && f.Num == podfields.SpecScheduler:
				sched, ok = podfields.Interned(f)
			case pf.Num == podfields.PodSpec && f.Num == podfields.SpecServiceAccount:
				sa, ok = podfields.Interned(f)
			case pf.Num == podfields.PodSpec && f.Num == podfields.SpecHostNetwork:
				hostNetwork, ok = f.Varint()
			case pf.Num == podfields.PodStatus && f.Num == podfields.StatusPhase:
				phase, ok = podfields.Interned(f)
			case pf.Num == podfields.PodStatus && f.Num == podfields.StatusPodIP:
				ip, ok = f.StringBytes()
			case pf.Num == podfields.PodStatus && f.Num == podfields.StatusNominated:
				nomin, ok = podfields.Interned(f)
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
