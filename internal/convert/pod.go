package convert

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// PodToPB converts an API pod. Fields podbus does not support are reported as warnings
// ("spec.volumes[0].hostPath: not supported by podbus, ignored").
func PodToPB(p *corev1.Pod) (out *pb.Pod, warnings []string) {
	if p == nil {
		return nil, nil
	}
	out = &pb.Pod{
		Metadata: metaToPB(&p.ObjectMeta),
		Spec:     podSpecToPB(&p.Spec),
		Status:   podStatusToPB(&p.Status),
	}
	return out, lostFields(p, PodFromPB(out, 0))
}

// PodFromPB converts a stored pod; resourceVersion is the KV revision. pb.Pod.Internal is never exposed.
func PodFromPB(p *pb.Pod, revision uint64) *corev1.Pod {
	if p == nil {
		return nil
	}
	return &corev1.Pod{
		TypeMeta:   typeMeta("Pod"),
		ObjectMeta: metaFromPB(p.GetMetadata(), revision),
		Spec:       podSpecFromPB(p.GetSpec()),
		Status:     podStatusFromPB(p.GetStatus()),
	}
}

// ---------------------------------------------------------------- spec, to pb

func podSpecToPB(s *corev1.PodSpec) *pb.PodSpec {
	out := &pb.PodSpec{
		RestartPolicy:                 string(s.RestartPolicy),
		TerminationGracePeriodSeconds: ptrCopy(s.TerminationGracePeriodSeconds),
		ActiveDeadlineSeconds:         ptrCopy(s.ActiveDeadlineSeconds),
		DnsPolicy:                     string(s.DNSPolicy),
		NodeSelector:                  copyMap(s.NodeSelector),
		ServiceAccountName:            s.ServiceAccountName,
		NodeName:                      s.NodeName,
		HostNetwork:                   s.HostNetwork,
		Hostname:                      s.Hostname,
		Subdomain:                     s.Subdomain,
		Affinity:                      affinityToPB(s.Affinity),
		SchedulerName:                 s.SchedulerName,
		PriorityClassName:             s.PriorityClassName,
		Priority:                      ptrCopy(s.Priority),
		EnableServiceLinks:            ptrCopy(s.EnableServiceLinks),
	}
	// serviceAccount is the deprecated alias; kube-apiserver honours it when serviceAccountName is empty.
	if out.ServiceAccountName == "" {
		out.ServiceAccountName = s.DeprecatedServiceAccount
	}
	if s.PreemptionPolicy != nil {
		out.PreemptionPolicy = string(*s.PreemptionPolicy)
	}
	for i := range s.Containers {
		out.Containers = append(out.Containers, containerToPB(&s.Containers[i]))
	}
	for i := range s.InitContainers {
		out.InitContainers = append(out.InitContainers, containerToPB(&s.InitContainers[i]))
	}
	for _, t := range s.Tolerations {
		out.Tolerations = append(out.Tolerations, &pb.Toleration{
			Key: t.Key, Operator: string(t.Operator), Value: t.Value, Effect: string(t.Effect),
			TolerationSeconds: ptrCopy(t.TolerationSeconds),
		})
	}
	for _, c := range s.TopologySpreadConstraints {
		tc := &pb.TopologySpreadConstraint{
			MaxSkew:           c.MaxSkew,
			TopologyKey:       c.TopologyKey,
			WhenUnsatisfiable: string(c.WhenUnsatisfiable),
			LabelSelector:     labelSelectorToPB(c.LabelSelector),
			MinDomains:        ptrCopy(c.MinDomains),
			MatchLabelKeys:    copyStrings(c.MatchLabelKeys),
		}
		if c.NodeAffinityPolicy != nil {
			tc.NodeAffinityPolicy = string(*c.NodeAffinityPolicy)
		}
		if c.NodeTaintsPolicy != nil {
			tc.NodeTaintsPolicy = string(*c.NodeTaintsPolicy)
		}
		out.TopologySpreadConstraints = append(out.TopologySpreadConstraints, tc)
	}
	for _, r := range s.ImagePullSecrets {
		out.ImagePullSecrets = append(out.ImagePullSecrets, r.Name)
	}
	for _, v := range s.Volumes {
		out.Volumes = append(out.Volumes, volumeToPB(v))
	}
	podExtrasToPB(s, out)
	return out
}

