package admission

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The OpenAPI v3 document covers the four kinds: kubectl reads it to learn that PATCH accepts
// fieldValidation (then it leaves validation to the server and sends fieldValidation=Strict), kubectl
// apply takes the patch strategies from the kind's schema, and kubectl explain prints it. Validation
// itself is done by strict decoding here.

type openAPIKind struct {
	kind, path, schema string
	namespaced         bool
	object             any
}

var openAPIKinds = []openAPIKind{
	{kind: "Pod", path: "pods", schema: "io.k8s.api.core.v1.Pod", object: corev1.Pod{}, namespaced: true},
	{kind: "Node", path: "nodes", schema: "io.k8s.api.core.v1.Node", object: corev1.Node{}},
	{kind: "Event", path: "events", schema: "io.k8s.api.core.v1.Event", object: corev1.Event{}, namespaced: true},
	{kind: "Namespace", path: "namespaces", schema: "io.k8s.api.core.v1.Namespace", object: corev1.Namespace{}},
}

var openAPIV1 = sync.OnceValues(func() ([]byte, string) {
	type m = map[string]any
	gen := &schemaGen{defs: m{}}
	queryParam := func(name, desc string) m {
		return m{"name": name, "in": "query", "description": desc, "schema": m{"type": "string", "uniqueItems": true}}
	}
	pathParam := func(name string) m {
		return m{"name": name, "in": "path", "required": true, "schema": m{"type": "string", "uniqueItems": true}}
	}
	paths := m{}
	for _, k := range openAPIKinds {
		gvk := m{"group": "", "version": "v1", "kind": k.kind}
		schema := gen.schemaOf(reflect.TypeOf(k.object))
		gen.defs[k.schema].(m)["x-kubernetes-group-version-kind"] = []any{gvk}
		content := m{"application/json": m{"schema": schema}}
		params := []any{pathParam("name")}
		p := "/api/v1/" + k.path + "/{name}"
		if k.namespaced {
			params = append(params, pathParam("namespace"))
			p = "/api/v1/namespaces/{namespace}/" + k.path + "/{name}"
		}
		paths[p] = m{
			"parameters": params,
			"get": m{
				"description":                     "read the specified " + k.kind,
				"operationId":                     "readCoreV1" + k.kind,
				"responses":                       m{"200": m{"description": "OK", "content": content}},
				"x-kubernetes-action":             "get",
				"x-kubernetes-group-version-kind": gvk,
			},
			"patch": m{
				"description": "partially update the specified " + k.kind,
				"operationId": "patchCoreV1" + k.kind,
				"parameters": []any{
					queryParam("dryRun", "When present, indicates that modifications should not be persisted."),
					queryParam("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
					queryParam("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields: Ignore, Warn or Strict."),
				},
				"requestBody": m{"required": true, "content": m{
					"application/json-patch+json":            m{"schema": m{"type": "object"}},
					"application/merge-patch+json":           m{"schema": m{"type": "object"}},
					"application/strategic-merge-patch+json": m{"schema": m{"type": "object"}},
				}},
				"responses":                       m{"200": m{"description": "OK", "content": content}},
				"x-kubernetes-action":             "patch",
				"x-kubernetes-group-version-kind": gvk,
			},
		}
	}
	doc := m{
		"openapi":    "3.0.0",
		"info":       m{"title": "Kubernetes", "version": gitVersion},
		"paths":      paths,
		"components": m{"schemas": gen.defs},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		panic(err) // a static document: cannot fail
	}
	sum := sha512.Sum512(data)
	return data, hex.EncodeToString(sum[:])
})

// schemaGen derives OpenAPI v3 schemas from the k8s.io/api Go types, as openapi-gen does: json names,
// descriptions from SwaggerDoc, and the patch strategy tags that strategic merge patch (kubectl apply)
// needs.
type schemaGen struct {
	defs map[string]any
}

var (
	typeTime        = reflect.TypeOf(metav1.Time{})
	typeMicroTime   = reflect.TypeOf(metav1.MicroTime{})
	typeQuantity    = reflect.TypeOf(resource.Quantity{})
	typeIntOrString = reflect.TypeOf(intstr.IntOrString{})
)

// defName is the schema name kube-apiserver uses: io.k8s.api.core.v1.Pod.
func defName(t reflect.Type) string {
	parts := strings.Split(t.PkgPath(), "/")
	host := strings.Split(parts[0], ".")
	slices.Reverse(host)
	return strings.Join(append(host, parts[1:]...), ".") + "." + t.Name()
}

func (g *schemaGen) schemaOf(t reflect.Type) map[string]any {
	switch t {
	case typeTime, typeMicroTime:
		return map[string]any{"type": "string", "format": "date-time"}
	case typeQuantity:
		return map[string]any{"type": "string", "x-kubernetes-int-or-string": true}
	case typeIntOrString:
		return map[string]any{"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": true}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schemaOf(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int32, reflect.Uint32, reflect.Int16, reflect.Uint16, reflect.Int8, reflect.Uint8:
		return map[string]any{"type": "integer", "format": "int32"}
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number", "format": "double"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": g.schemaOf(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schemaOf(t.Elem())}
	case reflect.Struct:
		name := defName(t)
		if _, ok := g.defs[name]; !ok {
			def := map[string]any{"type": "object"}
			g.defs[name] = def // before the fields: types may refer to themselves
			props := map[string]any{}
			g.fields(t, props)
			def["properties"] = props
			if doc := swaggerDoc(t); doc[""] != "" {
				def["description"] = doc[""]
			}
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{"type": "object"}
}

// fields adds t's JSON fields to props, descending into inlined embedded structs.
func (g *schemaGen) fields(t reflect.Type, props map[string]any) {
	doc := swaggerDoc(t)
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" && (opts == "inline" || f.Anonymous) {
			g.fields(f.Type, props)
			continue
		}
		if name == "" {
			name = f.Name
		}
		sch := g.schemaOf(f.Type)
		if ref, ok := sch["$ref"]; ok {
			sch = map[string]any{"allOf": []any{map[string]any{"$ref": ref}}}
		}
		if d := doc[name]; d != "" {
			sch["description"] = d
		}
		if v := f.Tag.Get("patchStrategy"); v != "" {
			sch["x-kubernetes-patch-strategy"] = v
		}
		if v := f.Tag.Get("patchMergeKey"); v != "" {
			sch["x-kubernetes-patch-merge-key"] = v
		}
		props[name] = sch
	}
}

func swaggerDoc(t reflect.Type) map[string]string {
	if d, ok := reflect.New(t).Elem().Interface().(interface{ SwaggerDoc() map[string]string }); ok {
		return d.SwaggerDoc()
	}
	return nil
}

func handleOpenAPIRoot(w http.ResponseWriter, _ *http.Request) {
	_, hash := openAPIV1()
	writeJSON(w, http.StatusOK, map[string]any{"paths": map[string]any{
		"api/v1": map[string]string{"serverRelativeURL": "/openapi/v3/api/v1?hash=" + hash},
	}})
}

func handleOpenAPIV1(w http.ResponseWriter, _ *http.Request) {
	data, hash := openAPIV1()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Etag", `"`+hash+`"`)
	_, _ = w.Write(data)
}
