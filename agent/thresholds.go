package agent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podbus/podbus/internal/podutil"
)

// Eviction signals, as the kubelet names them (--eviction-hard).
const (
	SignalMemoryAvailable  = "memory.available"
	SignalNodeFSAvailable  = "nodefs.available"
	SignalNodeFSInodesFree = "nodefs.inodesFree"
	SignalImageFSAvailable = "imagefs.available"
	SignalPIDAvailable     = "pid.available"
)

// DefaultEvictionHard is the kubelet's default on Linux.
const DefaultEvictionHard = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%"

// EvictionNone, as Config.EvictionHard or --eviction-hard, turns hard eviction off.
const EvictionNone = "none"

// Node conditions the thresholds drive.
const (
	CondMemoryPressure     = "MemoryPressure"
	CondDiskPressure       = "DiskPressure"
	CondPIDPressure        = "PIDPressure"
	CondNetworkUnavailable = "NetworkUnavailable"
)

// ErrThreshold is returned by ParseThresholds for an unusable --eviction-hard.
var ErrThreshold = errors.New("invalid eviction threshold")

// Threshold is one hard eviction threshold: signal below Quantity, or below Percent of the capacity.
type Threshold struct {
	Signal   string
	Quantity int64   // bytes, inodes or PIDs; used when Percent is 0
	Percent  float64 // of the capacity, 0 < Percent <= 100
	text     string  // as given, for messages ("100Mi", "10%")
}

// signalCondition maps each signal to the node condition it drives.
var signalCondition = map[string]string{
	SignalMemoryAvailable:  CondMemoryPressure,
	SignalNodeFSAvailable:  CondDiskPressure,
	SignalNodeFSInodesFree: CondDiskPressure,
	SignalImageFSAvailable: CondDiskPressure,
	SignalPIDAvailable:     CondPIDPressure,
}

// ParseThresholds parses the kubelet's --eviction-hard syntax: "signal<quantity" or "signal<N%",
// comma separated. "" is no thresholds.
func ParseThresholds(s string) ([]Threshold, error) {
	var out []Threshold
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		sig, val, ok := strings.Cut(part, "<")
		if !ok {
			return nil, fmt.Errorf("%w: %q: want signal<quantity", ErrThreshold, part)
		}
		sig, val = strings.TrimSpace(sig), strings.TrimSpace(val)
		if _, known := signalCondition[sig]; !known {
			return nil, fmt.Errorf("%w: unknown signal %q", ErrThreshold, sig)
		}
		t := Threshold{Signal: sig, text: val}
		if p, isPct := strings.CutSuffix(val, "%"); isPct {
			f, err := strconv.ParseFloat(p, 64)
			if err != nil || f <= 0 || f > 100 {
				return nil, fmt.Errorf("%w: %q: percentage must be in (0, 100]", ErrThreshold, part)
			}
			t.Percent = f
		} else {
			q, err := resource.ParseQuantity(val)
			if err != nil || q.Sign() < 0 {
				return nil, fmt.Errorf("%w: %q: %v", ErrThreshold, part, err)
			}
			t.Quantity = q.Value()
		}
		out = append(out, t)
	}
	return out, nil
}

// Signals are the node's measurements behind the thresholds, each an available amount and the
// capacity it is out of. A capacity of 0 means not measured: thresholds on it never fire.
type Signals struct {
	MemoryAvailable, MemoryCapacity   int64
	NodeFSAvailable, NodeFSCapacity   int64
	InodesFree, Inodes                int64
	ImageFSAvailable, ImageFSCapacity int64
	PIDAvailable, PIDCapacity         int64
}

func (s Signals) of(signal string) (avail, capacity int64) {
	switch signal {
	case SignalMemoryAvailable:
		return s.MemoryAvailable, s.MemoryCapacity
	case SignalNodeFSAvailable:
		return s.NodeFSAvailable, s.NodeFSCapacity
	case SignalNodeFSInodesFree:
		return s.InodesFree, s.Inodes
	case SignalImageFSAvailable:
		return s.ImageFSAvailable, s.ImageFSCapacity
	case SignalPIDAvailable:
		return s.PIDAvailable, s.PIDCapacity
	}
	return 0, 0
}

// Breach is a threshold the node is past.
type Breach struct {
	Threshold Threshold
	Available int64
	Condition string // MemoryPressure, DiskPressure, PIDPressure
}

// Resource names the starved resource as the kubelet's eviction message does.
func (b Breach) Resource() string {
	switch b.Threshold.Signal {
	case SignalMemoryAvailable:
		return podutil.Memory
	case SignalPIDAvailable:
		return "pids"
	case SignalNodeFSInodesFree:
		return "inodes"
	}
	return podutil.EphemeralStorage
}

// Evaluate returns the thresholds s is past, in the order given.
func Evaluate(s Signals, thresholds []Threshold) []Breach {
	var out []Breach
	for _, t := range thresholds {
		avail, capacity := s.of(t.Signal)
		if capacity <= 0 {
			continue
		}
		limit := t.Quantity
		if t.Percent > 0 {
			limit = int64(float64(capacity) * t.Percent / 100)
		}
		if avail < limit {
			out = append(out, Breach{Threshold: t, Available: avail, Condition: signalCondition[t.Signal]})
		}
	}
	return out
}

// quantityText prints an amount of the breach's resource as the kubelet's messages do.
func (b Breach) quantityText(v int64) string {
	switch b.Resource() {
	case "pids", "inodes":
		return strconv.FormatInt(v, 10)
	}
	return resource.NewQuantity(v, resource.BinarySI).String()
}
