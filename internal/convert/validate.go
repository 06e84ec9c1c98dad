package convert

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Messages kube-apiserver uses (pkg/apis/core/validation), kept word for word because clients match them.
const (
	isNegativeErrorMsg    = "must be greater than or equal to 0"
	isNotPositiveErrorMsg = "must be greater than zero"
)

// ValidatePod validates a new pod as kube-apiserver does (names, containers, quantities, ...). Run it after
// DefaultPod: fields the defaults fill in (restartPolicy, imagePullPolicy, protocol, ...) are required.
// A pod with generateName and no name yet passes: the name is generated afterwards.
func ValidatePod(p *corev1.Pod) field.ErrorList {
	errs := validatePodMeta(p)
	errs = append(errs, validatePodSpec(&p.Spec, field.NewPath("spec"))...)
	return errs
}

func validatePodMeta(p *corev1.Pod) field.ErrorList {
	metaPath := field.NewPath("metadata")
	var errs field.ErrorList
	for _, e := range apivalidation.ValidateObjectMeta(&p.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metaPath) {
		if e.Type == field.ErrorTypeRequired && e.Field == "metadata.name" && p.GenerateName != "" {
			continue
		}
		errs = append(errs, e)
	}
	return errs
}

func validatePodSpec(s *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	volumes := sets.New[string]()
	if len(s.Volumes) > 0 {
		var vErrs field.ErrorList
		volumes, vErrs = validateVolumes(s.Volumes, fldPath.Child("volumes"))
		errs = append(errs, vErrs...)
	}

	names := sets.New[string]()
	if len(s.InitContainers) > 0 {
		errs = append(errs, validateContainers(s.InitContainers, true, volumes, names, s.HostNetwork, fldPath.Child("initContainers"))...)
	}
	if len(s.Containers) == 0 {
		errs = append(errs, field.Required(fldPath.Child("containers"), ""))
	}
	errs = append(errs, validateContainers(s.Containers, false, volumes, names, s.HostNetwork, fldPath.Child("containers"))...)
	errs = append(errs, validateHostPorts(s, fldPath)...)

	errs = append(errs, enumField(fldPath, "restartPolicy", string(s.RestartPolicy), true,
		corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)...)
	errs = append(errs, enumField(fldPath, "dnsPolicy", string(s.DNSPolicy), true,
		corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone)...)
	if s.DNSPolicy == corev1.DNSNone && s.DNSConfig == nil {
		errs = append(errs, field.Required(fldPath.Child("dnsConfig"), fmt.Sprintf("must provide `dnsConfig` when `dnsPolicy` is %s", corev1.DNSNone)))
	}
	if s.PreemptionPolicy != nil {
		errs = append(errs, enumField(fldPath, "preemptionPolicy", string(*s.PreemptionPolicy), true,
			corev1.PreemptLowerPriority, corev1.PreemptNever)...)
	}
	if s.TerminationGracePeriodSeconds != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(*s.TerminationGracePeriodSeconds, fldPath.Child("terminationGracePeriodSeconds"))...)
	}
	if s.ActiveDeadlineSeconds != nil {
		if v := *s.ActiveDeadlineSeconds; v <= 0 || v > math.MaxInt32 {
			errs = append(errs, field.Invalid(fldPath.Child("activeDeadlineSeconds"), v, validation.InclusiveRangeError(1, math.MaxInt32)))
		}
	}
	if len(s.NodeSelector) > 0 {
		errs = append(errs, metav1validation.ValidateLabels(s.NodeSelector, fldPath.Child("nodeSelector"))...)
	}
	errs = append(errs, nameField(fldPath, "serviceAccountName", s.ServiceAccountName, validation.IsDNS1123Subdomain)...)
	errs = append(errs, nameField(fldPath, "nodeName", s.NodeName, validation.IsDNS1123Subdomain)...)
	errs = append(errs, nameField(fldPath, "schedulerName", s.SchedulerName, validation.IsDNS1123Subdomain)...)
	errs = append(errs, nameField(fldPath, "priorityClassName", s.PriorityClassName, validation.IsDNS1123Subdomain)...)
	errs = append(errs, nameField(fldPath, "hostname", s.Hostname, validation.IsDNS1123Label)...)
	errs = append(errs, nameField(fldPath, "subdomain", s.Subdomain, validation.IsDNS1123Label)...)
	for i, r := range s.ImagePullSecrets {
		if r.Name == "" {
			errs = append(errs, field.Required(fldPath.Child("imagePullSecrets").Index(i).Child("name"), ""))
		}
	}
	// The lists' paths are built only for lists that have entries to check.
	if len(s.Tolerations) > 0 {
		errs = append(errs, validateTolerations(s.Tolerations, fldPath.Child("tolerations"))...)
	}
	if s.Affinity != nil {
		errs = append(errs, validateAffinity(s.Affinity, fldPath.Child("affinity"))...)
	}
	if len(s.TopologySpreadConstraints) > 0 {
		errs = append(errs, validateTopologySpread(s.TopologySpreadConstraints, fldPath.Child("topologySpreadConstraints"))...)
	}
	if len(s.SchedulingGates) > 0 {
		errs = append(errs, validateSchedulingGates(s.SchedulingGates, fldPath.Child("schedulingGates"))...)
	}
	return errs
}