func containerToPB(c *corev1.Container) *pb.Container {
	out := &pb.Container{
		Name:                     c.Name,
		Image:                    c.Image,
		Command:                  copyStrings(c.Command),
		Args:                     copyStrings(c.Args),
		WorkingDir:               c.WorkingDir,
		Resources:                resourcesToPB(&c.Resources),
		LivenessProbe:            probeToPB(c.LivenessProbe),
		ReadinessProbe:           probeToPB(c.ReadinessProbe),
		StartupProbe:             probeToPB(c.StartupProbe),
		TerminationMessagePath:   c.TerminationMessagePath,
		TerminationMessagePolicy: string(c.TerminationMessagePolicy),
		ImagePullPolicy:          string(c.ImagePullPolicy),
		Stdin:                    c.Stdin,
		Tty:                      c.TTY,
	}
	for _, p := range c.Ports {
		out.Ports = append(out.Ports, &pb.ContainerPort{
			Name: p.Name, HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: string(p.Protocol), HostIp: p.HostIP,
		})
	}
	for _, e := range c.Env {
		out.Env = append(out.Env, &pb.EnvVar{Name: e.Name, Value: e.Value}) // valueFrom: unsupported (warned)
	}
	for _, m := range c.VolumeMounts {
		out.VolumeMounts = append(out.VolumeMounts, &pb.VolumeMount{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly, SubPath: m.SubPath})
	}
	containerExtrasToPB(c, out)
	return out
}

func resourcesToPB(r *corev1.ResourceRequirements) *pb.ResourceRequirements {
	if len(r.Limits) == 0 && len(r.Requests) == 0 {
		return nil
	}
	return &pb.ResourceRequirements{Limits: resourceListToPB(r.Limits), Requests: resourceListToPB(r.Requests)}
}

func resourceListToPB(l corev1.ResourceList) map[string]string {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]string, len(l))
	for name, q := range l {
		out[string(name)] = q.String()
	}
	return out
}

func probeToPB(p *corev1.Probe) *pb.Probe {
	if p == nil {
		return nil
	}
	out := &pb.Probe{
		InitialDelaySeconds:           p.InitialDelaySeconds,
		TimeoutSeconds:                p.TimeoutSeconds,
		PeriodSeconds:                 p.PeriodSeconds,
		SuccessThreshold:              p.SuccessThreshold,
		FailureThreshold:              p.FailureThreshold,
		TerminationGracePeriodSeconds: ptrCopy(p.TerminationGracePeriodSeconds),
	}
	if p.Exec != nil {
		out.Exec = &pb.ExecAction{Command: copyStrings(p.Exec.Command)}
	}
	if h := p.HTTPGet; h != nil {
		out.HttpGet = &pb.HTTPGetAction{Path: h.Path, Port: h.Port.String(), Host: h.Host, Scheme: string(h.Scheme)}
		for _, hd := range h.HTTPHeaders {
			out.HttpGet.HttpHeaders = append(out.HttpGet.HttpHeaders, &pb.HTTPHeader{Name: hd.Name, Value: hd.Value})
		}
	}
	if t := p.TCPSocket; t != nil {
		out.TcpSocket = &pb.TCPSocketAction{Port: t.Port.String(), Host: t.Host}
	}
	return out
}

