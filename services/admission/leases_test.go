package admission

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The nodes' leases are served read-only in kube-node-lease, as kubectl lists them.
func TestLeasesServedReadOnly(t *testing.T) {
	e := start(t, nil, true)
	ctx := context.Background()
	kv, err := bus.OpenBucket(ctx, e.conn.JS, bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	renewed := time.Now().Add(-3 * time.Second).UTC().Truncate(time.Microsecond)
	if _, err := bus.Create(ctx, kv, bus.LeaseKey("n1"), &pb.NodeLease{Node: "n1", HolderIdentity: "n1",
		LeaseDurationSeconds: 40, RenewTime: timestamppb.New(renewed)}); err != nil {
		t.Fatal(err)
	}
	// No replica decodes the renewals until someone asks for leases.
	e.svc.cachesMu.Lock()
	started := e.svc.caches[bus.BucketLeases] != nil
	e.svc.cachesMu.Unlock()
	if started {
		t.Error("the leases' watch cache started with the server")
	}
	for _, kb := range KindBuckets() {
		if kb.Bucket == bus.BucketLeases {
			t.Error("the garbage collector would watch the leases")
		}
	}
	const path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
	for _, tt := range []struct {
		name, method, path, body string
		wantCode                 int
		check                    func(t *testing.T, m map[string]any)
	}{
		{name: "list", method: http.MethodGet, path: path, wantCode: http.StatusOK, check: func(t *testing.T, m map[string]any) {
			if got := get(m, "items", 0, "metadata", "name"); got != "n1" {
				t.Errorf("first item %v", got)
			}
		}},
		{name: "get", method: http.MethodGet, path: path + "/n1", wantCode: http.StatusOK, check: func(t *testing.T, m map[string]any) {
			if get(m, "kind") != "Lease" || get(m, "metadata", "namespace") != "kube-node-lease" ||
				get(m, "spec", "holderIdentity") != "n1" || get(m, "spec", "leaseDurationSeconds") != 40.0 ||
				get(m, "spec", "renewTime") != renewed.Format("2006-01-02T15:04:05.000000Z07:00") {
				t.Errorf("lease %v", m)
			}
		}},
		{name: "other namespace is empty", method: http.MethodGet, path: "/apis/coordination.k8s.io/v1/namespaces/default/leases",
			wantCode: http.StatusOK, check: func(t *testing.T, m map[string]any) {
				if items, _ := get(m, "items").([]any); len(items) != 0 {
					t.Errorf("items %v", items)
				}
			}},
		{name: "no create", method: http.MethodPost, path: path, wantCode: http.StatusMethodNotAllowed,
			body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"n2"}}`},
		{name: "no delete", method: http.MethodDelete, path: path + "/n1", wantCode: http.StatusMethodNotAllowed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do(tt.method, tt.path, tt.body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("%s %s: %d %s, want %d", tt.method, tt.path, resp.StatusCode, data, tt.wantCode)
			}
			if tt.check != nil {
				var m map[string]any
				if err := json.Unmarshal(data, &m); err != nil {
					t.Fatal(err)
				}
				tt.check(t, m)
			}
		})
	}
	if testing.Short() {
		return
	}
	k := newKubectl(t, e.base)
	mustContain(t, k.run(false, "get", "leases", "-n", "kube-node-lease"), "NAME", "HOLDER", "n1")
}
