package admission

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// matcher holds a request's label and field selectors.
type matcher struct {
	label labels.Selector
	field fields.Selector
}

// newMatcher parses labelSelector and fieldSelector; fields the kind does not know are a 400.
func newMatcher(q url.Values, ki *kind) (matcher, error) {
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
		known := ki.fieldSet(ki.newObject())
		for _, r := range sel.Requirements() {
			if _, ok := known[r.Field]; !ok {
				return m, badRequest("field label not supported: %s", r.Field)
			}
		}
		m.field = sel
	}
	return m, nil
}

func (m matcher) matches(ki *kind, o runtime.Object) bool {
	return m.label.Matches(labels.Set(ki.meta(o).Labels)) && m.field.Matches(ki.fieldSet(o))
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
func writeList(w http.ResponseWriter, req request, ki *kind, objs []runtime.Object, rv uint64) {
	writeListMeta(w, req, ki, objs, metav1.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)})
}

// byNamespaceName orders objects as every list is ordered: by namespace, then name.
func (ki *kind) byNamespaceName(a, b runtime.Object) int {
	ma, mb := ki.meta(a), ki.meta(b)
	if c := strings.Compare(ma.Namespace, mb.Namespace); c != 0 {
		return c
	}
	return strings.Compare(ma.Name, mb.Name)
}

// writeListMeta answers objs as a list or a Table with the given list metadata (a page's continue token).
func writeListMeta(w http.ResponseWriter, req request, ki *kind, objs []runtime.Object, meta metav1.ListMeta) {
	slices.SortStableFunc(objs, ki.byNamespaceName)
	if err := streamList(context.Background(), w, req, ki, meta, objectsOf(objs)); err != nil {
		answerListError(w, err)
	}
}

// writeObject answers one object, or a one-row Table.
func writeObject(w http.ResponseWriter, code int, req request, ki *kind, o runtime.Object) {
	if req.table != nil && req.sub == "" {
		t := newTable(ki.tableColumns(), ki.meta(o).ResourceVersion)
		t.Rows = append(t.Rows, req.table.row(ki.row(o), o, ki.meta(o)))
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
