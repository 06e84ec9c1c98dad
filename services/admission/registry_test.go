package admission

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
)

// widget is a kind the registry knows nothing special about, served under /apis/example.podbus.io/v1.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec `json:"spec,omitempty"`
}

type widgetSpec struct {
	Size  int      `json:"size,omitempty"`
	Color string   `json:"color,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

func (w *widget) DeepCopyObject() runtime.Object {
	c := *w
	w.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Spec.Tags = append([]string(nil), w.Spec.Tags...)
	return &c
}

var widgetKind = &kind{
	group: "example.podbus.io", version: "v1", kind: "Widget", resource: "widgets", singular: "widget",
	shortNames: []string{"wg"}, categories: []string{"all"}, namespaced: true,
	newObject: func() runtime.Object { return &widget{} },
	columns: []metav1.TableColumnDefinition{
		col("Name", "string", "Name must be unique within a namespace.", 0),
		col("Size", "integer", "How big.", 0),
		col("Color", "string", "Which color.", 1),
	},
	cells: func(o runtime.Object) []any { w := o.(*widget); return []any{w.Name, int64(w.Spec.Size), w.Spec.Color} },
	fields: func(o runtime.Object) fields.Set {
		w := o.(*widget)
		return fields.Set{"metadata.name": w.Name, "metadata.namespace": w.Namespace, "spec.color": w.Spec.Color}
	},
	storage: jsonStorage(bus.BucketSpec{Name: "widgets", Description: "test widgets", History: 4}, func() runtime.Object { return &widget{} }),
	strategy: strategy{
		prepareForCreate: func(o runtime.Object) {
			if w := o.(*widget); w.Spec.Color == "" {
				w.Spec.Color = "grey"
			}
		},
		validate: func(o runtime.Object) field.ErrorList {
			if w := o.(*widget); w.Spec.Size < 0 {
				return field.ErrorList{field.Invalid(field.NewPath("spec", "size"), w.Spec.Size, "must be non-negative")}
			}
			return nil
		},
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			if o.(*widget).Spec.Size < old.(*widget).Spec.Size {
				return field.ErrorList{field.Forbidden(field.NewPath("spec", "size"), "may only grow")}
			}
			return nil
		},
	},
}

// TestRegistryNewKind serves a new kind end to end from its description alone.
func TestRegistryNewKind(t *testing.T) {
	e := start(t, func(c *Config) { c.extraKinds = []*kind{widgetKind} }, true)
	const base = "/apis/example.podbus.io/v1/namespaces/default/widgets"

	// Discovery: legacy and aggregated.
	_, data := e.do("GET", "/apis", "")
	var groups metav1.APIGroupList
	_ = json.Unmarshal(data, &groups)
	i := slices.IndexFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == "example.podbus.io" })
	if i < 0 || groups.Groups[i].PreferredVersion.GroupVersion != "example.podbus.io/v1" {
		t.Errorf("/apis = %s", data)
	}
	_, data = e.do("GET", "/apis", "", "Accept: "+aggregatedAccept)
	var agg apidiscoveryv2.APIGroupDiscoveryList
	_ = json.Unmarshal(data, &agg)
	i = slices.IndexFunc(agg.Items, func(g apidiscoveryv2.APIGroupDiscovery) bool { return g.Name == "example.podbus.io" })
	if i < 0 || len(agg.Items[i].Versions) != 1 ||
		agg.Items[i].Versions[0].Resources[0].Resource != "widgets" || agg.Items[i].Versions[0].Resources[0].Scope != apidiscoveryv2.ScopeNamespace {
		t.Errorf("aggregated /apis = %s", data)
	}
	resp, data := e.do("GET", "/apis/example.podbus.io/v1", "")
	var rl metav1.APIResourceList
	_ = json.Unmarshal(data, &rl)
	if resp.StatusCode != 200 || rl.GroupVersion != "example.podbus.io/v1" || len(rl.APIResources) != 1 || rl.APIResources[0].Kind != "Widget" ||
		!cmp.Equal(rl.APIResources[0].ShortNames, []string{"wg"}) {
		t.Errorf("/apis/example.podbus.io/v1 = %d %s", resp.StatusCode, data)
	}
	if resp, _ := e.do("GET", "/apis/example.podbus.io", ""); resp.StatusCode != 200 {
		t.Errorf("/apis/example.podbus.io = %d", resp.StatusCode)
	}
	_, data = e.do("GET", "/openapi/v3", "")
	if !strings.Contains(string(data), `"apis/example.podbus.io/v1"`) {
		t.Errorf("openapi root = %s", data)
	}
	if resp, data := e.do("GET", "/openapi/v3/apis/example.podbus.io/v1", ""); resp.StatusCode != 200 ||
		!strings.Contains(string(data), `"patchExamplePodbusIoV1Widget"`) {
		t.Errorf("openapi document = %d %.300s", resp.StatusCode, data)
	}

	// Watch from the start, then create, patch, delete.
	next, stop := e.watchStream(base + "?watch=true")
	defer stop()

	resp, data = e.do("POST", base, `{"apiVersion":"example.podbus.io/v1","kind":"Widget","metadata":{"name":"w1","labels":{"a":"b"}},"spec":{"size":2,"tags":["x"]}}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	var w widget
	_ = json.Unmarshal(data, &w)
	if w.Spec.Color != "grey" || w.UID == "" || w.ResourceVersion == "" || w.APIVersion != "example.podbus.io/v1" {
		t.Errorf("created = %s", data)
	}
	if typ, obj := next(); typ != watchAdded || get(obj, "metadata", "name") != "w1" {
		t.Errorf("watch: %s %v", typ, obj)
	}
	errorsCases := []struct {
		name, method, path, body string
		code                     int
	}{
		{"invalid", "POST", base, `{"metadata":{"name":"neg"},"spec":{"size":-1}}`, 422},
		{"exists", "POST", base, `{"metadata":{"name":"w1"}}`, 409},
		{"wrong group", "POST", base, `{"apiVersion":"v1","kind":"Widget","metadata":{"name":"w9"}}`, 400},
		{"missing namespace", "POST", "/apis/example.podbus.io/v1/namespaces/nope/widgets", `{"metadata":{"name":"w9"}}`, 404},
		{"shrink refused", "PATCH", base + "/w1", `{"spec":{"size":1}}`, 422},
		{"unknown version", "GET", "/apis/example.podbus.io/v2/namespaces/default/widgets", "", 404},
		{"not found", "GET", base + "/nope", "", 404},
	}
	for _, tt := range errorsCases {
		var headers []string
		if tt.method == "PATCH" {
			headers = append(headers, "Content-Type: application/merge-patch+json")
		}
		if resp, data := e.do(tt.method, tt.path, tt.body, headers...); resp.StatusCode != tt.code {
			t.Errorf("%s: %d %s, want %d", tt.name, resp.StatusCode, data, tt.code)
		}
	}

	for i, patch := range []struct{ ct, body string }{
		{"application/merge-patch+json", `{"spec":{"size":3}}`},
		{"application/strategic-merge-patch+json", `{"spec":{"color":"red"}}`},
		{"application/json-patch+json", `[{"op":"add","path":"/spec/tags/-","value":"y"}]`},
	} {
		resp, data := e.do("PATCH", base+"/w1", patch.body, "Content-Type: "+patch.ct)
		if resp.StatusCode != 200 {
			t.Fatalf("patch %d: %d %s", i, resp.StatusCode, data)
		}
		if typ, _ := next(); typ != watchModified {
			t.Errorf("patch %d: watch event %s", i, typ)
		}
	}
	_, data = e.do("GET", base+"/w1", "")
	_ = json.Unmarshal(data, &w)
	if w.Spec.Size != 3 || w.Spec.Color != "red" || !cmp.Equal(w.Spec.Tags, []string{"x", "y"}) {
		t.Errorf("after patches: %s", data)
	}
	// PUT with a stale resourceVersion is the client's Conflict.
	if resp, data := e.do("PUT", base+"/w1", `{"metadata":{"name":"w1","resourceVersion":"1"},"spec":{"size":4}}`); resp.StatusCode != 409 {
		t.Errorf("stale PUT: %d %s", resp.StatusCode, data)
	}

	// Lists, selectors, tables.
	if resp, data := e.do("POST", base, `{"metadata":{"name":"w2"},"spec":{"size":7,"color":"blue"}}`); resp.StatusCode != 201 {
		t.Fatalf("create w2: %s", data)
	}
	_, _ = next()
	_, data = e.do("GET", base+"?fieldSelector=spec.color%3Dblue", "")
	var list struct {
		Kind, APIVersion string
		Items            []widget
	}
	_ = json.Unmarshal(data, &list)
	if list.Kind != "WidgetList" || list.APIVersion != "example.podbus.io/v1" || len(list.Items) != 1 || list.Items[0].Name != "w2" {
		t.Errorf("field selector list = %s", data)
	}
	if resp, _ := e.do("GET", base+"?fieldSelector=spec.size%3D1", ""); resp.StatusCode != 400 {
		t.Errorf("unknown field selector = %d", resp.StatusCode)
	}
	_, data = e.do("GET", "/apis/example.podbus.io/v1/widgets?labelSelector=a%3Db", "", tableAccept)
	var tbl metav1.Table
	_ = json.Unmarshal(data, &tbl)
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if d := cmp.Diff([]string{"Name", "Size", "Color"}, cols); d != "" || len(tbl.Rows) != 1 || fmt.Sprint(tbl.Rows[0].Cells) != "[w1 3 red]" {
		t.Errorf("table (-want +got cols):\n%s\n%s", d, data)
	}

	// Delete: a Status, a DELETED event, then 404.
	resp, data = e.do("DELETE", base+"/w1", "")
	if st := decodeStatus(t, data); resp.StatusCode != 200 || st.Status != metav1.StatusSuccess || st.Details.Group != "example.podbus.io" {
		t.Errorf("delete: %d %s", resp.StatusCode, data)
	}
	if typ, obj := next(); typ != watchDeleted || get(obj, "metadata", "name") != "w1" {
		t.Errorf("watch after delete: %s %v", typ, obj)
	}
	if resp, _ := e.do("GET", base+"/w1", ""); resp.StatusCode != 404 {
		t.Errorf("get after delete = %d", resp.StatusCode)
	}
}

