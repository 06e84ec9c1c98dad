package admission

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/bus/bustest"
)

// /metrics is a non-resource URL behind RBAC, as kube-apiserver's: administrators and the
// system:monitoring group may get it, other users are forbidden. The API's requests are counted with
// kube-apiserver's names, and a resource the API does not serve does not become a label value.
func TestMetricsEndpoint(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("metered")
	e.do("GET", "/api/v1/namespaces/default/no-such-things", "")

	tests := []struct {
		name    string
		headers []string
		want    int
	}{
		{"administrator", nil, http.StatusOK},
		{"monitoring group", []string{hdrTestUser + ": prom", hdrTestGroups + ": system:monitoring"}, http.StatusOK},
		{"other user", []string{hdrTestUser + ": alice"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do("GET", "/metrics", "", tt.headers...)
			if resp.StatusCode != tt.want {
				t.Fatalf("GET /metrics = %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want != http.StatusOK {
				return
			}
			text := string(body)
			for _, want := range []string{
				`apiserver_request_total{code="201",group="",resource="pods",subresource="",verb="POST"}`,
				`apiserver_request_duration_seconds_bucket{group="",resource="pods",subresource="",verb="POST",le="+Inf"}`,
				`podbus_pod_stage_duration_seconds_count{stage="admission"}`,
				`group="other",resource="other"`,
				"go_goroutines ",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			if strings.Contains(text, "no-such-things") {
				t.Error("an unserved resource became a label value")
			}
		})
	}
}

// An open watch is a long-running request until it ends, then a WATCH in apiserver_request_total.
func TestMetricsCountWatches(t *testing.T) {
	e := start(t, nil, false)
	const open = `apiserver_longrunning_requests{group="",resource="configmaps",verb="WATCH"} `
	scrape := func() string {
		_, body := e.do("GET", "/metrics", "")
		return string(body)
	}
	_, stop := e.watchStream("/api/v1/namespaces/default/configmaps?watch=1")
	bustest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(scrape(), open+"1") }, "the watch counted as open")
	stop()
	bustest.Eventually(t, 10*time.Second, func() bool {
		m := scrape()
		return strings.Contains(m, open+"0") && strings.Contains(m, `apiserver_request_total{code="200",group="",resource="configmaps",subresource="",verb="WATCH"}`)
	}, "the watch counted as ended")
}
