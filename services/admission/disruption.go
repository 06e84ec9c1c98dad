package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The eviction subresource honours PodDisruptionBudgets as kube-apiserver's does: an eviction spends one
// of the budget's disruptionsAllowed, by compare-and-set on the budget (naming the pod in
// status.disruptedPods, so the disruption controller does not count it healthy while it terminates),
// before the pod is deleted; two concurrent evictions cannot both spend the last one. None left: 429,
// which kubectl drain retries.

// maxDisruptedPods bounds status.disruptedPods, as kube's eviction does.
const maxDisruptedPods = 2000

// errBudget429 is kube's message for an eviction the budget refuses.
const errBudget429 = "Cannot evict pod as it would violate the pod's disruption budget."

// checkDisruption spends the disruption the eviction of pod makes from the one budget covering it.
// A nil error: the pod may be deleted.
func (s *Service) checkDisruption(ctx context.Context, req request, pod *pb.Pod) error {
	md := pod.GetMetadata()
	// A pod that is not running, or already leaving, disrupts nothing.
	if md.GetDeletionTimestamp() != nil || podutil.IsTerminal(pod) || pod.GetStatus().GetPhase() == "Pending" {
		return nil
	}
	_, err := retryConflicts(pdbKind, md.GetName(), false, "admission.eviction.retries", func() (struct{}, error) {
		return struct{}{}, s.spendDisruption(ctx, req, pod)
	})
	return err
}

// spendDisruption is one attempt of checkDisruption; bus.ErrConflict: the budget changed meanwhile.
func (s *Service) spendDisruption(ctx context.Context, req request, pod *pb.Pod) error {
	objs, _, err := s.source(pdbKind).list(ctx, pdbKind.keyFilter(req.ns), matcher{label: labels.Everything(), field: fields.Everything()})
	if err != nil {
		return err
	}
	podLabels := labels.Set(pod.GetMetadata().GetLabels())
	var pdbs []*policyv1.PodDisruptionBudget
	for _, o := range objs {
		p := o.(*policyv1.PodDisruptionBudget)
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || !sel.Matches(podLabels) {
			continue
		}
		pdbs = append(pdbs, p)
	}
	switch {
	case len(pdbs) == 0:
		return nil
	case len(pdbs) > 1:
		//lint:ignore ST1005 Kubernetes' exact message
		return apierrors.NewInternalError(errors.New("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
	}
	pdb := pdbs[0]
	if pdb.Status.ObservedGeneration < pdb.Generation {
		return budgetRefused(fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdb.Name))
	}
	ready := podutil.PodCondition(pod, "Ready").GetStatus() == podutil.True
	if !ready {
		// An unhealthy pod may go while the budget is met (IfHealthyBudget), or always (AlwaysAllow).
		if pol := pdb.Spec.UnhealthyPodEvictionPolicy; pol != nil && *pol == policyv1.AlwaysAllow {
			return nil
		}
		if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
			return nil
		}
	}
	switch {
	case pdb.Status.DisruptionsAllowed < 0:
		return apierrors.NewForbidden(grPods, req.name, errors.New("pdb disruptions allowed is negative"))
	case len(pdb.Status.DisruptedPods) > maxDisruptedPods:
		return apierrors.NewForbidden(grPods, req.name, errors.New("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
	case pdb.Status.DisruptionsAllowed == 0:
		return budgetRefused(fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently",
			pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy))
	}
	if dryRun(req) {
		return nil
	}
	pdb.Status.DisruptionsAllowed--
	if pdb.Status.DisruptedPods == nil {
		pdb.Status.DisruptedPods = map[string]metav1.Time{}
	}
	pdb.Status.DisruptedPods[req.name] = metav1.NewTime(time.Now().Truncate(time.Second))
	rev, err := parseRV(pdb.ResourceVersion)
	if err != nil {
		return err
	}
	_, err = s.writeObject(ctx, pdbKind, pdb, rev)
	return err
}

// budgetRefused is kube's 429 for a budget that allows no disruption now, with its cause.
func budgetRefused(cause string) error {
	err := apierrors.NewTooManyRequests(errBudget429, 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes,
		metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: cause})
	err.ErrStatus.Code = http.StatusTooManyRequests
	return err
}