// TestRegistryMinimalKind: a cluster-scoped kind with nothing but names and storage gets the default
// table, field selectors and every verb.
func TestRegistryMinimalKind(t *testing.T) {
	gadgets := &kind{
		group: "other.podbus.io", version: "v1alpha1", kind: "Gadget", resource: "gadgets", singular: "gadget",
		newObject: func() runtime.Object { return &widget{} },
		storage:   jsonStorage(bus.BucketSpec{Name: "gadgets", History: 1}, func() runtime.Object { return &widget{} }),
	}
	e := start(t, func(c *Config) { c.extraKinds = []*kind{gadgets} }, true)
	const base = "/apis/other.podbus.io/v1alpha1/gadgets"
	for _, name := range []string{"g1", "g2"} {
		if resp, data := e.do("POST", base, `{"metadata":{"name":"`+name+`","namespace":"ignored"}}`); resp.StatusCode != 201 ||
			strings.Contains(string(data), "ignored") || !strings.Contains(string(data), `"kind":"Gadget"`) {
			t.Fatalf("create %s: %d %s", name, resp.StatusCode, data)
		}
	}
	if resp, data := e.do("POST", base, `{"metadata":{"name":"Not_A_Name"}}`); resp.StatusCode != 422 {
		t.Errorf("invalid name: %d %s", resp.StatusCode, data)
	}
	if resp, data := e.do("POST", base, `{"metadata":{}}`); resp.StatusCode != 422 {
		t.Errorf("no name: %d %s", resp.StatusCode, data)
	}
	_, data := e.do("GET", base+"?fieldSelector=metadata.name%3Dg2", "", tableAccept)
	var tbl metav1.Table
	_ = json.Unmarshal(data, &tbl)
	if len(tbl.ColumnDefinitions) != 2 || tbl.ColumnDefinitions[0].Name != "Name" || tbl.ColumnDefinitions[1].Name != "Age" ||
		len(tbl.Rows) != 1 || tbl.Rows[0].Cells[0] != "g2" {
		t.Errorf("default table = %s", data)
	}
	if resp, _ := e.do("GET", "/apis/other.podbus.io/v1alpha1/namespaces/default/gadgets/g1", ""); resp.StatusCode != 404 {
		t.Errorf("namespaced URL of a cluster-scoped kind = %d", resp.StatusCode)
	}
	if resp, _ := e.do("GET", base+"/g1/status", ""); resp.StatusCode != 404 {
		t.Errorf("undeclared subresource = %d", resp.StatusCode)
	}
	if resp, data := e.do("DELETE", base+"/g1", ""); resp.StatusCode != 200 {
		t.Errorf("delete = %d %s", resp.StatusCode, data)
	}
}
