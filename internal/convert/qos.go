package convert

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// QOSClass computes the pod's quality-of-service class the way Kubernetes does: only cpu and memory of
// regular and init containers count; Guaranteed when every container has cpu and memory limits and the
// pod's summed requests equal its summed limits, BestEffort when nothing is requested or limited, else
// Burstable. Call it after DefaultPod, which copies limits into missing requests.
func QOSClass(p *corev1.Pod) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	all := append(append([]corev1.Container(nil), p.Spec.Containers...), p.Spec.InitContainers...)
	for _, c := range all {
		sum(requests, c.Resources.Requests)
		found := sum(limits, c.Resources.Limits)
		if !found[corev1.ResourceCPU] || !found[corev1.ResourceMemory] {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// sum adds the positive cpu and memory quantities of l into total and says which were present.
func sum(total, l corev1.ResourceList) map[corev1.ResourceName]bool {
	found := map[corev1.ResourceName]bool{}
	for name, q := range l {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
			continue
		}
		if q.Cmp(resource.Quantity{}) <= 0 {
			continue
		}
		found[name] = true
		v := q.DeepCopy()
		if prev, ok := total[name]; ok {
			v.Add(prev)
		}
		total[name] = v
	}
	return found
}
