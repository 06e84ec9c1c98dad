package convert

import (
	corev1 "k8s.io/api/core/v1"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// NodeToPB converts an API node.
func NodeToPB(n *corev1.Node) *pb.Node {
	if n == nil {
		return nil
	}
	spec := &pb.NodeSpec{
		PodCidr:       n.Spec.PodCIDR,
		PodCidrs:      copyStrings(n.Spec.PodCIDRs),
		ProviderId:    n.Spec.ProviderID,
		Unschedulable: n.Spec.Unschedulable,
	}
	for _, t := range n.Spec.Taints {
		spec.Taints = append(spec.Taints, &pb.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect), TimeAdded: toTSPtr(t.TimeAdded)})
	}
	st := &n.Status
	status := &pb.NodeStatus{
		Capacity:    resourceListToPB(st.Capacity),
		Allocatable: resourceListToPB(st.Allocatable),
		Phase:       string(st.Phase),
	}
	for _, c := range st.Conditions {
		status.Conditions = append(status.Conditions, &pb.NodeCondition{
			Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message,
			LastHeartbeatTime: toTS(c.LastHeartbeatTime), LastTransitionTime: toTS(c.LastTransitionTime),
		})
	}
	for _, a := range st.Addresses {
		status.Addresses = append(status.Addresses, &pb.NodeAddress{Type: string(a.Type), Address: a.Address})
	}
	if st.NodeInfo != (corev1.NodeSystemInfo{}) {
		i := st.NodeInfo
		status.NodeInfo = &pb.NodeSystemInfo{
			MachineId: i.MachineID, SystemUuid: i.SystemUUID, BootId: i.BootID, KernelVersion: i.KernelVersion,
			OsImage: i.OSImage, ContainerRuntimeVersion: i.ContainerRuntimeVersion, KubeletVersion: i.KubeletVersion,
			//lint:ignore SA1019 deprecated, but still part of the v1 API
			KubeProxyVersion: i.KubeProxyVersion, OperatingSystem: i.OperatingSystem, Architecture: i.Architecture,
		}
	}
	for _, img := range st.Images {
		status.Images = append(status.Images, &pb.ContainerImage{Names: copyStrings(img.Names), SizeBytes: img.SizeBytes})
	}
	return &pb.Node{Metadata: metaToPB(&n.ObjectMeta), Spec: spec, Status: status}
}

// NodeFromPB converts a stored node; resourceVersion is the KV revision.
func NodeFromPB(n *pb.Node, revision uint64) *corev1.Node {
	if n == nil {
		return nil
	}
	out := &corev1.Node{TypeMeta: typeMeta("Node"), ObjectMeta: metaFromPB(n.GetMetadata(), revision)}
	s := n.GetSpec()
	out.Spec = corev1.NodeSpec{
		PodCIDR:       s.GetPodCidr(),
		PodCIDRs:      copyStrings(s.GetPodCidrs()),
		ProviderID:    s.GetProviderId(),
		Unschedulable: s.GetUnschedulable(),
	}
	for _, t := range s.GetTaints() {
		out.Spec.Taints = append(out.Spec.Taints, corev1.Taint{
			Key: t.GetKey(), Value: t.GetValue(), Effect: corev1.TaintEffect(t.GetEffect()), TimeAdded: fromTSPtr(t.GetTimeAdded()),
		})
	}
	st := n.GetStatus()
	out.Status = corev1.NodeStatus{
		Capacity:    resourceListFromPB(st.GetCapacity()),
		Allocatable: resourceListFromPB(st.GetAllocatable()),
		Phase:       corev1.NodePhase(st.GetPhase()),
	}
	for _, c := range st.GetConditions() {
		out.Status.Conditions = append(out.Status.Conditions, corev1.NodeCondition{
			Type: corev1.NodeConditionType(c.GetType()), Status: corev1.ConditionStatus(c.GetStatus()),
			Reason: c.GetReason(), Message: c.GetMessage(),
			LastHeartbeatTime: fromTS(c.GetLastHeartbeatTime()), LastTransitionTime: fromTS(c.GetLastTransitionTime()),
		})
	}
	for _, a := range st.GetAddresses() {
		out.Status.Addresses = append(out.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.GetType()), Address: a.GetAddress()})
	}
	if i := st.GetNodeInfo(); i != nil {
		out.Status.NodeInfo = corev1.NodeSystemInfo{
			MachineID: i.GetMachineId(), SystemUUID: i.GetSystemUuid(), BootID: i.GetBootId(), KernelVersion: i.GetKernelVersion(),
			OSImage: i.GetOsImage(), ContainerRuntimeVersion: i.GetContainerRuntimeVersion(), KubeletVersion: i.GetKubeletVersion(),
			//lint:ignore SA1019 deprecated, but still part of the v1 API
			KubeProxyVersion: i.GetKubeProxyVersion(), OperatingSystem: i.GetOperatingSystem(), Architecture: i.GetArchitecture(),
		}
	}
	for _, img := range st.GetImages() {
		out.Status.Images = append(out.Status.Images, corev1.ContainerImage{Names: copyStrings(img.GetNames()), SizeBytes: img.GetSizeBytes()})
	}
	return out
}
