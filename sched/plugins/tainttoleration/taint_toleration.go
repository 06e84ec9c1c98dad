// Package tainttoleration implements Kubernetes' TaintToleration plugin: a node's NoSchedule and
// NoExecute taints must all be tolerated (filter); untolerated PreferNoSchedule taints lower the score.
package tainttoleration

import (
	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "TaintToleration"

// ErrReasonUntolerated is kube-scheduler's filter reason (v1.37): one fixed text per node, whatever
// and however many its untolerated taints, so the message counts nodes rather than taints.
const ErrReasonUntolerated = "node(s) had untolerated taint(s)"

var statusUntolerated = framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonUntolerated)

// TaintToleration is the plugin.
type TaintToleration struct{}

var (
	_ framework.FilterPlugin         = &TaintToleration{}
	_ framework.ScorePlugin          = &TaintToleration{}
	_ framework.NormalizeScorePlugin = &TaintToleration{}
)

// New returns the plugin.
func New() *TaintToleration { return &TaintToleration{} }

// Name implements framework.Plugin.
func (*TaintToleration) Name() string { return Name }

// Filter rejects the node if a NoSchedule or NoExecute taint is not tolerated.
func (*TaintToleration) Filter(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	tols := pod.Pod.GetSpec().GetTolerations()
	for _, t := range node.Taints {
		e := t.GetEffect()
		if e != framework.TaintEffectNoSchedule && e != framework.TaintEffectNoExecute {
			continue
		}
		if !framework.TolerationsTolerateTaint(tols, t) {
			return statusUntolerated
		}
	}
	return nil
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
