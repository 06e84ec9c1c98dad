package admission

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The OpenAPI v3 documents (one per group version) cover the served kinds: kubectl reads them to learn
// that PATCH accepts fieldValidation (then it leaves validation to the server and sends
// fieldValidation=Strict), kubectl apply takes the patch strategies from the kind's schema, and kubectl
// explain prints it. Validation itself is done by strict decoding here.

// openAPIDoc is one group version's document and its hash.
type openAPIDoc struct {
	data []byte
	hash string
}

// openAPIPath is the document's path under /openapi/v3/: "api/v1" or "apis/<group>/<version>".
func openAPIPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// openAPIDocs builds every group version's document once.
func (r *registry) openAPIDocs() map[string]openAPIDoc {
	r.openAPIOnce.Do(func() {
		r.openAPI = map[string]openAPIDoc{}
		for _, gv := range r.groupVersions() {
			data := openAPIDocument(gv, r.in(gv))
			sum := sha512.Sum512(data)
			r.openAPI[openAPIPath(gv)] = openAPIDoc{data: data, hash: hex.EncodeToString(sum[:])}
		}
	})
	return r.openAPI
}

// operationKind is the operationId part of a group version: "CoreV1", "ExamplePodbusIoV1".
func operationKind(gv schema.GroupVersion) string {
	g := "core"
	if gv.Group != "" {
		g = gv.Group
	}
	var b strings.Builder
	for _, part := range strings.FieldsFunc(g+"."+gv.Version, func(r rune) bool { return r == '.' || r == '-' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

func openAPIDocument(gv schema.GroupVersion, kinds []*kind) []byte {
	type m = map[string]any
	gen := &schemaGen{defs: m{}}
	queryParam := func(name, desc string) m {
		return m{"name": name, "in": "query", "description": desc, "schema": m{"type": "string", "uniqueItems": true}}
	}
	pathParam := func(name string) m {
		return m{"name": name, "in": "path", "required": true, "schema": m{"type": "string", "uniqueItems": true}}
	}
	prefix := "/" + openAPIPath(gv)
	op := operationKind(gv)
	paths := m{}
	for _, k := range kinds {
		gvk := m{"group": k.group, "version": k.version, "kind": k.kind}
		t := reflect.TypeOf(k.newObject()).Elem()
		schema := gen.schemaOf(t)
		gen.defs[defName(t)].(m)["x-kubernetes-group-version-kind"] = []any{gvk}
		content := m{"application/json": m{"schema": schema}}
		params := []any{pathParam("name")}
		p := prefix + "/" + k.resource + "/{name}"
		if k.namespaced {
			params = append(params, pathParam("namespace"))
			p = prefix + "/namespaces/{namespace}/" + k.resource + "/{name}"
		}
		paths[p] = m{
			"parameters": params,
			"get": m{
				"description":                     "read the specified " + k.kind,
				"operationId":                     "read" + op + k.kind,
				"responses":                       m{"200": m{"description": "OK", "content": content}},
				"x-kubernetes-action":             "get",
				"x-kubernetes-group-version-kind": gvk,
			},
			"patch": m{
				"description": "partially update the specified " + k.kind,
				"operationId": "patch" + op + k.kind,
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
		panic(err) // built from Go types alone: cannot fail
	}
	return data
}

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

func (s *Service) handleOpenAPIRoot(w http.ResponseWriter, _ *http.Request) {
	paths := map[string]any{}
	for p, d := range s.reg.openAPIDocs() {
		paths[p] = map[string]string{"serverRelativeURL": "/openapi/v3/" + p + "?hash=" + d.hash}
	}
	writeJSON(w, http.StatusOK, map[string]any{"paths": paths})
}

// handleOpenAPI serves one group version's document, p being its path ("api/v1").
func (s *Service) handleOpenAPI(w http.ResponseWriter, r *http.Request, p string) {
	d, ok := s.reg.openAPIDocs()[p]
	if !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Etag", `"`+d.hash+`"`)
	_, _ = w.Write(d.data)
}
