package admission

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The web view is served under /ui/ behind RBAC: get on the non-resource URLs /ui/*, which the view
// role grants through a ClusterRoleBinding; its stream of server-sent events is a long-running request.
func TestUIBehindRBAC(t *testing.T) {
	e := start(t, nil, false)
	binding := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"viewers"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
		"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"viv"}]}`
	if resp, body := e.do("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create binding: %d %s", resp.StatusCode, body)
	}
	// The authorizer takes the binding in from its watch cache, a moment after the create's answer.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, _ := e.do("GET", "/ui/", "", hdrTestUser+": viv"); resp.StatusCode == http.StatusOK || time.Now().After(deadline) {
			break
		}
	}
	tests := []struct {
		name, path string
		headers    []string
		want       int
	}{
		{"administrator", "/ui/", nil, http.StatusOK},
		{"viewer", "/ui/", []string{hdrTestUser + ": viv"}, http.StatusOK},
		{"viewer, a pod's page", "/ui/pods/default/web", []string{hdrTestUser + ": viv"}, http.StatusOK},
		{"other user", "/ui/", []string{hdrTestUser + ": alice"}, http.StatusForbidden},
		{"redirect to the index", "/ui", nil, http.StatusMovedPermanently},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			resp, body := e.do("GET", tt.path, "", tt.headers...)
			if resp.StatusCode != tt.want {
				t.Fatalf("GET %s = %d, want %d: %.300s", tt.path, resp.StatusCode, tt.want, body)
			}
			if tt.want == http.StatusOK && !strings.Contains(resp.Header.Get("Content-Type"), "text/html") {
				t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
		})
	}

	// The stream outlives the request timeout's write deadline and sends the fragments at once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/ui/stream", nil)
	req.Header.Set(hdrTestUser, "viv")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /ui/stream = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if sc.Text() == "event: pipeline" {
			return
		}
	}
	t.Fatalf("no pipeline event: %v", sc.Err())
}