func affinityToPB(a *corev1.Affinity) *pb.Affinity {
	if a == nil {
		return nil
	}
	out := &pb.Affinity{}
	if na := a.NodeAffinity; na != nil {
		out.NodeAffinity = &pb.NodeAffinity{}
		if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			out.NodeAffinity.Required = &pb.NodeSelector{}
			for i := range r.NodeSelectorTerms {
				out.NodeAffinity.Required.Terms = append(out.NodeAffinity.Required.Terms, nodeSelectorTermToPB(&r.NodeSelectorTerms[i]))
			}
		}
		for i := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			t := &na.PreferredDuringSchedulingIgnoredDuringExecution[i]
			out.NodeAffinity.Preferred = append(out.NodeAffinity.Preferred, &pb.PreferredSchedulingTerm{
				Weight: t.Weight, Preference: nodeSelectorTermToPB(&t.Preference),
			})
		}
	}
	if pa := a.PodAffinity; pa != nil {
		out.PodAffinity = podAffinityToPB(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		out.PodAntiAffinity = podAffinityToPB(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	return out
}

func nodeSelectorTermToPB(t *corev1.NodeSelectorTerm) *pb.NodeSelectorTerm {
	conv := func(rs []corev1.NodeSelectorRequirement) []*pb.NodeSelectorRequirement {
		var out []*pb.NodeSelectorRequirement
		for _, r := range rs {
			out = append(out, &pb.NodeSelectorRequirement{Key: r.Key, Operator: string(r.Operator), Values: copyStrings(r.Values)})
		}
		return out
	}
	return &pb.NodeSelectorTerm{MatchExpressions: conv(t.MatchExpressions), MatchFields: conv(t.MatchFields)}
}

func podAffinityToPB(req []corev1.PodAffinityTerm, pref []corev1.WeightedPodAffinityTerm) *pb.PodAffinity {
	out := &pb.PodAffinity{}
	for i := range req {
		out.Required = append(out.Required, podAffinityTermToPB(&req[i]))
	}
	for i := range pref {
		out.Preferred = append(out.Preferred, &pb.WeightedPodAffinityTerm{
			Weight: pref[i].Weight, Term: podAffinityTermToPB(&pref[i].PodAffinityTerm),
		})
	}
	return out
}

func podAffinityTermToPB(t *corev1.PodAffinityTerm) *pb.PodAffinityTerm {
	return &pb.PodAffinityTerm{
		LabelSelector:     labelSelectorToPB(t.LabelSelector),
		Namespaces:        copyStrings(t.Namespaces),
		TopologyKey:       t.TopologyKey,
		NamespaceSelector: labelSelectorToPB(t.NamespaceSelector),
	}
}

// ---------------------------------------------------------------- status, to pb

func podStatusToPB(s *corev1.PodStatus) *pb.PodStatus {
	out := &pb.PodStatus{
		Phase:             string(s.Phase),
		Message:           s.Message,
		Reason:            s.Reason,
		NominatedNodeName: s.NominatedNodeName,
		HostIp:            s.HostIP,
		PodIp:             s.PodIP,
		StartTime:         toTSPtr(s.StartTime),
		QosClass:          string(s.QOSClass),
	}
	for _, c := range s.Conditions {
		out.Conditions = append(out.Conditions, &pb.PodCondition{
			Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message,
			LastProbeTime: toTS(c.LastProbeTime), LastTransitionTime: toTS(c.LastTransitionTime),
		})
	}
	for _, ip := range s.PodIPs {
		out.PodIps = append(out.PodIps, ip.IP)
	}
	for i := range s.InitContainerStatuses {
		out.InitContainerStatuses = append(out.InitContainerStatuses, containerStatusToPB(&s.InitContainerStatuses[i]))
	}
	for i := range s.ContainerStatuses {
		out.ContainerStatuses = append(out.ContainerStatuses, containerStatusToPB(&s.ContainerStatuses[i]))
	}
	return out
}

func containerStatusToPB(s *corev1.ContainerStatus) *pb.ContainerStatus {
	return &pb.ContainerStatus{
		Name:         s.Name,
		State:        containerStateToPB(&s.State),
		LastState:    containerStateToPB(&s.LastTerminationState),
		Ready:        s.Ready,
		RestartCount: s.RestartCount,
		Image:        s.Image,
		ImageId:      s.ImageID,
		ContainerId:  s.ContainerID,
		Started:      ptrCopy(s.Started),
	}
}

func containerStateToPB(s *corev1.ContainerState) *pb.ContainerState {
	if s.Waiting == nil && s.Running == nil && s.Terminated == nil {
		return nil
	}
	out := &pb.ContainerState{}
	if w := s.Waiting; w != nil {
		out.Waiting = &pb.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}
	}
	if r := s.Running; r != nil {
		out.Running = &pb.ContainerStateRunning{StartedAt: toTS(r.StartedAt)}
	}
	if t := s.Terminated; t != nil {
		out.Terminated = &pb.ContainerStateTerminated{
			ExitCode: t.ExitCode, Signal: t.Signal, Reason: t.Reason, Message: t.Message,
			StartedAt: toTS(t.StartedAt), FinishedAt: toTS(t.FinishedAt), ContainerId: t.ContainerID,
		}
	}
	return out
}

// ---------------------------------------------------------------- spec, from pb

func podSpecFromPB(s *pb.PodSpec) corev1.PodSpec {
	if s == nil {
		return corev1.PodSpec{}
	}
	out := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicy(s.GetRestartPolicy()),
		TerminationGracePeriodSeconds: ptrCopy(s.TerminationGracePeriodSeconds),
		ActiveDeadlineSeconds:         ptrCopy(s.ActiveDeadlineSeconds),
		DNSPolicy:                     corev1.DNSPolicy(s.GetDnsPolicy()),
		NodeSelector:                  copyMap(s.GetNodeSelector()),
		ServiceAccountName:            s.GetServiceAccountName(),
		// kube-apiserver keeps the deprecated alias in sync on output.
		DeprecatedServiceAccount: s.GetServiceAccountName(),
		NodeName:                 s.GetNodeName(),
		HostNetwork:              s.GetHostNetwork(),
		Hostname:                 s.GetHostname(),
		Subdomain:                s.GetSubdomain(),
		Affinity:                 affinityFromPB(s.GetAffinity()),
		SchedulerName:            s.GetSchedulerName(),
		PriorityClassName:        s.GetPriorityClassName(),
		Priority:                 ptrCopy(s.Priority),
		EnableServiceLinks:       ptrCopy(s.EnableServiceLinks),
	}
	if s.GetPreemptionPolicy() != "" {
		pp := corev1.PreemptionPolicy(s.GetPreemptionPolicy())
		out.PreemptionPolicy = &pp
	}
	for _, c := range s.GetContainers() {
		out.Containers = append(out.Containers, containerFromPB(c))
	}
	for _, c := range s.GetInitContainers() {
		out.InitContainers = append(out.InitContainers, containerFromPB(c))
	}
	for _, t := range s.GetTolerations() {
		out.Tolerations = append(out.Tolerations, corev1.Toleration{
			Key: t.GetKey(), Operator: corev1.TolerationOperator(t.GetOperator()), Value: t.GetValue(),
			Effect: corev1.TaintEffect(t.GetEffect()), TolerationSeconds: ptrCopy(t.TolerationSeconds),
		})
	}
	for _, c := range s.GetTopologySpreadConstraints() {
		tc := corev1.TopologySpreadConstraint{
			MaxSkew:           c.GetMaxSkew(),
			TopologyKey:       c.GetTopologyKey(),
			WhenUnsatisfiable: corev1.UnsatisfiableConstraintAction(c.GetWhenUnsatisfiable()),
			LabelSelector:     labelSelectorFromPB(c.GetLabelSelector()),
			MinDomains:        ptrCopy(c.MinDomains),
			MatchLabelKeys:    copyStrings(c.GetMatchLabelKeys()),
		}
		if v := c.GetNodeAffinityPolicy(); v != "" {
			p := corev1.NodeInclusionPolicy(v)
			tc.NodeAffinityPolicy = &p
		}
		if v := c.GetNodeTaintsPolicy(); v != "" {
			p := corev1.NodeInclusionPolicy(v)
			tc.NodeTaintsPolicy = &p
		}
		out.TopologySpreadConstraints = append(out.TopologySpreadConstraints, tc)
	}
	for _, name := range s.GetImagePullSecrets() {
		out.ImagePullSecrets = append(out.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	for _, v := range s.GetVolumes() {
		out.Volumes = append(out.Volumes, VolumeFromPB(v))
	}
	podExtrasFromPB(s, &out)
	return out
}

func containerFromPB(c *pb.Container) corev1.Container {
	out := corev1.Container{
		Name:                     c.GetName(),
		Image:                    c.GetImage(),
		Command:                  copyStrings(c.GetCommand()),
		Args:                     copyStrings(c.GetArgs()),
		WorkingDir:               c.GetWorkingDir(),
		Resources:                resourcesFromPB(c.GetResources()),
		LivenessProbe:            probeFromPB(c.GetLivenessProbe()),
		ReadinessProbe:           probeFromPB(c.GetReadinessProbe()),
		StartupProbe:             probeFromPB(c.GetStartupProbe()),
		TerminationMessagePath:   c.GetTerminationMessagePath(),
		TerminationMessagePolicy: corev1.TerminationMessagePolicy(c.GetTerminationMessagePolicy()),
		ImagePullPolicy:          corev1.PullPolicy(c.GetImagePullPolicy()),
		Stdin:                    c.GetStdin(),
		TTY:                      c.GetTty(),
	}
	for _, p := range c.GetPorts() {
		out.Ports = append(out.Ports, corev1.ContainerPort{
			Name: p.GetName(), HostPort: p.GetHostPort(), ContainerPort: p.GetContainerPort(),
			Protocol: corev1.Protocol(p.GetProtocol()), HostIP: p.GetHostIp(),
		})
	}
	for _, e := range c.GetEnv() {
		out.Env = append(out.Env, corev1.EnvVar{Name: e.GetName(), Value: e.GetValue()})
	}
	for _, m := range c.GetVolumeMounts() {
		out.VolumeMounts = append(out.VolumeMounts, corev1.VolumeMount{Name: m.GetName(), MountPath: m.GetMountPath(), ReadOnly: m.GetReadOnly(), SubPath: m.GetSubPath()})
	}
	containerExtrasFromPB(c, &out)
	return out
}

func resourcesFromPB(r *pb.ResourceRequirements) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Limits: resourceListFromPB(r.GetLimits()), Requests: resourceListFromPB(r.GetRequests())}
}

