package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The disruption controller keeps each PodDisruptionBudget's status in line with its pods, as kube's
// does: healthy pods are Ready ones not being deleted and not named in disruptedPods (evictions the
// API granted that the pods' deletion has not shown yet). podbus takes the expected count from the
// pods matching the selector, also for maxUnavailable and percentages (kube asks their controllers'
// scale).

// disruptedTimeout is how long an eviction named in disruptedPods is waited for, as kube's DeletionTimeout.
const disruptedTimeout = 2 * time.Minute

func (s *Service) syncPDB(ctx context.Context, key string) error {
	e := s.pdbs[key]
	if e == nil || e.pdb.DeletionTimestamp != nil {
		return nil
	}
	pdb := e.pdb
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		sel = labels.Nothing()
	}
	var pods []*pb.Pod
	for _, pe := range s.pods {
		if pe.ns == pdb.Namespace && sel.Matches(pe.labels) {
			pods = append(pods, pe.pod())
		}
	}
	status := pdbStatus(pdb, pods, s.cfg.now())
	if equality.Semantic.DeepEqual(status, pdb.Status) {
		return nil
	}
	next := pdb.DeepCopy()
	next.Status = status
	next.ResourceVersion = ""
	data, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("encode pdb %s: %w", key, err)
	}
	_, err = bus.UpdateEncoded(ctx, s.kv[bus.BucketPDBs], key, data, e.rev)
	if errors.Is(err, bus.ErrConflict) {
		return nil // an eviction or another replica wrote first: the watch brings it
	}
	return err
}

// pdbStatus is the status a budget should have with pods, the pods its selector matches.
func pdbStatus(pdb *policyv1.PodDisruptionBudget, pods []*pb.Pod, now time.Time) policyv1.PodDisruptionBudgetStatus {
	disrupted := map[string]metav1.Time{}
	present := map[string]*pb.Pod{}
	for _, p := range pods {
		present[p.GetMetadata().GetName()] = p
	}
	for name, at := range pdb.Status.DisruptedPods {
		p := present[name]
		if p == nil || p.GetMetadata().GetDeletionTimestamp() != nil || now.Sub(at.Time) > disruptedTimeout {
			continue
		}
		disrupted[name] = at
	}
	expected := int32(len(pods))
	var healthy int32
	for _, p := range pods {
		if _, ok := disrupted[p.GetMetadata().GetName()]; ok || p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if podutil.PodCondition(p, "Ready").GetStatus() == podutil.True {
			healthy++
		}
	}
	var desired int32
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		desired = max(0, expected-scaled(pdb.Spec.MaxUnavailable, expected))
	case pdb.Spec.MinAvailable != nil:
		desired = scaled(pdb.Spec.MinAvailable, expected)
	default:
		desired = min(1, expected)
	}
	allowed := max(0, healthy-desired)
	st := policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation,
		CurrentHealthy:     healthy,
		DesiredHealthy:     desired,
		ExpectedPods:       expected,
		DisruptionsAllowed: allowed,
	}
	if len(disrupted) > 0 {
		st.DisruptedPods = disrupted
	}
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue,
		Reason: policyv1.SufficientPodsReason, ObservedGeneration: pdb.Generation}
	if allowed == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
	}
	cond.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	for _, c := range pdb.Status.Conditions {
		if c.Type == cond.Type && c.Status == cond.Status {
			cond.LastTransitionTime = c.LastTransitionTime
		}
	}
	st.Conditions = []metav1.Condition{cond}
	return st
}

// scaled is a count, or a percentage of total rounded up.
func scaled(v *intstr.IntOrString, total int32) int32 {
	if v.Type == intstr.Int {
		return v.IntVal
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, int(total), true)
	if err != nil {
		return math.MaxInt32
	}
	return int32(n)
}
