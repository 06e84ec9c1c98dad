package admission

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kindInfo is what lists, tables, selectors and watches need to know about one kind.
type kindInfo struct {
	kind, listKind string
	gr             schema.GroupResource
	columns        []metav1.TableColumnDefinition
	cells          func(runtime.Object) []any
	meta           func(runtime.Object) *metav1.ObjectMeta
	fields         func(runtime.Object) fields.Set // the fields a fieldSelector may name
}

var podKind = &kindInfo{
	kind: "Pod", listKind: "PodList", gr: grPods, columns: podColumns,
	cells: func(o runtime.Object) []any { return podRow(o.(*corev1.Pod)) },
	meta:  func(o runtime.Object) *metav1.ObjectMeta { return &o.(*corev1.Pod).ObjectMeta },
	fields: func(o runtime.Object) fields.Set {
		p := o.(*corev1.Pod)
		return fields.Set{
			"metadata.name":            p.Name,
			"metadata.namespace":       p.Namespace,
			"spec.nodeName":            p.Spec.NodeName,
			"spec.restartPolicy":       string(p.Spec.RestartPolicy),
			"spec.schedulerName":       p.Spec.SchedulerName,
			"spec.serviceAccountName":  p.Spec.ServiceAccountName,
			"spec.hostNetwork":         strconv.FormatBool(p.Spec.HostNetwork),
			"status.phase":             string(p.Status.Phase),
			"status.podIP":             p.Status.PodIP,
			"status.nominatedNodeName": p.Status.NominatedNodeName,
		}
	},
}

var nodeKind = &kindInfo{
	kind: "Node", listKind: "NodeList", gr: grNodes, columns: nodeColumns,
	cells: func(o runtime.Object) []any { return nodeRow(o.(*corev1.Node)) },
	meta:  func(o runtime.Object) *metav1.ObjectMeta { return &o.(*corev1.Node).ObjectMeta },
	fields: func(o runtime.Object) fields.Set {
		n := o.(*corev1.Node)
		return fields.Set{"metadata.name": n.Name, "spec.unschedulable": strconv.FormatBool(n.Spec.Unschedulable)}
	},
}

var eventKind = &kindInfo{
	kind: "Event", listKind: "EventList", gr: grEvents, columns: eventColumns,
	cells: func(o runtime.Object) []any { return eventRow(o.(*corev1.Event)) },
	meta:  func(o runtime.Object) *metav1.ObjectMeta { return &o.(*corev1.Event).ObjectMeta },
	fields: func(o runtime.Object) fields.Set {
		e := o.(*corev1.Event)
		return fields.Set{
			"metadata.name":                  e.Name,
			"metadata.namespace":             e.Namespace,
			"involvedObject.kind":            e.InvolvedObject.Kind,
			"involvedObject.namespace":       e.InvolvedObject.Namespace,
			"involvedObject.name":            e.InvolvedObject.Name,
			"involvedObject.uid":             string(e.InvolvedObject.UID),
			"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
			"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
			"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
			"reason":                         e.Reason,
			"reportingComponent":             e.ReportingController,
			"source":                         e.Source.Component,
			"type":                           e.Type,
		}
	},
}

var namespaceKind = &kindInfo{
	kind: "Namespace", listKind: "NamespaceList", gr: grNamespaces, columns: namespaceColumns,
	cells: func(o runtime.Object) []any { return namespaceRow(o.(*corev1.Namespace)) },
	meta:  func(o runtime.Object) *metav1.ObjectMeta { return &o.(*corev1.Namespace).ObjectMeta },
	fields: func(o runtime.Object) fields.Set {
		n := o.(*corev1.Namespace)
		return fields.Set{"metadata.name": n.Name, "status.phase": string(n.Status.Phase)}
	},
}

// matcher holds a request's label and field selectors.
type matcher struct {
	label labels.Selector
	field fields.Selector
}

// newMatcher parses labelSelector and fieldSelector; fields the kind does not know are a 400.
func newMatcher(q url.Values, ki *kindInfo) (matcher, error) {
	m := matcher{label: labels.Everything(), field: fields.Everything()}
	if s := q.Get("labelSelector"); s != "" {
		sel, err := labels.Parse(s)
		if err != nil {
			return m, badRequest("unable to parse requirement: %v", err)
		}
		m.label = sel
	}
	if s := q.Get("fieldSelector"); s != "" {
		sel, err := fields.ParseSelector(s)
		if err != nil {
			return m, badRequest("invalid field selector: %v", err)
		}
		known := ki.fields(zeroObject(ki))
		for _, r := range sel.Requirements() {
			if _, ok := known[r.Field]; !ok {
				return m, badRequest("field label not supported: %s", r.Field)
			}
		}
		m.field = sel
	}
	return m, nil
}

func zeroObject(ki *kindInfo) runtime.Object {
	switch ki.kind {
	case "Pod":
		return &corev1.Pod{}
	case "Node":
		return &corev1.Node{}
	case "Event":
		return &corev1.Event{}
	default:
		return &corev1.Namespace{}
	}
}

func (m matcher) matches(ki *kindInfo, o runtime.Object) bool {
	return m.label.Matches(labels.Set(ki.meta(o).Labels)) && m.field.Matches(ki.fields(o))
}

// fieldValue returns the value a fieldSelector requires for field with "=" or "==" ("" if none).
func (m matcher) fieldValue(field string) string {
	v, _ := m.field.RequiresExactMatch(field)
	return v
}

// genericList is a v1 XxxList.
type genericList struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ListMeta  `json:"metadata"`
	Items           []runtime.Object `json:"items"`
}

// writeList answers objs as a list or a Table, in a stable order (namespace, name).
func writeList(w http.ResponseWriter, req request, ki *kindInfo, objs []runtime.Object, rv uint64) {
	slices.SortStableFunc(objs, func(a, b runtime.Object) int {
		ma, mb := ki.meta(a), ki.meta(b)
		if ma.Namespace != mb.Namespace {
			if ma.Namespace < mb.Namespace {
				return -1
			}
			return 1
		}
		switch {
		case ma.Name < mb.Name:
			return -1
		case ma.Name > mb.Name:
			return 1
		}
		return 0
	})
	rvs := strconv.FormatUint(rv, 10)
	if req.table != nil {
		t := newTable(ki.columns, rvs)
		for _, o := range objs {
			t.Rows = append(t.Rows, req.table.row(ki.cells(o), o, ki.meta(o)))
		}
		writeJSON(w, http.StatusOK, t)
		return
	}
	if objs == nil {
		objs = []runtime.Object{}
	}
	writeJSON(w, http.StatusOK, genericList{
		TypeMeta: metav1.TypeMeta{Kind: ki.listKind, APIVersion: "v1"},
		Metadata: metav1.ListMeta{ResourceVersion: rvs},
		Items:    objs,
	})
}

// writeObject answers one object, or a one-row Table.
func writeObject(w http.ResponseWriter, code int, req request, ki *kindInfo, o runtime.Object) {
	if req.table != nil && req.sub == "" {
		t := newTable(ki.columns, ki.meta(o).ResourceVersion)
		t.Rows = append(t.Rows, req.table.row(ki.cells(o), o, ki.meta(o)))
		writeJSON(w, code, t)
		return
	}
	writeJSON(w, code, o)
}

// parseRV parses a resourceVersion parameter ("" and "0" mean "any").
func parseRV(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, badRequest("invalid resource version %q", s)
	}
	return v, nil
}

func sortStrings(s []string) { slices.Sort(s) }
