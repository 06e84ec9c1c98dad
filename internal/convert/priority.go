package convert

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Kubernetes' limits and built-in classes (k8s.io/kubernetes/pkg/apis/scheduling).
const (
	HighestUserDefinablePriority = int32(1000000000)
	SystemClusterCritical        = "system-cluster-critical"
	SystemNodeCritical           = "system-node-critical"
	systemPriorityClassPrefix    = "system-"
)

// ErrPriorityClass: a pod's priority cannot be admitted (the API answers 403 Forbidden with the
// error's message after the wrapped text, as kube-apiserver's Priority admission plugin does).
var ErrPriorityClass = errors.New("priority admission")

// ErrPriorityClassConfig: the priority classes given to admission are unusable.
var ErrPriorityClassConfig = errors.New("invalid priority classes")

// PriorityClasses resolves spec.priorityClassName into spec.priority and spec.preemptionPolicy, as
// kube-apiserver's Priority admission plugin does, from the built-in system classes and the classes
// given in configuration. A nil *PriorityClasses knows only the built-in ones.
type PriorityClasses struct {
	byName map[string]*schedulingv1.PriorityClass
	def    *schedulingv1.PriorityClass // the globalDefault class, if any
}

func builtinClasses() []schedulingv1.PriorityClass {
	mk := func(name string, v int32, desc string) schedulingv1.PriorityClass {
		p := corev1.PreemptLowerPriority
		return schedulingv1.PriorityClass{
			TypeMeta:         metav1.TypeMeta{APIVersion: "scheduling.k8s.io/v1", Kind: "PriorityClass"},
			ObjectMeta:       metav1.ObjectMeta{Name: name},
			Value:            v,
			Description:      desc,
			PreemptionPolicy: &p,
		}
	}
	return []schedulingv1.PriorityClass{
		mk(SystemClusterCritical, builtinPriorityClasses[SystemClusterCritical], "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
		mk(SystemNodeCritical, builtinPriorityClasses[SystemNodeCritical], "Used for system critical pods that must not be moved from their current node."),
	}
}

var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// NewPriorityClasses checks user-defined classes as kube-apiserver validates PriorityClass objects
// (a DNS subdomain name without the reserved "system-" prefix, a value of at most 1000000000, at most
// one globalDefault) and adds the built-in ones. preemptionPolicy defaults to PreemptLowerPriority.
func NewPriorityClasses(user ...schedulingv1.PriorityClass) (*PriorityClasses, error) {
	pc := &PriorityClasses{byName: map[string]*schedulingv1.PriorityClass{}}
	for _, c := range builtinClasses() {
		pc.byName[c.Name] = &c
	}
	for i := range user {
		c := user[i].DeepCopy()
		switch {
		case !dns1123Subdomain.MatchString(c.Name) || len(c.Name) > 253:
			return nil, fmt.Errorf("%w: name %q is not a DNS subdomain", ErrPriorityClassConfig, c.Name)
		case strings.HasPrefix(c.Name, systemPriorityClassPrefix):
			return nil, fmt.Errorf("%w: %q: priority class names with the prefix %q are reserved for the system", ErrPriorityClassConfig, c.Name, systemPriorityClassPrefix)
		case c.Value > HighestUserDefinablePriority:
			return nil, fmt.Errorf("%w: %q: value %d is above the highest user definable priority %d", ErrPriorityClassConfig, c.Name, c.Value, HighestUserDefinablePriority)
		case pc.byName[c.Name] != nil:
			return nil, fmt.Errorf("%w: %q defined twice", ErrPriorityClassConfig, c.Name)
		}
		if c.PreemptionPolicy == nil {
			p := corev1.PreemptLowerPriority
			c.PreemptionPolicy = &p
		}
		if p := *c.PreemptionPolicy; p != corev1.PreemptLowerPriority && p != corev1.PreemptNever {
			return nil, fmt.Errorf("%w: %q: preemptionPolicy %q (want %s or %s)", ErrPriorityClassConfig, c.Name, p, corev1.PreemptLowerPriority, corev1.PreemptNever)
		}
		if c.GlobalDefault {
			if pc.def != nil {
				return nil, fmt.Errorf("%w: %q and %q are both globalDefault", ErrPriorityClassConfig, pc.def.Name, c.Name)
			}
			pc.def = c
		}
		c.APIVersion, c.Kind = "scheduling.k8s.io/v1", "PriorityClass"
		pc.byName[c.Name] = c
	}
	return pc, nil
}

// ParsePriorityClasses reads PriorityClass objects from YAML or JSON: documents separated by "---",
// each a PriorityClass or a List of them.
func ParsePriorityClasses(data []byte) (*PriorityClasses, error) {
	var classes []schedulingv1.PriorityClass
	for _, doc := range splitYAML(data) {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPriorityClassConfig, err)
		}
		switch head.Kind {
		case "PriorityClass":
			var c schedulingv1.PriorityClass
			if err := yaml.UnmarshalStrict(doc, &c); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrPriorityClassConfig, err)
			}
			classes = append(classes, c)
		case "List", "PriorityClassList":
			var l schedulingv1.PriorityClassList
			if err := yaml.Unmarshal(doc, &l); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrPriorityClassConfig, err)
			}
			classes = append(classes, l.Items...)
		default:
			return nil, fmt.Errorf("%w: kind %q (want PriorityClass)", ErrPriorityClassConfig, head.Kind)
		}
	}
	return NewPriorityClasses(classes...)
}