// resourceListFromPB skips unparsable quantities: the API only ever stores canonical ones.
func resourceListFromPB(m map[string]string) corev1.ResourceList {
	if len(m) == 0 {
		return nil
	}
	out := make(corev1.ResourceList, len(m))
	for name, s := range m {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			continue
		}
		out[corev1.ResourceName(name)] = q
	}
	return out
}

// intOrString reads the pb form of an IntOrString: a string of digits is a number.
func intOrString(s string) intstr.IntOrString {
	if s == "" {
		return intstr.IntOrString{}
	}
	if n, err := strconv.ParseInt(s, 10, 32); err == nil && s[0] != '+' && s[0] != '-' {
		return intstr.FromInt32(int32(n))
	}
	return intstr.FromString(s)
}

func probeFromPB(p *pb.Probe) *corev1.Probe {
	if p == nil {
		return nil
	}
	out := &corev1.Probe{
		InitialDelaySeconds:           p.GetInitialDelaySeconds(),
		TimeoutSeconds:                p.GetTimeoutSeconds(),
		PeriodSeconds:                 p.GetPeriodSeconds(),
		SuccessThreshold:              p.GetSuccessThreshold(),
		FailureThreshold:              p.GetFailureThreshold(),
		TerminationGracePeriodSeconds: ptrCopy(p.TerminationGracePeriodSeconds),
	}
	if e := p.GetExec(); e != nil {
		out.Exec = &corev1.ExecAction{Command: copyStrings(e.GetCommand())}
	}
	if h := p.GetHttpGet(); h != nil {
		out.HTTPGet = &corev1.HTTPGetAction{
			Path: h.GetPath(), Port: intOrString(h.GetPort()), Host: h.GetHost(), Scheme: corev1.URIScheme(h.GetScheme()),
		}
		for _, hd := range h.GetHttpHeaders() {
			out.HTTPGet.HTTPHeaders = append(out.HTTPGet.HTTPHeaders, corev1.HTTPHeader{Name: hd.GetName(), Value: hd.GetValue()})
		}
	}
	if t := p.GetTcpSocket(); t != nil {
		out.TCPSocket = &corev1.TCPSocketAction{Port: intOrString(t.GetPort()), Host: t.GetHost()}
	}
	return out
}

