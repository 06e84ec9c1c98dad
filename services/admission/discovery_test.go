package admission

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const aggregatedAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"

func TestDiscovery(t *testing.T) {
	e := start(t, nil, true)
	tests := []struct {
		name, path, accept string
		wantType           string
		check              func(t *testing.T, data []byte)
	}{
		{name: "version", path: "/version", wantType: "application/json", check: func(t *testing.T, data []byte) {
			var v map[string]string
			_ = json.Unmarshal(data, &v)
			if v["major"] != "1" || v["minor"] != "32" || v["gitVersion"] != "v1.32.0-podbus" {
				t.Errorf("version = %v", v)
			}
		}},
		{name: "healthz", path: "/healthz", wantType: "text/plain; charset=utf-8"},
		{name: "readyz", path: "/readyz", wantType: "text/plain; charset=utf-8"},
		{name: "livez", path: "/livez", wantType: "text/plain; charset=utf-8"},
		{name: "legacy /api", path: "/api", wantType: "application/json", check: func(t *testing.T, data []byte) {
			var v metav1.APIVersions
			_ = json.Unmarshal(data, &v)
			if v.Kind != "APIVersions" || !cmp.Equal(v.Versions, []string{"v1"}) {
				t.Errorf("/api = %s", data)
			}
		}},
		{name: "legacy /apis", path: "/apis", wantType: "application/json", check: func(t *testing.T, data []byte) {
			var v metav1.APIGroupList
			_ = json.Unmarshal(data, &v)
			var got []string
			for _, g := range v.Groups {
				got = append(got, g.PreferredVersion.GroupVersion)
			}
			if v.Kind != "APIGroupList" || !cmp.Equal(got, []string{"apps/v1", "authorization.k8s.io/v1", "coordination.k8s.io/v1", "metrics.k8s.io/v1beta1", "policy/v1", "rbac.authorization.k8s.io/v1"}) {
				t.Errorf("/apis = %s", data)
			}
		}},
		{name: "aggregated /api", path: "/api", accept: aggregatedAccept, wantType: aggregatedContentType, check: func(t *testing.T, data []byte) {
			var v apidiscoveryv2.APIGroupDiscoveryList
			_ = json.Unmarshal(data, &v)
			if v.Kind != "APIGroupDiscoveryList" || len(v.Items) != 1 || len(v.Items[0].Versions) != 1 {
				t.Fatalf("aggregated /api = %s", data)
			}
			got := map[string]string{}
			for _, r := range v.Items[0].Versions[0].Resources {
				got[r.Resource] = strings.Join(r.ShortNames, ",") + "/" + string(r.Scope) + "/" + r.ResponseKind.Kind
			}
			want := map[string]string{"pods": "po/Namespaced/Pod", "nodes": "no/Cluster/Node", "events": "ev/Namespaced/Event", "namespaces": "ns/Cluster/Namespace",
				"configmaps": "cm/Namespaced/ConfigMap", "secrets": "/Namespaced/Secret"}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("resources (-want +got):\n%s", d)
			}
		}},
		{name: "aggregated /apis", path: "/apis", accept: aggregatedAccept, wantType: aggregatedContentType, check: func(t *testing.T, data []byte) {
			var v apidiscoveryv2.APIGroupDiscoveryList
			_ = json.Unmarshal(data, &v)
			got := map[string]string{}
			for _, g := range v.Items {
				for _, r := range g.Versions[0].Resources {
					got[g.Name+"/"+r.Resource] = string(r.Scope) + "/" + strings.Join(r.Verbs, ",")
				}
			}
			crud := "create,delete,get,list,patch,update,watch"
			want := map[string]string{
				"authorization.k8s.io/selfsubjectaccessreviews": "Cluster/create", "authorization.k8s.io/selfsubjectrulesreviews": "Cluster/create",
				"metrics.k8s.io/pods": "Namespaced/get,list", "metrics.k8s.io/nodes": "Cluster/get,list",
				"coordination.k8s.io/leases":      "Namespaced/get,list,watch",
				"rbac.authorization.k8s.io/roles": "Namespaced/" + crud, "rbac.authorization.k8s.io/rolebindings": "Namespaced/" + crud,
				"rbac.authorization.k8s.io/clusterroles": "Cluster/" + crud, "rbac.authorization.k8s.io/clusterrolebindings": "Cluster/" + crud,
				"apps/daemonsets": "Namespaced/" + crud, "policy/poddisruptionbudgets": "Namespaced/" + crud,
				"apps/replicasets": "Namespaced/" + crud, "apps/deployments": "Namespaced/" + crud,
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("aggregated /apis (-want +got):\n%s", d)
			}
		}},
		{name: "/api/v1", path: "/api/v1", wantType: "application/json", check: func(t *testing.T, data []byte) {
			var v metav1.APIResourceList
			_ = json.Unmarshal(data, &v)
			got := map[string]string{}
			for _, r := range v.APIResources {
				got[r.Name] = r.Kind + "/" + strings.Join(r.ShortNames, ",")
			}
			want := map[string]string{"pods": "Pod/po", "pods/status": "Pod/", "pods/log": "Pod/", "pods/eviction": "Eviction/",
				"pods/exec": "PodExecOptions/", "pods/attach": "PodAttachOptions/", "pods/portforward": "PodPortForwardOptions/",
				"nodes": "Node/no", "nodes/status": "Node/", "events": "Event/ev", "namespaces": "Namespace/ns",
				"configmaps": "ConfigMap/cm", "secrets": "Secret/"}
			for _, r := range v.APIResources {
				if r.Name == "pods/eviction" && (r.Group != "policy" || r.Version != "v1") {
					t.Errorf("pods/eviction is %s/%s, want policy/v1 (kubectl drain looks for it)", r.Group, r.Version)
				}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("resources (-want +got):\n%s", d)
			}
		}},
		{name: "openapi root", path: "/openapi/v3", wantType: "application/json", check: func(t *testing.T, data []byte) {
			var root struct {
				Paths map[string]struct {
					URL string `json:"serverRelativeURL"`
				} `json:"paths"`
			}
			_ = json.Unmarshal(data, &root)
			docs := e.svc.reg.openAPIDocs()
			if len(root.Paths) != len(docs) {
				t.Errorf("openapi root = %s", data)
			}
			for _, p := range []string{"api/v1", "apis/rbac.authorization.k8s.io/v1", "apis/authorization.k8s.io/v1"} {
				if want := "/openapi/v3/" + p + "?hash=" + docs[p].hash; root.Paths[p].URL != want {
					t.Errorf("openapi root %s = %q, want %q", p, root.Paths[p].URL, want)
				}
			}
		}},
		{name: "openapi api/v1", path: "/openapi/v3/api/v1", wantType: "application/json", check: func(t *testing.T, data []byte) {
			var doc struct {
				Paths map[string]map[string]json.RawMessage `json:"paths"`
			}
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, p := range doc.Paths {
				var op struct {
					GVK    map[string]string           `json:"x-kubernetes-group-version-kind"`
					Params []struct{ Name, In string } `json:"parameters"`
				}
				if err := json.Unmarshal(p["patch"], &op); err != nil {
					t.Fatal(err)
				}
				for _, prm := range op.Params {
					if prm.Name == "fieldValidation" && prm.In == "query" {
						kinds[op.GVK["kind"]] = op.GVK["version"] == "v1"
					}
				}
			}
			want := map[string]bool{"Pod": true, "Node": true, "Event": true, "Namespace": true, "ConfigMap": true, "Secret": true}
			if d := cmp.Diff(want, kinds); d != "" {
				t.Errorf("PATCH operations with fieldValidation (-want +got):\n%s", d)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var headers []string
			if tt.accept != "" {
				headers = append(headers, "Accept: "+tt.accept)
			}
			resp, data := e.do("GET", tt.path, "", headers...)
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s = %d %s", tt.path, resp.StatusCode, data)
			}
			if ct := resp.Header.Get("Content-Type"); ct != tt.wantType {
				t.Errorf("Content-Type = %q, want %q", ct, tt.wantType)
			}
			if tt.check != nil {
				tt.check(t, data)
			}
		})
	}
}