// enumField checks the value of parent's field name against its allowed set; required says whether
// "" is an error. The field's path is built only for an error: every create validates every field.
func enumField[T ~string](parent *field.Path, name, v string, required bool, allowed ...T) field.ErrorList {
	if v == "" {
		if required {
			return field.ErrorList{field.Required(parent.Child(name), "")}
		}
		return nil
	}
	for _, a := range allowed {
		if string(a) == v {
			return nil
		}
	}
	valid := make([]string, len(allowed))
	for i, a := range allowed {
		valid[i] = string(a)
	}
	return field.ErrorList{field.NotSupported(parent.Child(name), v, valid)}
}

// nameField validates parent's optional field name with one of validation's Is* checks.
func nameField(parent *field.Path, name, v string, check func(string) []string) field.ErrorList {
	if v == "" {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range check(v) {
		errs = append(errs, field.Invalid(parent.Child(name), v, msg))
	}
	return errs
}

func validateVolumes(vols []corev1.Volume, fldPath *field.Path) (sets.Set[string], field.ErrorList) {
	names := sets.New[string]()
	var errs field.ErrorList
	for i, v := range vols {
		idx := fldPath.Index(i)
		if v.Name == "" {
			errs = append(errs, field.Required(idx.Child("name"), ""))
		} else {
			errs = append(errs, nameField(idx, "name", v.Name, validation.IsDNS1123Label)...)
			if names.Has(v.Name) {
				errs = append(errs, field.Duplicate(idx.Child("name"), v.Name))
			}
			names.Insert(v.Name)
		}
		if v.VolumeSource == (corev1.VolumeSource{}) {
			errs = append(errs, field.Required(idx, "must specify a volume type"))
		}
		errs = append(errs, validateVolumeSource(&vols[i], idx)...)
		if ed := v.EmptyDir; ed != nil && ed.SizeLimit != nil && ed.SizeLimit.Sign() < 0 {
			errs = append(errs, field.Invalid(idx.Child("emptyDir", "sizeLimit"), ed.SizeLimit.String(), isNegativeErrorMsg))
		}
	}
	return names, errs
}

func validateContainers(cs []corev1.Container, init bool, volumes, names sets.Set[string], hostNetwork bool, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i := range cs {
		c := &cs[i]
		idx := fldPath.Index(i)
		if c.Name == "" {
			errs = append(errs, field.Required(idx.Child("name"), ""))
		} else {
			errs = append(errs, nameField(idx, "name", c.Name, validation.IsDNS1123Label)...)
			if names.Has(c.Name) {
				errs = append(errs, field.Duplicate(idx.Child("name"), c.Name))
			}
			names.Insert(c.Name)
		}
		if c.Image == "" {
			errs = append(errs, field.Required(idx.Child("image"), ""))
		} else if strings.TrimSpace(c.Image) != c.Image {
			errs = append(errs, field.Invalid(idx.Child("image"), c.Image, "must not have leading or trailing whitespace"))
		}
		errs = append(errs, enumField(idx, "imagePullPolicy", string(c.ImagePullPolicy), true,
			corev1.PullAlways, corev1.PullNever, corev1.PullIfNotPresent)...)
		errs = append(errs, enumField(idx, "terminationMessagePolicy", string(c.TerminationMessagePolicy), true,
			corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError)...)
		errs = append(errs, validatePorts(c.Ports, hostNetwork, idx.Child("ports"))...)
		errs = append(errs, validateEnv(c.Env, idx.Child("env"))...)
		errs = append(errs, validateVolumeMounts(c.VolumeMounts, volumes, idx.Child("volumeMounts"))...)
		errs = append(errs, validateResources(&c.Resources, idx.Child("resources"))...)

		sidecar := init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		probes := []struct {
			name string
			p    *corev1.Probe
		}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}}
		for _, pr := range probes {
			if pr.p == nil {
				continue
			}
			if init && !sidecar {
				errs = append(errs, field.Forbidden(idx.Child(pr.name), "may not be set for init containers without restartPolicy=Always"))
				continue
			}
			errs = append(errs, validateProbe(pr.p, pr.name, idx.Child(pr.name))...)
		}
	}
	return errs
}

