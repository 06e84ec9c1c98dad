// Package tainttoleration implements Kubernetes' TaintToleration plugin: a node's NoSchedule and
// NoExecute taints must all be tolerated (filter); untolerated PreferNoSchedule taints lower the score.
package tainttoleration

import (
	"fmt"
	"sync"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "TaintToleration"

// ErrReasonUntoleratedFormat is Kubernetes' reason for the first untolerated taint: its key and value.
const ErrReasonUntoleratedFormat = "node(s) had untolerated taint {%s: %s}"

// Reason returns the filter reason for an untolerated taint.
func Reason(t *pb.Taint) string {
	return fmt.Sprintf(ErrReasonUntoleratedFormat, t.GetKey(), t.GetValue())
}

// TaintToleration is the plugin.
type TaintToleration struct {
	// statuses caches rejections per taint so that a tainted node costs no allocation per pod.
	mu       sync.RWMutex
	statuses map[taintID]*framework.Status
}

type taintID struct{ key, value string }

var (
	_ framework.FilterPlugin         = &TaintToleration{}
	_ framework.ScorePlugin          = &TaintToleration{}
	_ framework.NormalizeScorePlugin = &TaintToleration{}
)

// New returns the plugin.
func New() *TaintToleration { return &TaintToleration{statuses: map[taintID]*framework.Status{}} }

// Name implements framework.Plugin.
func (*TaintToleration) Name() string { return Name }

// Filter rejects the node if a NoSchedule or NoExecute taint is not tolerated.
func (p *TaintToleration) Filter(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	tols := pod.Pod.GetSpec().GetTolerations()
	for _, t := range node.Taints {
		e := t.GetEffect()
		if e != framework.TaintEffectNoSchedule && e != framework.TaintEffectNoExecute {
			continue
		}
		if !framework.TolerationsTolerateTaint(tols, t) {
			return p.status(t)
		}
	}
	return nil
}

// maxCached bounds the status cache; taints beyond it allocate their status each time.
const maxCached = 1024

func (p *TaintToleration) status(t *pb.Taint) *framework.Status {
	id := taintID{t.GetKey(), t.GetValue()}
	p.mu.RLock()
	st, ok := p.statuses[id]
	p.mu.RUnlock()
	if ok {
		return st
	}
	st = framework.NewStatus(framework.UnschedulableAndUnresolvable, Reason(t))
	p.mu.Lock()
	if len(p.statuses) < maxCached {
		p.statuses[id] = st
	}
	p.mu.Unlock()
	return st
}

// Score counts the PreferNoSchedule taints not tolerated by the pod's tolerations whose effect is
// empty or PreferNoSchedule (NormalizeScore turns "fewer" into "higher").
func (*TaintToleration) Score(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	var n int64
	tols := pod.Pod.GetSpec().GetTolerations()
	for _, t := range node.Taints {
		if t.GetEffect() != framework.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for _, tol := range tols {
			if e := tol.GetEffect(); e != "" && e != framework.TaintEffectPreferNoSchedule {
				continue
			}
			if framework.ToleratesTaint(tol, t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			n++
		}
	}
	return n, nil
}

// NormalizeScore reverses the counts onto 0..100: no untolerated taint scores 100.
func (*TaintToleration) NormalizeScore(_ *framework.CycleState, _ *framework.PodInfo, scores []framework.NodeScore) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, true, scores)
	return nil
}