// LoadPriorityClasses reads a file of PriorityClass objects.
func LoadPriorityClasses(path string) (*PriorityClasses, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read priority classes: %w", err)
	}
	return ParsePriorityClasses(data)
}

func splitYAML(data []byte) [][]byte {
	var out [][]byte
	for _, doc := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) > 0 {
			out = append(out, doc)
		}
	}
	return out
}

// List returns every class, by name.
func (pc *PriorityClasses) List() []schedulingv1.PriorityClass {
	if pc == nil {
		return builtinClasses()
	}
	out := make([]schedulingv1.PriorityClass, 0, len(pc.byName))
	for _, c := range pc.byName {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns the class called name, or nil.
func (pc *PriorityClasses) Get(name string) *schedulingv1.PriorityClass {
	if pc == nil {
		for _, c := range builtinClasses() {
			if c.Name == name {
				return &c
			}
		}
		return nil
	}
	return pc.byName[name]
}

// AdmitPod is the Priority admission plugin on pod creation: admit the system classes in kube-system
// only (p.Namespace must be set), resolve the named class (or the
// globalDefault one, or priority 0 when there is none), refuse a spec.priority or preemptionPolicy that
// disagrees with it, and set both. Errors wrap ErrPriorityClass.
func (pc *PriorityClasses) AdmitPod(p *corev1.Pod) error {
	s := &p.Spec
	// System classes could preempt the cluster's own components: kube-system only.
	if (s.PriorityClassName == SystemClusterCritical || s.PriorityClassName == SystemNodeCritical) && p.Namespace != metav1.NamespaceSystem {
		return fmt.Errorf("%w: pods with %v priorityClass is not permitted in %v namespace", ErrPriorityClass, s.PriorityClassName, p.Namespace)
	}
	var priority int32
	policy := corev1.PreemptLowerPriority
	if s.PriorityClassName == "" {
		if pc != nil && pc.def != nil {
			s.PriorityClassName = pc.def.Name
			priority, policy = pc.def.Value, *pc.def.PreemptionPolicy
		}
	} else {
		c := pc.Get(s.PriorityClassName)
		if c == nil {
			return fmt.Errorf("%w: no PriorityClass with name %v was found", ErrPriorityClass, s.PriorityClassName)
		}
		priority, policy = c.Value, *c.PreemptionPolicy
	}
	if s.Priority != nil && *s.Priority != priority {
		return fmt.Errorf("%w: the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name",
			ErrPriorityClass, *s.Priority, priority)
	}
	s.Priority = &priority
	if s.PreemptionPolicy != nil && *s.PreemptionPolicy != policy {
		return fmt.Errorf("%w: the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name",
			ErrPriorityClass, *s.PreemptionPolicy, policy)
	}
	s.PreemptionPolicy = &policy
	return nil
}
