package admission

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
)

// kubectl up to 1.28 reads the OpenAPI v2 document before create -f and apply (it builds its validator
// from it, and fails with NotFound without it); newer ones read v3 only. The v2 document is the v3 one
// rewritten: the same schemas as definitions, the same paths with v2 parameters and responses.

// The media type kube-apiserver answers with; kubectl asks with "spec.v2@v1.0", which is no valid media type.
const openAPIV2Protobuf = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

// openAPIV2 builds the v2 document once from every group version's v3 document.
func (r *registry) openAPIV2() (jsonDoc, protoDoc []byte) {
	r.openAPIV2Once.Do(func() { r.openAPIV2JSON, r.openAPIV2Proto = openAPIV2Document(r.openAPIDocs()) })
	return r.openAPIV2JSON, r.openAPIV2Proto
}

func openAPIV2Document(docs map[string]openAPIDoc) (jsonDoc, protoDoc []byte) {
	var src struct {
		Info       map[string]any
		Paths      map[string]map[string]any
		Components struct{ Schemas map[string]any }
	}
	src.Paths = map[string]map[string]any{}
	src.Components.Schemas = map[string]any{}
	for _, path := range slices.Sorted(maps.Keys(docs)) {
		var one struct {
			Info       map[string]any            `json:"info"`
			Paths      map[string]map[string]any `json:"paths"`
			Components struct {
				Schemas map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(docs[path].data, &one); err != nil {
			panic(err) // built from Go types: cannot fail
		}
		src.Info = one.Info
		maps.Copy(src.Paths, one.Paths)
		maps.Copy(src.Components.Schemas, one.Components.Schemas)
	}
	paths := map[string]any{}
	for p, item := range src.Paths {
		out := map[string]any{}
		for key, v := range item {
			switch key {
			case "parameters":
				out[key] = v2Parameters(v)
			case "get", "put", "post", "delete", "patch":
				out[key] = v2Operation(v.(map[string]any))
			default:
				out[key] = v
			}
		}
		paths[p] = out
	}
	doc := map[string]any{
		"swagger":     "2.0",
		"info":        src.Info,
		"paths":       paths,
		"definitions": v2Refs(src.Components.Schemas),
	}
	data, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	data = bytes.ReplaceAll(data, []byte(`"#/components/schemas/`), []byte(`"#/definitions/`))
	parsed, err := openapiv2.ParseDocument(data)
	if err != nil {
		panic(err)
	}
	pb, err := proto.Marshal(parsed)
	if err != nil {
		panic(err)
	}
	return data, pb
}

// v2Refs puts a field's reference, which v3 wraps in allOf to give it a description, back beside the
// description, as kube-apiserver's v2 document has it: kubectl's v2 parser sees no type in an allOf and
// would treat the field as opaque, then replace whole lists in apply's patches instead of merging them.
func v2Refs(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if all, ok := v["allOf"].([]any); ok && len(all) == 1 {
			if ref, ok := all[0].(map[string]any)["$ref"]; ok {
				delete(v, "allOf")
				v["$ref"] = ref
			}
		}
		for k, e := range v {
			v[k] = v2Refs(e)
		}
	case []any:
		for i, e := range v {
			v[i] = v2Refs(e)
		}
	}
	return v
}

// v2Parameters moves each parameter's schema up into the parameter, as v2 has it.
func v2Parameters(v any) []any {
	var out []any
	for _, p := range v.([]any) {
		p := p.(map[string]any)
		q := map[string]any{}
		for k, v := range p {
			if k == "schema" {
				for sk, sv := range v.(map[string]any) {
					q[sk] = sv
				}
				continue
			}
			q[k] = v
		}
		out = append(out, q)
	}
	return out
}

// v2Operation turns a v3 operation's request body into a body parameter and its responses' content into
// a schema.
func v2Operation(op map[string]any) map[string]any {
	out := map[string]any{}
	var params []any
	for k, v := range op {
		switch k {
		case "parameters":
			params = append(params, v2Parameters(v)...)
		case "requestBody":
			var consumes []string
			var schema any = map[string]any{"type": "object"}
			for mt, c := range v.(map[string]any)["content"].(map[string]any) {
				consumes = append(consumes, mt)
				schema = c.(map[string]any)["schema"]
			}
			out["consumes"] = consumes
			params = append(params, map[string]any{"name": "body", "in": "body", "required": true, "schema": schema})
		case "responses":
			rs := map[string]any{}
			for code, r := range v.(map[string]any) {
				r := r.(map[string]any)
				nr := map[string]any{"description": r["description"]}
				if c, ok := r["content"].(map[string]any)["application/json"].(map[string]any); ok {
					nr["schema"] = c["schema"]
				}
				rs[code] = nr
			}
			out[k] = rs
		default:
			out[k] = v
		}
	}
	if params != nil {
		out["parameters"] = params
	}
	out["produces"] = []string{"application/json"}
	return out
}

func (s *Service) handleOpenAPIV2(w http.ResponseWriter, r *http.Request) {
	jsonDoc, protoDoc := s.reg.openAPIV2()
	if strings.Contains(r.Header.Get("Accept"), "protobuf") {
		w.Header().Set("Content-Type", openAPIV2Protobuf)
		_, _ = w.Write(protoDoc)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(jsonDoc)
}
