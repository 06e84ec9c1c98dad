package admission

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

const deployBody = `{"metadata":{"name":"web"},"spec":{"selector":{"matchLabels":{"app":"web"}},` +
	`"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"app","image":"nginx"}]}}}}`

// TestAppsWrites: Deployments and ReplicaSets are defaulted and validated as kube's apps strategies,
// scaled through their scale subresource, and their status is a subresource of its own.
func TestAppsWrites(t *testing.T) {
	e := start(t, nil, true)
	const deploys = "/apis/apps/v1/namespaces/default/deployments"
	const rss = "/apis/apps/v1/namespaces/default/replicasets"
	merge := "Content-Type: application/merge-patch+json"
	tests := []struct {
		name, method, path, body string
		header                   string
		code                     int
		message                  string
	}{
		{"create", "POST", deploys, deployBody, "", 201, `"maxSurge":"25%"`},
		{"selector must select the template", "POST", deploys, strings.Replace(deployBody, `"labels":{"app":"web"}`, `"labels":{"app":"other"}`, 1), "", 422, "`selector` does not match template `labels`"},
		{"no selector", "POST", rss, `{"metadata":{"name":"r"},"spec":{"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}`, "", 422, "spec.selector: Required value"},
		{"template checked as a pod", "POST", deploys, strings.Replace(deployBody, `"name":"app"`, `"name":"APP"`, 1), "", 422, "spec.template.spec.containers[0].name"},
		{"maxUnavailable over 100%", "POST", deploys, strings.Replace(deployBody, `"spec":{"selector"`, `"spec":{"strategy":{"rollingUpdate":{"maxUnavailable":"120%"}},"selector"`, 1), "", 422, "must not be greater than 100%"},
		{"both zero", "POST", deploys, strings.Replace(deployBody, `"spec":{"selector"`, `"spec":{"strategy":{"rollingUpdate":{"maxUnavailable":0,"maxSurge":0}},"selector"`, 1), "", 422, "may not be 0 when `maxSurge` is 0"},
		{"recreate with rollingUpdate", "POST", deploys, strings.Replace(deployBody, `"spec":{"selector"`, `"spec":{"strategy":{"type":"Recreate","rollingUpdate":{}},"selector"`, 1), "", 422, "may not be specified when strategy `type` is 'Recreate'"},
		{"selector immutable", "PATCH", deploys + "/web", `{"spec":{"selector":{"matchLabels":{"app":"x"}},"template":{"metadata":{"labels":{"app":"x"}}}}}`, merge, 422, "field is immutable"},
		{"get scale", "GET", deploys + "/web/scale", "", "", 200, `"replicas":1`},
		{"scale", "PATCH", deploys + "/web/scale", `{"spec":{"replicas":5}}`, merge, 200, `"kind":"Scale"`},
		{"scaled, generation 2", "GET", deploys + "/web", "", "", 200, `"generation":2`},
		{"negative scale", "PATCH", deploys + "/web/scale", `{"spec":{"replicas":-1}}`, merge, 422, "must be greater than or equal to 0"},
		{"status", "PATCH", deploys + "/web/status", `{"status":{"readyReplicas":3}}`, merge, 200, `"readyReplicas":3`},
		{"status write keeps generation", "GET", deploys + "/web", "", "", 200, `"generation":2`},
		{"spec write keeps status", "PATCH", deploys + "/web", `{"status":{"readyReplicas":0},"metadata":{"labels":{"x":"y"}}}`, merge, 200, `"readyReplicas":3`},
		{"table", "GET", deploys, "", "Accept: application/json;as=Table;v=v1;g=meta.k8s.io", 200, `"name":"Up-to-date"`},
	}
	for _, tt := range tests {
		var headers []string
		if tt.header != "" {
			headers = append(headers, tt.header)
		}
		resp, data := e.do(tt.method, tt.path, tt.body, headers...)
		if resp.StatusCode != tt.code || !strings.Contains(string(data), tt.message) {
			t.Errorf("%s: %d %.600s, want %d %q", tt.name, resp.StatusCode, data, tt.code, tt.message)
		}
	}
	_, data := e.do("GET", deploys+"/web", "")
	var d appsv1.Deployment
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 5 || *d.Spec.RevisionHistoryLimit != 10 || *d.Spec.ProgressDeadlineSeconds != 600 ||
		d.Spec.Template.Spec.RestartPolicy != "Always" || d.Spec.Template.Spec.Containers[0].ImagePullPolicy != "Always" {
		t.Errorf("defaults: %+v", d.Spec)
	}
}
