package scheduler

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podfields"
	"github.com/podbus/podbus/internal/podutil"
)

// mayWaitForNode reads what waitsForNode needs from a stored pod's wire form, without decoding it,
// and is false only when the pod plainly does not wait: deleted, terminal, or without a first
// PodScheduled condition whose status is False. Anything it cannot read as an encoder writes it (a
// message field given twice, a malformed field, a string that is not UTF-8) is true, as is every pod
// that may wait: the decoder judges those.
func mayWaitForNode(data []byte) bool {
	var seen uint64
	// Every field is read before judging: a decoder merges a message field given twice, so a later
	// status's phase or a later metadata could change what an earlier one says.
	deleted, waits := false, false
	for len(data) > 0 {
		f, rest, ok := bus.NextField(data)
		if !ok {
			return true
		}
		data = rest
		switch f.Num {
		case podfields.PodMeta:
			if !f.FirstOf(&seen) {
				return true
			}
			if deleted, ok = hasDeletion(f.Value); !ok {
				return true
			}
		case podfields.PodStatus:
			if !f.FirstOf(&seen) {
				return true
			}
			waits = statusMayWait(f.Value)
		}
	}
	return !deleted && waits
}

// hasDeletion says whether the metadata's wire form holds a deletion timestamp, which a decoder sets
// whatever its contents; ok is false when it cannot tell.
func hasDeletion(meta []byte) (deleted, ok bool) {
	for len(meta) > 0 {
		f, rest, ok := bus.NextField(meta)
		if !ok {
			return false, false
		}
		meta = rest
		if f.Num == podfields.MetaDeleted {
			if f.Type != protowire.BytesType {
				return false, false
			}
			deleted = true
		}
	}
	return deleted, true
}

// statusMayWait is false when the status's wire form plainly shows no wait: a terminal phase, or a
// first PodScheduled condition not False, or none.
func statusMayWait(st []byte) bool {
	terminal, found, unschedulable := false, false, false
	for len(st) > 0 {
		f, rest, ok := bus.NextField(st)
		if !ok {
			return true
		}
		st = rest
		switch f.Num {
		case podfields.StatusPhase:
			v, ok := f.StringBytes()
			if !ok {
				return true
			}
			terminal = string(v) == "Succeeded" || string(v) == "Failed"
		case podfields.StatusConditions:
			if found {
				continue
			}
			if f.Type != protowire.BytesType {
				return true
			}
			typ, status, ok := conditionTypeStatus(f.Value)
			if !ok {
				return true
			}
			if string(typ) == podutil.PodScheduled {
				found, unschedulable = true, string(status) == podutil.False
			}
		}
	}
	return !terminal && found && unschedulable
}

// conditionTypeStatus reads a condition's type and status as a decoder does (the last of each wins);
// ok is false when it cannot.
func conditionTypeStatus(c []byte) (typ, status []byte, ok bool) {
	for len(c) > 0 {
		f, rest, ok := bus.NextField(c)
		if !ok {
			return nil, nil, false
		}
		c = rest
		switch f.Num {
		case podfields.ConditionType:
			if typ, ok = f.StringBytes(); !ok {
				return nil, nil, false
			}
		case podfields.ConditionStatus:
			if status, ok = f.StringBytes(); !ok {
				return nil, nil, false
			}
		}
	}
	return typ, status, true
}