func affinityFromPB(a *pb.Affinity) *corev1.Affinity {
	if a == nil {
		return nil
	}
	out := &corev1.Affinity{}
	if na := a.GetNodeAffinity(); na != nil {
		out.NodeAffinity = &corev1.NodeAffinity{}
		if r := na.GetRequired(); r != nil {
			sel := &corev1.NodeSelector{}
			for _, t := range r.GetTerms() {
				sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, nodeSelectorTermFromPB(t))
			}
			out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = sel
		}
		for _, t := range na.GetPreferred() {
			out.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(out.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.PreferredSchedulingTerm{Weight: t.GetWeight(), Preference: nodeSelectorTermFromPB(t.GetPreference())})
		}
	}
	if pa := a.GetPodAffinity(); pa != nil {
		req, pref := podAffinityFromPB(pa)
		out.PodAffinity = &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  req,
			PreferredDuringSchedulingIgnoredDuringExecution: pref,
		}
	}
	if pa := a.GetPodAntiAffinity(); pa != nil {
		req, pref := podAffinityFromPB(pa)
		out.PodAntiAffinity = &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  req,
			PreferredDuringSchedulingIgnoredDuringExecution: pref,
		}
	}
	return out
}

func nodeSelectorTermFromPB(t *pb.NodeSelectorTerm) corev1.NodeSelectorTerm {
	conv := func(rs []*pb.NodeSelectorRequirement) []corev1.NodeSelectorRequirement {
		var out []corev1.NodeSelectorRequirement
		for _, r := range rs {
			out = append(out, corev1.NodeSelectorRequirement{
				Key: r.GetKey(), Operator: corev1.NodeSelectorOperator(r.GetOperator()), Values: copyStrings(r.GetValues()),
			})
		}
		return out
	}
	return corev1.NodeSelectorTerm{MatchExpressions: conv(t.GetMatchExpressions()), MatchFields: conv(t.GetMatchFields())}
}

