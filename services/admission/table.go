package admission

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Server-side printing: kubectl asks for Tables (Accept: application/json;as=Table;v=v1;g=meta.k8s.io)
// and prints the rows as they are. The cells follow kube-apiserver's printers, with the priority-1
// (-o wide) cells always included, as the server does.

type tableOptions struct {
	includeObject metav1.IncludeObjectPolicy // None, Metadata (default) or Object
}

// parseTableAccept returns options when one of the accepted media types is a meta.k8s.io Table.
func parseTableAccept(accept string, q url.Values) *tableOptions {
	for _, mt := range strings.Split(accept, ",") {
		params := map[string]string{}
		for _, kv := range strings.Split(mt, ";")[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			params[k] = v
		}
		if params["as"] == "Table" && params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
			opts := &tableOptions{includeObject: metav1.IncludeMetadata}
			switch p := metav1.IncludeObjectPolicy(q.Get("includeObject")); p {
			case metav1.IncludeNone, metav1.IncludeObject:
				opts.includeObject = p
			}
			return opts
		}
	}
	return nil
}

// newTable starts a table of the given columns.
func newTable(cols []metav1.TableColumnDefinition, rv string) *metav1.Table {
	return &metav1.Table{
		TypeMeta:          metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"},
		ListMeta:          metav1.ListMeta{ResourceVersion: rv},
		ColumnDefinitions: cols,
		Rows:              []metav1.TableRow{},
	}
}

// row builds a row carrying the object as the client asked (full object, metadata only, nothing).
func (o *tableOptions) row(cells []any, obj runtime.Object, meta *metav1.ObjectMeta) metav1.TableRow {
	r := metav1.TableRow{Cells: cells}
	var embed any
	switch o.includeObject {
	case metav1.IncludeObject:
		embed = obj
	case metav1.IncludeNone:
	default:
		embed = &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
			ObjectMeta: *meta,
		}
	}
	if embed != nil {
		if raw, err := json.Marshal(embed); err == nil {
			r.Object = runtime.RawExtension{Raw: raw}
		}
	}
	return r
}

func col(name, typ, desc string, priority int32) metav1.TableColumnDefinition {
	c := metav1.TableColumnDefinition{Name: name, Type: typ, Description: desc, Priority: priority}
	if name == "Name" {
		c.Format = "name"
	}
	return c
}

// since prints a timestamp's age like kubectl ("5m", "<unknown>").
func since(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

var podColumns = []metav1.TableColumnDefinition{
	col("Name", "string", "Name must be unique within a namespace.", 0),
	col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
	col("Status", "string", "The aggregate status of the containers in this pod.", 0),
	col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
	col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
	col("IP", "string", "IP address allocated to the pod. Routable at least within the cluster.", 1),
	col("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", 1),
	col("Nominated Node", "string", "nominatedNodeName is set when this pod preempts other pods on the node.", 1),
	col("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
}

// podRow prints a pod as kubectl's printPod does.
func podRow(pod *corev1.Pod) []any {
	restarts := 0
	totalContainers := len(pod.Spec.Containers)
	readyContainers := 0
	var lastRestart time.Time
	noteRestart := func(cs corev1.ContainerStatus) {
		if t := cs.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(lastRestart) {
			lastRestart = t.FinishedAt.Time
		}
	}
	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}
	initializing := false
	for i, cs := range pod.Status.InitContainerStatuses {
		restarts += int(cs.RestartCount)
		noteRestart(cs)
		switch {
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			continue
		case cs.State.Terminated != nil:
			switch t := cs.State.Terminated; {
			case t.Reason != "":
				reason = "Init:" + t.Reason
			case t.Signal != 0:
				reason = fmt.Sprintf("Init:Signal:%d", t.Signal)
			default:
				reason = fmt.Sprintf("Init:ExitCode:%d", t.ExitCode)
			}
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + cs.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}
	if !initializing || conditionTrue(pod.Status.Conditions, corev1.PodInitialized) {
		restarts = 0
		lastRestart = time.Time{}
		hasRunning := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			cs := pod.Status.ContainerStatuses[i]
			restarts += int(cs.RestartCount)
			noteRestart(cs)
			switch {
			case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
				reason = cs.State.Waiting.Reason
			case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
				reason = cs.State.Terminated.Reason
			case cs.State.Terminated != nil && cs.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", cs.State.Terminated.Signal)
			case cs.State.Terminated != nil:
				reason = fmt.Sprintf("ExitCode:%d", cs.State.Terminated.ExitCode)
			case cs.Ready && cs.State.Running != nil:
				hasRunning = true
				readyContainers++
			}
		}
		if reason == "Completed" && hasRunning {
			reason = "NotReady"
			if conditionTrue(pod.Status.Conditions, corev1.PodReady) {
				reason = "Running"
			}
		}
	}
	if pod.DeletionTimestamp != nil && pod.Status.Reason == "NodeLost" {
		reason = "Unknown"
	} else if pod.DeletionTimestamp != nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		reason = "Terminating"
	}
	restartsStr := strconv.Itoa(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		restartsStr = fmt.Sprintf("%d (%s ago)", restarts, duration.HumanDuration(time.Since(lastRestart)))
	}
	ip := pod.Status.PodIP
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	}
	readinessGates := "<none>"
	if n := len(pod.Spec.ReadinessGates); n > 0 {
		trueGates := 0
		for _, g := range pod.Spec.ReadinessGates {
			if conditionTrue(pod.Status.Conditions, g.ConditionType) {
				trueGates++
			}
		}
		readinessGates = fmt.Sprintf("%d/%d", trueGates, n)
	}
	return []any{
		pod.Name, fmt.Sprintf("%d/%d", readyContainers, totalContainers), reason, restartsStr, since(pod.CreationTimestamp),
		orNone(ip), orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), readinessGates,
	}
}

