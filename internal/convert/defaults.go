package convert

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Values kube-apiserver fills in for a v1 pod (pkg/apis/core/v1/defaults.go and the admission plugins
// Priority, ServiceAccount and DefaultTolerationSeconds).
const (
	DefaultNamespace                     = metav1.NamespaceDefault
	DefaultSchedulerName                 = corev1.DefaultSchedulerName
	DefaultTerminationGracePeriodSeconds = int64(corev1.DefaultTerminationGracePeriodSeconds)
	DefaultServiceAccountName            = "default"
	DefaultTolerationSeconds             = int64(300)
	defaultTerminationMessagePath        = corev1.TerminationMessagePathDefault
)

// Built-in priority classes that exist in every cluster (more come from configuration: PriorityClasses).
var builtinPriorityClasses = map[string]int32{
	"system-cluster-critical": 2000000000,
	"system-node-critical":    2000001000,
}

// DefaultPod applies Kubernetes' defaults (restartPolicy, dnsPolicy, terminationGracePeriodSeconds,
// schedulerName, imagePullPolicy, protocol, probe timings, enableServiceLinks, ...). It is idempotent, so
// the API may apply it to update bodies too, as kube-apiserver does when decoding.
func DefaultPod(p *corev1.Pod) {
	if p.Namespace == "" {
		p.Namespace = DefaultNamespace
	}
	s := &p.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.TerminationGracePeriodSeconds == nil {
		v := DefaultTerminationGracePeriodSeconds
		s.TerminationGracePeriodSeconds = &v
	}
	if s.SchedulerName == "" {
		s.SchedulerName = DefaultSchedulerName
	}
	if s.EnableServiceLinks == nil {
		v := corev1.DefaultEnableServiceLinks
		s.EnableServiceLinks = &v
	}
	if s.ServiceAccountName == "" {
		s.ServiceAccountName = s.DeprecatedServiceAccount
	}
	if s.ServiceAccountName == "" {
		s.ServiceAccountName = DefaultServiceAccountName
	}
	// The deprecated alias mirrors the name, as kube-apiserver shows it.
	s.DeprecatedServiceAccount = s.ServiceAccountName
	if s.Priority == nil {
		// On create PriorityClasses.AdmitPod has set it already; this covers bodies that reach
		// defaulting without it (updates of pods stored before priorities were admitted).
		v := builtinPriorityClasses[s.PriorityClassName]
		s.Priority = &v
	}
	if s.PreemptionPolicy == nil {
		v := corev1.PreemptLowerPriority
		s.PreemptionPolicy = &v
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		if v.VolumeSource == (corev1.VolumeSource{}) {
			v.EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i], s.HostNetwork)
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i], s.HostNetwork)
	}
	s.Tolerations = defaultTolerations(s.Tolerations)
}

func defaultContainer(c *corev1.Container, hostNetwork bool) {
	if c.ImagePullPolicy == "" {
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		} else {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = defaultTerminationMessagePath
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		// With the host's network the container port is the host port.
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
	for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(pr)
	}
	// Limits without requests mean requests equal to the limits.
	for name, lim := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; ok {
			continue
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		c.Resources.Requests[name] = lim.DeepCopy()
	}
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if h := p.HTTPGet; h != nil {
		if h.Path == "" {
			h.Path = "/"
		}
		if h.Scheme == "" {
			h.Scheme = corev1.URISchemeHTTP
		}
	}
}

// imageTag returns the image's tag as the kubelet's reference parser would: "latest" when neither a tag
// nor a digest is given, "" for a digest without a tag.
func imageTag(image string) string {
	name, _, hasDigest := strings.Cut(image, "@")
	tag := ""
	if i := strings.LastIndex(name, ":"); i >= 0 && !strings.Contains(name[i+1:], "/") {
		tag = name[i+1:]
	}
	if tag == "" && !hasDigest {
		tag = "latest"
	}
	return tag
}

// defaultTolerations is the DefaultTolerationSeconds admission plugin: pods tolerate a not-ready or
// unreachable node for 5 minutes before eviction unless they already say otherwise.
func defaultTolerations(ts []corev1.Toleration) []corev1.Toleration {
	notReady, unreachable := false, false
	for _, t := range ts {
		if t.Effect != corev1.TaintEffectNoExecute && t.Effect != "" {
			continue
		}
		if t.Key == corev1.TaintNodeNotReady || t.Key == "" {
			notReady = true
		}
		if t.Key == corev1.TaintNodeUnreachable || t.Key == "" {
			unreachable = true
		}
	}
	add := func(key string) {
		secs := DefaultTolerationSeconds
		ts = append(ts, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs,
		})
	}
	if !notReady {
		add(corev1.TaintNodeNotReady)
	}
	if !unreachable {
		add(corev1.TaintNodeUnreachable)
	}
	return ts
}
