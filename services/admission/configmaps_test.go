package admission

import (
	"strings"
	"testing"
)

// TestConfigMapWrites: sizes, keys and immutability through the API.
func TestConfigMapWrites(t *testing.T) {
	e := start(t, nil, true)
	const base = "/api/v1/namespaces/default/configmaps"
	big := strings.Repeat("x", 1<<20+1)
	tests := []struct {
		name, method, path, body string
		code                     int
		message                  string
	}{
		{"create", "POST", base, `{"metadata":{"name":"c"},"data":{"k":"v"},"binaryData":{"b":"AAE="}}`, 201, ""},
		{"bad key", "POST", base, `{"metadata":{"name":"d"},"data":{"a b":"v"}}`, 422, "a valid config key must consist of alphanumeric characters"},
		{"too big", "POST", base, `{"metadata":{"name":"d"},"data":{"k":"` + big + `"}}`, 422, "Too long"},
		{"duplicate key", "POST", base, `{"metadata":{"name":"d"},"data":{"b":"v"},"binaryData":{"b":"AAE="}}`, 422, "duplicate of key present in binaryData"},
		{"make immutable", "PATCH", base + "/c", `{"immutable":true}`, 200, ""},
		{"change immutable data", "PATCH", base + "/c", `{"data":{"k":"w"}}`, 422, "field is immutable when `immutable` is set"},
		{"unset immutable", "PATCH", base + "/c", `{"immutable":false}`, 422, "field is immutable when `immutable` is set"},
		{"labels still change", "PATCH", base + "/c", `{"metadata":{"labels":{"a":"b"}}}`, 200, ""},
		{"delete", "DELETE", base + "/c", "", 200, ""},
		{"gone", "GET", base + "/c", "", 404, ""},
	}
	for _, tt := range tests {
		var headers []string
		if tt.method == "PATCH" {
			headers = append(headers, "Content-Type: application/merge-patch+json")
		}
		resp, data := e.do(tt.method, tt.path, tt.body, headers...)
		if resp.StatusCode != tt.code || !strings.Contains(string(data), tt.message) {
			t.Errorf("%s: %d %.400s, want %d %q", tt.name, resp.StatusCode, data, tt.code, tt.message)
		}
	}
}
