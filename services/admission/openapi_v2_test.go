package admission

import (
	"encoding/json"
	"slices"
	"testing"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	kproto "k8s.io/kube-openapi/pkg/util/proto"
)

// The OpenAPI v2 document, as kubectl up to 1.28 reads it: protobuf when asked for, parsed into models
// by kube-openapi, with the kinds' GVKs, the patch merge keys and PATCH's fieldValidation parameter.
func TestOpenAPIV2(t *testing.T) {
	e := start(t, nil, true)

	resp, data := e.do("GET", "/openapi/v2", "", "Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /openapi/v2 = %d %s", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != openAPIV2Protobuf {
		t.Errorf("Content-Type = %q, want %q", ct, openAPIV2Protobuf)
	}
	doc := &openapiv2.Document{}
	if err := proto.Unmarshal(data, doc); err != nil {
		t.Fatalf("not an OpenAPI v2 protobuf: %v", err)
	}
	models, err := kproto.NewOpenAPIData(doc)
	if err != nil {
		t.Fatalf("kube-openapi rejects the document: %v", err)
	}
	for _, name := range []string{"io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.Node", "io.k8s.api.core.v1.Event", "io.k8s.api.core.v1.Namespace"} {
		m := models.LookupModel(name)
		if m == nil {
			t.Errorf("no model %s", name)
			continue
		}
		if _, ok := m.GetExtensions()["x-kubernetes-group-version-kind"]; !ok {
			t.Errorf("%s has no x-kubernetes-group-version-kind", name)
		}
	}
	// kubectl apply walks from the kind down to the lists it merges by key: every step must be a reference.
	pod, ok := models.LookupModel("io.k8s.api.core.v1.Pod").(*kproto.Kind)
	if !ok {
		t.Fatal("Pod is not a kind")
	}
	ref, ok := pod.Fields["spec"].(kproto.Reference)
	if !ok {
		t.Fatalf("Pod.spec is %T, want a reference", pod.Fields["spec"])
	}
	if spec, ok := ref.SubSchema().(*kproto.Kind); !ok {
		t.Errorf("Pod.spec refers to %T, want a kind", ref.SubSchema())
	} else if c := spec.Fields["containers"]; c == nil || c.GetExtensions()["x-kubernetes-patch-merge-key"] != "name" {
		t.Errorf("PodSpec.containers lacks its patch merge key: %v", c)
	}

	patch := doc.GetPaths().GetPath()
	i := slices.IndexFunc(patch, func(p *openapiv2.NamedPathItem) bool {
		return p.GetName() == "/api/v1/namespaces/{namespace}/pods/{name}"
	})
	if i < 0 {
		t.Fatal("no path for one pod")
	}
	var params []string
	for _, p := range patch[i].GetValue().GetPatch().GetParameters() {
		params = append(params, p.GetParameter().GetNonBodyParameter().GetQueryParameterSubSchema().GetName())
	}
	if !slices.Contains(params, "fieldValidation") {
		t.Errorf("PATCH pod query parameters = %v, want fieldValidation among them", params)
	}

	resp, data = e.do("GET", "/openapi/v2", "")
	var v struct {
		Swagger     string         `json:"swagger"`
		Definitions map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(data, &v); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("JSON form: %s %v", resp.Header.Get("Content-Type"), err)
	}
	if v.Swagger != "2.0" || v.Definitions["io.k8s.api.core.v1.Pod"] == nil {
		t.Errorf("JSON form: swagger %q, %d definitions", v.Swagger, len(v.Definitions))
	}
}