func podAffinityFromPB(pa *pb.PodAffinity) ([]corev1.PodAffinityTerm, []corev1.WeightedPodAffinityTerm) {
	var req []corev1.PodAffinityTerm
	var pref []corev1.WeightedPodAffinityTerm
	for _, t := range pa.GetRequired() {
		req = append(req, podAffinityTermFromPB(t))
	}
	for _, t := range pa.GetPreferred() {
		pref = append(pref, corev1.WeightedPodAffinityTerm{Weight: t.GetWeight(), PodAffinityTerm: podAffinityTermFromPB(t.GetTerm())})
	}
	return req, pref
}

func podAffinityTermFromPB(t *pb.PodAffinityTerm) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector:     labelSelectorFromPB(t.GetLabelSelector()),
		Namespaces:        copyStrings(t.GetNamespaces()),
		TopologyKey:       t.GetTopologyKey(),
		NamespaceSelector: labelSelectorFromPB(t.GetNamespaceSelector()),
	}
}

// ---------------------------------------------------------------- status, from pb

func podStatusFromPB(s *pb.PodStatus) corev1.PodStatus {
	if s == nil {
		return corev1.PodStatus{}
	}
	out := corev1.PodStatus{
		Phase:             corev1.PodPhase(s.GetPhase()),
		Message:           s.GetMessage(),
		Reason:            s.GetReason(),
		NominatedNodeName: s.GetNominatedNodeName(),
		HostIP:            s.GetHostIp(),
		PodIP:             s.GetPodIp(),
		StartTime:         fromTSPtr(s.GetStartTime()),
		QOSClass:          corev1.PodQOSClass(s.GetQosClass()),
	}
	for _, c := range s.GetConditions() {
		out.Conditions = append(out.Conditions, corev1.PodCondition{
			Type: corev1.PodConditionType(c.GetType()), Status: corev1.ConditionStatus(c.GetStatus()),
			Reason: c.GetReason(), Message: c.GetMessage(),
			LastProbeTime: fromTS(c.GetLastProbeTime()), LastTransitionTime: fromTS(c.GetLastTransitionTime()),
		})
	}
	for _, ip := range s.GetPodIps() {
		out.PodIPs = append(out.PodIPs, corev1.PodIP{IP: ip})
	}
	if s.GetHostIp() != "" {
		// hostIPs is the plural kube-apiserver fills from hostIP; podbus nodes have one address.
		out.HostIPs = []corev1.HostIP{{IP: s.GetHostIp()}}
	}
	for _, c := range s.GetInitContainerStatuses() {
		out.InitContainerStatuses = append(out.InitContainerStatuses, containerStatusFromPB(c))
	}
	for _, c := range s.GetContainerStatuses() {
		out.ContainerStatuses = append(out.ContainerStatuses, containerStatusFromPB(c))
	}
	return out
}

func containerStatusFromPB(s *pb.ContainerStatus) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name:                 s.GetName(),
		State:                containerStateFromPB(s.GetState()),
		LastTerminationState: containerStateFromPB(s.GetLastState()),
		Ready:                s.GetReady(),
		RestartCount:         s.GetRestartCount(),
		Image:                s.GetImage(),
		ImageID:              s.GetImageId(),
		ContainerID:          s.GetContainerId(),
		Started:              ptrCopy(s.Started),
	}
}

func containerStateFromPB(s *pb.ContainerState) corev1.ContainerState {
	var out corev1.ContainerState
	if w := s.GetWaiting(); w != nil {
		out.Waiting = &corev1.ContainerStateWaiting{Reason: w.GetReason(), Message: w.GetMessage()}
	}
	if r := s.GetRunning(); r != nil {
		out.Running = &corev1.ContainerStateRunning{StartedAt: fromTS(r.GetStartedAt())}
	}
	if t := s.GetTerminated(); t != nil {
		out.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: t.GetExitCode(), Signal: t.GetSignal(), Reason: t.GetReason(), Message: t.GetMessage(),
			StartedAt: fromTS(t.GetStartedAt()), FinishedAt: fromTS(t.GetFinishedAt()), ContainerID: t.GetContainerId(),
		}
	}
	return out
}
