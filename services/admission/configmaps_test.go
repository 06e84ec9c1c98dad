package admission

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
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

// racingKV lets another writer change a key just before the first delete of it, as a controller's
// status update can.
type racingKV struct {
	jetstream.KeyValue
	raced atomic.Bool
}

func (r *racingKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if !r.raced.Swap(true) {
		e, err := r.KeyValue.Get(ctx, key)
		if err != nil {
			return err
		}
		changed := strings.Replace(string(e.Value()), `"data":{`, `"data":{"other":"writer",`, 1)
		if _, err := r.KeyValue.Update(ctx, key, []byte(changed), e.Revision()); err != nil {
			return err
		}
	}
	return r.KeyValue.Delete(ctx, key, opts...)
}

// A delete that loses its compare-and-set to another write reads the object again and deletes it, as
// kube-apiserver's storage does; only the client's own preconditions make that change a Conflict.
func TestDeleteAfterAnotherWrite(t *testing.T) {
	const base = "/api/v1/namespaces/default/configmaps"
	tests := []struct {
		name string
		body func(uid, rv string) string
		code int
	}{
		{name: "no precondition", body: func(string, string) string { return "" }, code: 200},
		{name: "the uid", body: func(uid, _ string) string { return `{"preconditions":{"uid":"` + uid + `"}}` }, code: 200},
		{name: "the resourceVersion read before", body: func(_, rv string) string { return `{"preconditions":{"resourceVersion":"` + rv + `"}}` }, code: 409},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, nil, true)
			e.svc.buckets[bus.BucketConfigMaps] = &racingKV{KeyValue: e.svc.buckets[bus.BucketConfigMaps]}
			resp, data := e.do("POST", base, `{"metadata":{"name":"c"},"data":{"k":"v"}}`)
			if resp.StatusCode != 201 {
				t.Fatalf("create: %d %s", resp.StatusCode, data)
			}
			var cm struct {
				Metadata struct{ UID, ResourceVersion string } `json:"metadata"`
			}
			if err := json.Unmarshal(data, &cm); err != nil {
				t.Fatal(err)
			}
			resp, data = e.do("DELETE", base+"/c", tt.body(cm.Metadata.UID, cm.Metadata.ResourceVersion))
			if resp.StatusCode != tt.code {
				t.Fatalf("delete: %d %.400s, want %d", resp.StatusCode, data, tt.code)
			}
			want := 404
			if tt.code != 200 {
				want = 200
			}
			if resp, data := e.do("GET", base+"/c", ""); resp.StatusCode != want {
				t.Errorf("get after the delete: %d %.300s, want %d", resp.StatusCode, data, want)
			}
		})
	}
}