func validatePorts(ports []corev1.ContainerPort, hostNetwork bool, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, p := range ports {
		idx := fldPath.Index(i)
		if p.Name != "" {
			for _, msg := range validation.IsValidPortName(p.Name) {
				errs = append(errs, field.Invalid(idx.Child("name"), p.Name, msg))
			}
			if names.Has(p.Name) {
				errs = append(errs, field.Duplicate(idx.Child("name"), p.Name))
			}
			names.Insert(p.Name)
		}
		if p.ContainerPort == 0 {
			errs = append(errs, field.Required(idx.Child("containerPort"), ""))
		} else {
			for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
				errs = append(errs, field.Invalid(idx.Child("containerPort"), p.ContainerPort, msg))
			}
		}
		if p.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(p.HostPort)) {
				errs = append(errs, field.Invalid(idx.Child("hostPort"), p.HostPort, msg))
			}
		}
		if hostNetwork && p.HostPort != p.ContainerPort {
			errs = append(errs, field.Invalid(idx.Child("hostPort"), p.HostPort, "must match `containerPort` when `hostNetwork` is true"))
		}
		errs = append(errs, enumField(idx, "protocol", string(p.Protocol), true,
			corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)...)
	}
	return errs
}

// validateHostPorts rejects the same hostPort/protocol/hostIP twice in one pod: it could never start.
func validateHostPorts(s *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	check := func(cs []corev1.Container, path *field.Path) {
		for i, c := range cs {
			for j, p := range c.Ports {
				if p.HostPort == 0 {
					continue
				}
				key := fmt.Sprintf("%s/%s/%d", p.HostIP, p.Protocol, p.HostPort)
				if seen.Has(key) {
					errs = append(errs, field.Duplicate(path.Index(i).Child("ports").Index(j).Child("hostPort"), fmt.Sprintf("%d/%s", p.HostPort, p.Protocol)))
				}
				seen.Insert(key)
			}
		}
	}
	check(s.InitContainers, fldPath.Child("initContainers"))
	check(s.Containers, fldPath.Child("containers"))
	return errs
}

func validateEnv(env []corev1.EnvVar, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, e := range env {
		idx := fldPath.Index(i)
		if e.Name == "" {
			errs = append(errs, field.Required(idx.Child("name"), ""))
		} else {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(idx.Child("name"), e.Name, msg))
			}
		}
		if e.ValueFrom != nil && e.Value != "" {
			errs = append(errs, field.Invalid(idx.Child("valueFrom"), "", "may not be specified when `value` is not empty"))
		}
	}
	return errs
}

func validateVolumeMounts(mounts []corev1.VolumeMount, volumes sets.Set[string], fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	paths := sets.New[string]()
	for i, m := range mounts {
		idx := fldPath.Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(idx.Child("name"), ""))
		} else if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(idx.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(idx.Child("mountPath"), ""))
		} else if paths.Has(m.MountPath) {
			errs = append(errs, field.Invalid(idx.Child("mountPath"), m.MountPath, "must be unique"))
		}
		paths.Insert(m.MountPath)
		errs = append(errs, validateLocalPath(m.SubPath, false, idx.Child("subPath"))...)
	}
	return errs
}