func conditionTrue(conds []corev1.PodCondition, t corev1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

var nodeColumns = []metav1.TableColumnDefinition{
	col("Name", "string", "Name must be unique within a namespace.", 0),
	col("Status", "string", "The status of the node", 0),
	col("Roles", "string", "The roles of the node", 0),
	col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
	col("Version", "string", "Kubelet Version reported by the node.", 0),
	col("Internal-IP", "string", "List of addresses reachable to the node. Queried from cloud provider, if available.", 1),
	col("External-IP", "string", "List of addresses reachable to the node. Queried from cloud provider, if available.", 1),
	col("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).", 1),
	col("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).", 1),
	col("Container-Runtime", "string", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).", 1),
}

func nodeRow(n *corev1.Node) []any {
	var status []string
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				status = append(status, "Ready")
			} else {
				status = append(status, "NotReady")
			}
		}
	}
	if len(status) == 0 {
		status = append(status, "Unknown")
	}
	if n.Spec.Unschedulable {
		status = append(status, "SchedulingDisabled")
	}
	roles := map[string]bool{}
	for k, v := range n.Labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if role := strings.TrimPrefix(k, "node-role.kubernetes.io/"); role != "" {
				roles[role] = true
			}
		case k == "kubernetes.io/role" && v != "":
			roles[v] = true
		}
	}
	roleList := make([]string, 0, len(roles))
	for r := range roles {
		roleList = append(roleList, r)
	}
	sortStrings(roleList)
	address := func(t corev1.NodeAddressType) string {
		for _, a := range n.Status.Addresses {
			if a.Type == t {
				return a.Address
			}
		}
		return "<none>"
	}
	return []any{
		n.Name, strings.Join(status, ","), orNone(strings.Join(roleList, ",")), since(n.CreationTimestamp), n.Status.NodeInfo.KubeletVersion,
		address(corev1.NodeInternalIP), address(corev1.NodeExternalIP), orUnknown(n.Status.NodeInfo.OSImage),
		orUnknown(n.Status.NodeInfo.KernelVersion), orUnknown(n.Status.NodeInfo.ContainerRuntimeVersion),
	}
}

var eventColumns = []metav1.TableColumnDefinition{
	col("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded.", 0),
	col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future", 0),
	col("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", 0),
	col("Object", "string", "The object that this event is about.", 0),
	col("Subobject", "string", "The subobject (e.g. a container) that this event is about.", 1),
	col("Source", "string", "The component reporting this event.", 1),
	col("Message", "string", "A human-readable description of the status of this operation.", 0),
	col("First Seen", "string", "The time at which the event was first recorded.", 1),
	col("Count", "string", "The number of times this event has occurred.", 1),
	col("Name", "string", "Name must be unique within a namespace.", 1),
}

func eventRow(e *corev1.Event) []any {
	first := since(e.FirstTimestamp)
	if e.FirstTimestamp.IsZero() && !e.EventTime.IsZero() {
		first = duration.HumanDuration(time.Since(e.EventTime.Time))
	}
	last := since(e.LastTimestamp)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if count == 0 {
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	source := e.Source.Component
	if source == "" {
		source = e.ReportingController
	}
	host := e.Source.Host
	if host == "" {
		host = e.ReportingInstance
	}
	if host != "" {
		source += ", " + host
	}
	return []any{
		last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count), e.Name,
	}
}

var namespaceColumns = []metav1.TableColumnDefinition{
	col("Name", "string", "Name must be unique within a namespace.", 0),
	col("Status", "string", "The status of the namespace", 0),
	col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
}

func namespaceRow(ns *corev1.Namespace) []any {
	return []any{ns.Name, string(ns.Status.Phase), since(ns.CreationTimestamp)}
}