// Resources a container may ask for without a domain prefix.
var standardContainerResources = sets.New(corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage)

func validateResourceName(name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(name)) {
		errs = append(errs, field.Invalid(fldPath, name, msg))
	}
	if len(errs) > 0 {
		return errs
	}
	n := string(name)
	if !strings.Contains(n, "/") && !standardContainerResources.Has(name) && !strings.HasPrefix(n, corev1.ResourceHugePagesPrefix) {
		errs = append(errs, field.Invalid(fldPath, name, "must be a standard resource for containers"))
	}
	return errs
}

// isExtendedResource: domain-prefixed outside kubernetes.io; those cannot be overcommitted.
func isExtendedResource(name corev1.ResourceName) bool {
	n := string(name)
	return strings.Contains(n, "/") && !strings.Contains(n, corev1.ResourceDefaultNamespacePrefix) && !strings.HasPrefix(n, "requests.")
}

func validateResources(r *corev1.ResourceRequirements, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	limPath, reqPath := fldPath.Child("limits"), fldPath.Child("requests")
	for name, q := range r.Limits {
		p := limPath.Key(string(name))
		errs = append(errs, validateResourceName(name, p)...)
		errs = append(errs, validateQuantity(name, q, p)...)
	}
	for name, q := range r.Requests {
		p := reqPath.Key(string(name))
		errs = append(errs, validateResourceName(name, p)...)
		errs = append(errs, validateQuantity(name, q, p)...)
		lim, hasLim := r.Limits[name]
		if hasLim && q.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(p, q.String(), fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
		if isExtendedResource(name) {
			if !hasLim {
				errs = append(errs, field.Forbidden(limPath, "Limit must be set for non overcommitable resources"))
			} else if q.Cmp(lim) != 0 {
				errs = append(errs, field.Invalid(p, q.String(), fmt.Sprintf("must be equal to %s limit of %s", name, lim.String())))
			}
		}
	}
	return errs
}

func validateQuantity(name corev1.ResourceName, q resource.Quantity, fldPath *field.Path) field.ErrorList {
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), isNegativeErrorMsg)}
	}
	// Only cpu may be fractional (and memory, for historical reasons, is allowed any value).
	if (isExtendedResource(name) || strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix)) && q.MilliValue()%1000 != 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), "must be an integer")}
	}
	return nil
}

func validateProbe(p *corev1.Probe, kind string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateProbeHandler(&p.ProbeHandler, fldPath)...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(p.InitialDelaySeconds), fldPath.Child("initialDelaySeconds"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(p.TimeoutSeconds), fldPath.Child("timeoutSeconds"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(p.PeriodSeconds), fldPath.Child("periodSeconds"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(p.SuccessThreshold), fldPath.Child("successThreshold"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(p.FailureThreshold), fldPath.Child("failureThreshold"))...)
	if kind != "readinessProbe" && p.SuccessThreshold != 1 {
		errs = append(errs, field.Invalid(fldPath.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
	}
	if g := p.TerminationGracePeriodSeconds; g != nil {
		if kind == "readinessProbe" {
			errs = append(errs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, "must not be set for readinessProbes"))
		} else if *g <= 0 {
			errs = append(errs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, isNotPositiveErrorMsg))
		}
	}
	return errs
}

func validateProbeHandler(h *corev1.ProbeHandler, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if h.Exec != nil {
		n++
		if len(h.Exec.Command) == 0 {
			errs = append(errs, field.Required(fldPath.Child("exec", "command"), ""))
		}
	}
	if h.HTTPGet != nil {
		if n++; n > 1 {
			errs = append(errs, field.Forbidden(fldPath.Child("httpGet"), "may not specify more than 1 handler type"))
		} else {
			errs = append(errs, validateHTTPGet(h.HTTPGet, fldPath.Child("httpGet"))...)
		}
	}
	if h.TCPSocket != nil {
		if n++; n > 1 {
			errs = append(errs, field.Forbidden(fldPath.Child("tcpSocket"), "may not specify more than 1 handler type"))
		} else {
			errs = append(errs, validatePortNumOrName(h.TCPSocket.Port, fldPath.Child("tcpSocket", "port"))...)
		}
	}
	if h.GRPC != nil {
		if n++; n > 1 {
			errs = append(errs, field.Forbidden(fldPath.Child("grpc"), "may not specify more than 1 handler type"))
		} else {
			for _, msg := range validation.IsValidPortNum(int(h.GRPC.Port)) {
				errs = append(errs, field.Invalid(fldPath.Child("grpc", "port"), h.GRPC.Port, msg))
			}
		}
	}
	if n == 0 {
		errs = append(errs, field.Required(fldPath, "must specify a handler type"))
	}
	return errs
}

func validateHTTPGet(h *corev1.HTTPGetAction, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if h.Path == "" {
		errs = append(errs, field.Required(fldPath.Child("path"), ""))
	}
	errs = append(errs, validatePortNumOrName(h.Port, fldPath.Child("port"))...)
	if h.Scheme != corev1.URISchemeHTTP && h.Scheme != corev1.URISchemeHTTPS {
		errs = append(errs, field.NotSupported(fldPath.Child("scheme"), h.Scheme, []corev1.URIScheme{corev1.URISchemeHTTP, corev1.URISchemeHTTPS}))
	}
	for _, hd := range h.HTTPHeaders {
		for _, msg := range validation.IsHTTPHeaderName(hd.Name) {
			errs = append(errs, field.Invalid(fldPath.Child("httpHeaders"), hd.Name, msg))
		}
	}
	return errs
}

func validatePortNumOrName(port intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch port.Type {
	case intstr.Int:
		for _, msg := range validation.IsValidPortNum(port.IntValue()) {
			errs = append(errs, field.Invalid(fldPath, port.IntValue(), msg))
		}
	case intstr.String:
		if port.StrVal == "" {
			errs = append(errs, field.Required(fldPath, ""))
		}
		for _, msg := range validation.IsValidPortName(port.StrVal) {
			errs = append(errs, field.Invalid(fldPath, port.StrVal, msg))
		}
	default:
		errs = append(errs, field.InternalError(fldPath, fmt.Errorf("unknown type: %v", port.Type)))
	}
	return errs
}

func validateTolerations(ts []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range ts {
		idx := fldPath.Index(i)
		if t.Key != "" {
			errs = append(errs, metav1validation.ValidateLabelName(t.Key, idx.Child("key"))...)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			errs = append(errs, field.Invalid(idx.Child("operator"), t.Operator,
				"operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			errs = append(errs, field.Invalid(idx.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			if msgs := validation.IsValidLabelValue(t.Value); len(msgs) != 0 {
				errs = append(errs, field.Invalid(idx.Child("operator"), t.Value, strings.Join(msgs, ";")))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(idx.Child("operator"), t, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			errs = append(errs, field.NotSupported(idx.Child("operator"), t.Operator,
				[]corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
		}
		errs = append(errs, enumField(idx, "effect", string(t.Effect), false,
			corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute)...)
	}
	return errs
}

func validateAffinity(a *corev1.Affinity, fldPath *field.Path) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	if na := a.NodeAffinity; na != nil {
		p := fldPath.Child("nodeAffinity")
		if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			rp := p.Child("requiredDuringSchedulingIgnoredDuringExecution")
			if len(r.NodeSelectorTerms) == 0 {
				errs = append(errs, field.Required(rp.Child("nodeSelectorTerms"), "must have at least one node selector term"))
			}
			for i := range r.NodeSelectorTerms {
				errs = append(errs, validateNodeSelectorTerm(&r.NodeSelectorTerms[i], rp.Child("nodeSelectorTerms").Index(i))...)
			}
		}
		for i := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			t := &na.PreferredDuringSchedulingIgnoredDuringExecution[i]
			idx := p.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
			errs = append(errs, validateWeight(t.Weight, idx.Child("weight"))...)
			errs = append(errs, validateNodeSelectorTerm(&t.Preference, idx.Child("preference"))...)
		}
	}
	if pa := a.PodAffinity; pa != nil {
		errs = append(errs, validatePodAffinity(pa.RequiredDuringSchedulingIgnoredDuringExecution,
			pa.PreferredDuringSchedulingIgnoredDuringExecution, fldPath.Child("podAffinity"))...)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		errs = append(errs, validatePodAffinity(pa.RequiredDuringSchedulingIgnoredDuringExecution,
			pa.PreferredDuringSchedulingIgnoredDuringExecution, fldPath.Child("podAntiAffinity"))...)
	}
	return errs
}

func validateWeight(w int32, fldPath *field.Path) field.ErrorList {
	if w <= 0 || w > 100 {
		return field.ErrorList{field.Invalid(fldPath, w, "must be in the range 1-100")}
	}
	return nil
}

func validateNodeSelectorTerm(t *corev1.NodeSelectorTerm, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range t.MatchExpressions {
		errs = append(errs, validateNodeSelectorRequirement(r, fldPath.Child("matchExpressions").Index(i))...)
	}
	for i, r := range t.MatchFields {
		idx := fldPath.Child("matchFields").Index(i)
		if r.Key != "metadata.name" {
			errs = append(errs, field.NotSupported(idx.Child("key"), r.Key, []string{"metadata.name"}))
		}
		switch r.Operator {
		case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
			if len(r.Values) != 1 {
				errs = append(errs, field.Required(idx.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
			}
		default:
			errs = append(errs, field.Invalid(idx.Child("operator"), r.Operator, "not a valid selector operator"))
		}
	}
	return errs
}

func validateNodeSelectorRequirement(r corev1.NodeSelectorRequirement, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch r.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(r.Values) == 0 {
			errs = append(errs, field.Required(fldPath.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(r.Values) > 0 {
			errs = append(errs, field.Forbidden(fldPath.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(r.Values) != 1 {
			errs = append(errs, field.Required(fldPath.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"))
		} else if _, err := strconv.ParseInt(r.Values[0], 10, 64); err != nil {
			// kube-apiserver accepts this and the scheduler then never matches; podbus says so up front.
			errs = append(errs, field.Invalid(fldPath.Child("values").Index(0), r.Values[0], "must be an integer when `operator` is 'Lt' or 'Gt'"))
		}
	default:
		errs = append(errs, field.Invalid(fldPath.Child("operator"), r.Operator, "not a valid selector operator"))
	}
	errs = append(errs, metav1validation.ValidateLabelName(r.Key, fldPath.Child("key"))...)
	return errs
}

func validatePodAffinity(req []corev1.PodAffinityTerm, pref []corev1.WeightedPodAffinityTerm, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i := range req {
		errs = append(errs, validatePodAffinityTerm(&req[i], fldPath.Child("requiredDuringSchedulingIgnoredDuringExecution").Index(i))...)
	}
	for i := range pref {
		idx := fldPath.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		errs = append(errs, validateWeight(pref[i].Weight, idx.Child("weight"))...)
		errs = append(errs, validatePodAffinityTerm(&pref[i].PodAffinityTerm, idx.Child("podAffinityTerm"))...)
	}
	return errs
}

var selectorOpts = metav1validation.LabelSelectorValidationOptions{}

func validatePodAffinityTerm(t *corev1.PodAffinityTerm, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, metav1validation.ValidateLabelSelector(t.LabelSelector, selectorOpts, fldPath.Child("labelSelector"))...)
	errs = append(errs, metav1validation.ValidateLabelSelector(t.NamespaceSelector, selectorOpts, fldPath.Child("namespaceSelector"))...)
	for _, ns := range t.Namespaces {
		for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
			errs = append(errs, field.Invalid(fldPath.Child("namespace"), ns, msg))
		}
	}
	if t.TopologyKey == "" {
		errs = append(errs, field.Required(fldPath.Child("topologyKey"), "can not be empty"))
	} else {
		errs = append(errs, metav1validation.ValidateLabelName(t.TopologyKey, fldPath.Child("topologyKey"))...)
	}
	return errs
}

func validateTopologySpread(cs []corev1.TopologySpreadConstraint, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, c := range cs {
		idx := fldPath.Index(i)
		if c.MaxSkew <= 0 {
			errs = append(errs, field.Invalid(idx.Child("maxSkew"), c.MaxSkew, isNotPositiveErrorMsg))
		}
		if c.TopologyKey == "" {
			errs = append(errs, field.Required(idx.Child("topologyKey"), "can not be empty"))
		} else {
			errs = append(errs, metav1validation.ValidateLabelName(c.TopologyKey, idx.Child("topologyKey"))...)
		}
		whenErrs := enumField(idx, "whenUnsatisfiable", string(c.WhenUnsatisfiable), false,
			corev1.DoNotSchedule, corev1.ScheduleAnyway)
		if c.WhenUnsatisfiable == "" {
			whenErrs = field.ErrorList{field.NotSupported(idx.Child("whenUnsatisfiable"), c.WhenUnsatisfiable,
				[]corev1.UnsatisfiableConstraintAction{corev1.DoNotSchedule, corev1.ScheduleAnyway})}
		}
		errs = append(errs, whenErrs...)
		if m := c.MinDomains; m != nil {
			if *m <= 0 {
				errs = append(errs, field.Invalid(idx.Child("minDomains"), *m, isNotPositiveErrorMsg))
			} else if c.WhenUnsatisfiable != corev1.DoNotSchedule {
				errs = append(errs, field.Invalid(idx.Child("minDomains"), *m,
					fmt.Sprintf("can only use minDomains if whenUnsatisfiable=%s, not %s", corev1.DoNotSchedule, c.WhenUnsatisfiable)))
			}
		}
		if c.NodeAffinityPolicy != nil {
			errs = append(errs, enumField(idx, "nodeAffinityPolicy", string(*c.NodeAffinityPolicy), true,
				corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore)...)
		}
		if c.NodeTaintsPolicy != nil {
			errs = append(errs, enumField(idx, "nodeTaintsPolicy", string(*c.NodeTaintsPolicy), true,
				corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore)...)
		}
		errs = append(errs, metav1validation.ValidateLabelSelector(c.LabelSelector, selectorOpts, idx.Child("labelSelector"))...)
		key := c.TopologyKey + "\x00" + string(c.WhenUnsatisfiable)
		if seen.Has(key) {
			errs = append(errs, field.Duplicate(idx, fmt.Sprintf("{%v, %v}", c.TopologyKey, c.WhenUnsatisfiable)))
		}
		seen.Insert(key)
	}
	return errs
}

func validateSchedulingGates(gates []corev1.PodSchedulingGate, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, g := range gates {
		for _, msg := range validation.IsQualifiedName(g.Name) {
			errs = append(errs, field.Invalid(fldPath.Index(i), g.Name, msg))
		}
		if seen.Has(g.Name) {
			errs = append(errs, field.Duplicate(fldPath.Index(i), g.Name))
		}
		seen.Insert(g.Name)
	}
	return errs
}

// ---------------------------------------------------------------- updates

// updatablePodSpecFields is quoted in the error, as kube-apiserver does.
var updatablePodSpecFields = []string{
	"`spec.containers[*].image`",
	"`spec.initContainers[*].image`",
	"`spec.activeDeadlineSeconds`",
	"`spec.tolerations` (only additions to existing tolerations)",
	"`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
}

// ValidatePodUpdate validates an update: only mutable fields may change (images, activeDeadlineSeconds,
// added tolerations, labels, annotations). The new pod is validated in full as well; status is not looked
// at (status has its own path). A missing metadata.resourceVersion is accepted: pods allow unconditional
// updates and the API compares revisions itself.
func ValidatePodUpdate(newPod, oldPod *corev1.Pod) field.ErrorList {
	metaPath := field.NewPath("metadata")
	newMeta := newPod.ObjectMeta
	if newMeta.ResourceVersion == "" {
		newMeta.ResourceVersion = "unconditional"
	}
	errs := apivalidation.ValidateObjectMetaUpdate(&newMeta, &oldPod.ObjectMeta, metaPath)
	errs = append(errs, ValidatePod(newPod)...)

	specPath := field.NewPath("spec")
	if len(newPod.Spec.Containers) != len(oldPod.Spec.Containers) {
		errs = append(errs, field.Forbidden(specPath.Child("containers"), "pod updates may not add or remove containers"))
		return errs
	}
	if len(newPod.Spec.InitContainers) != len(oldPod.Spec.InitContainers) {
		errs = append(errs, field.Forbidden(specPath.Child("initContainers"), "pod updates may not add or remove containers"))
		return errs
	}

	if nv := newPod.Spec.ActiveDeadlineSeconds; nv != nil {
		if *nv < 0 || *nv > math.MaxInt32 {
			return append(errs, field.Invalid(specPath.Child("activeDeadlineSeconds"), *nv, validation.InclusiveRangeError(0, math.MaxInt32)))
		}
		if ov := oldPod.Spec.ActiveDeadlineSeconds; ov != nil && *ov < *nv {
			return append(errs, field.Invalid(specPath.Child("activeDeadlineSeconds"), *nv, "must be less than or equal to previous value"))
		}
	} else if oldPod.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Invalid(specPath.Child("activeDeadlineSeconds"), newPod.Spec.ActiveDeadlineSeconds, "must not update from a positive integer to nil value"))
	}
	errs = append(errs, validateOnlyAddedTolerations(newPod.Spec.Tolerations, oldPod.Spec.Tolerations, specPath.Child("tolerations"))...)
	errs = append(errs, validateOnlyDeletedSchedulingGates(newPod.Spec.SchedulingGates, oldPod.Spec.SchedulingGates, specPath.Child("schedulingGates"))...)

	if apiequality.Semantic.DeepEqual(newPod.Spec, oldPod.Spec) {
		return errs
	}
	// Put the old values back into everything that may change; whatever still differs may not.
	munged := *newPod.Spec.DeepCopy()
	for i := range munged.Containers {
		munged.Containers[i].Image = oldPod.Spec.Containers[i].Image
	}
	for i := range munged.InitContainers {
		munged.InitContainers[i].Image = oldPod.Spec.InitContainers[i].Image
	}
	munged.ActiveDeadlineSeconds = oldPod.Spec.ActiveDeadlineSeconds
	munged.SchedulingGates = oldPod.Spec.SchedulingGates
	munged.Tolerations = oldPod.Spec.Tolerations
	if og, ng := oldPod.Spec.TerminationGracePeriodSeconds, munged.TerminationGracePeriodSeconds; og != nil && *og < 0 && ng != nil && *ng == 1 {
		munged.TerminationGracePeriodSeconds = og
	}
	if !apiequality.Semantic.DeepEqual(munged, oldPod.Spec) {
		diff := cmp.Diff(oldPod.Spec, munged)
		errs = append(errs, field.Forbidden(specPath, fmt.Sprintf("pod updates may not change fields other than %s\n%v",
			strings.Join(updatablePodSpecFields, ","), diff)))
	}
	return errs
}

func validateOnlyAddedTolerations(newTs, oldTs []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	for _, old := range oldTs {
		found := false
		for _, nt := range newTs {
			o := old
			o.TolerationSeconds = nt.TolerationSeconds // tolerationSeconds may change
			if apiequality.Semantic.DeepEqual(o, nt) {
				found = true
				break
			}
		}
		if !found {
			return field.ErrorList{field.Forbidden(fldPath, "existing toleration can not be modified except its tolerationSeconds")}
		}
	}
	return nil
}

func validateOnlyDeletedSchedulingGates(newGates, oldGates []corev1.PodSchedulingGate, fldPath *field.Path) field.ErrorList {
	old := sets.New[string]()
	for _, g := range oldGates {
		old.Insert(g.Name)
	}
	var errs field.ErrorList
	for i, g := range newGates {
		if !old.Has(g.Name) {
			errs = append(errs, field.Forbidden(fldPath.Index(i).Child("name"), fmt.Sprintf("only deletion is allowed, but found new scheduling gate '%s'", g.Name)))
		}
	}
	return errs
}
