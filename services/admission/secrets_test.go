package admission

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/secretbox"
)

// TestSecretWrites: validation by type, stringData merged into data, immutability, and the value sealed
// in its bucket with the key file's key.
func TestSecretWrites(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "encryption.key")
	e := start(t, func(c *Config) { c.EncryptionKeyFile = keyFile }, true)
	const base = "/api/v1/namespaces/default/secrets"
	tests := []struct {
		name, method, path, body string
		code                     int
		message                  string
	}{
		{"create", "POST", base, `{"metadata":{"name":"db"},"data":{"user":"YWRtaW4="},"stringData":{"password":"hunter2"}}`, 201, `"type":"Opaque"`},
		{"read", "GET", base + "/db", "", 200, `"password":"aHVudGVyMg=="`},
		{"tls needs its keys", "POST", base, `{"metadata":{"name":"t"},"type":"kubernetes.io/tls","data":{"tls.crt":"eA=="}}`, 422, "data[tls.key]: Required value"},
		{"dockerconfigjson is JSON", "POST", base, `{"metadata":{"name":"d"},"type":"kubernetes.io/dockerconfigjson","data":{".dockerconfigjson":"bm90IGpzb24="}}`, 422, "invalid JSON"},
		{"bad key", "POST", base, `{"metadata":{"name":"b"},"data":{"a b":"eA=="}}`, 422, "a valid config key"},
		{"type is immutable", "PATCH", base + "/db", `{"type":"kubernetes.io/basic-auth"}`, 422, "type: Invalid value"},
		{"make immutable", "PATCH", base + "/db", `{"immutable":true}`, 200, ""},
		{"immutable data", "PATCH", base + "/db", `{"stringData":{"password":"x"}}`, 422, "field is immutable when `immutable` is set"},
		{"table", "GET", base, "", 200, ""},
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
		if strings.Contains(string(data), "stringData") {
			t.Errorf("%s: stringData shown: %.300s", tt.name, data)
		}
	}

	kv, err := bus.OpenBucket(context.Background(), e.conn.JS, bus.BucketSecrets)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(context.Background(), bus.ObjectKey("default", "db"))
	if err != nil {
		t.Fatal(err)
	}
	stored := entry.Value()
	clear := base64.StdEncoding.EncodeToString([]byte("hunter2"))
	if !bytes.HasPrefix(stored, []byte(secretbox.Prefix+"key1:")) || bytes.Contains(stored, []byte(clear)) || bytes.Contains(stored, []byte("hunter2")) {
		t.Fatalf("stored value not sealed: %q", stored)
	}
	box, err := secretbox.Load(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSecret(box, bus.ObjectKey("default", "db"), stored)
	if err != nil || string(s.Data["password"]) != "hunter2" {
		t.Fatalf("OpenSecret = %v, %v", s, err)
	}
	other, _ := secretbox.LoadOrCreate(filepath.Join(t.TempDir(), "other"))
	if _, err := OpenSecret(other, bus.ObjectKey("default", "db"), stored); !errors.Is(err, secretbox.ErrDecrypt) {
		t.Fatalf("OpenSecret with another key: %v, want ErrDecrypt", err)
	}
}

// TestSecretsOutOfAudit: the AUDIT stream, kept forever, does not source the secrets bucket, so its
// records never hold a Secret, sealed or not.
func TestSecretsOutOfAudit(t *testing.T) {
	for _, src := range bus.AuditConfig(bus.Options{Buckets: Buckets()}).Sources {
		if src.Name == bus.KVStream(bus.BucketSecrets) {
			t.Fatalf("AUDIT sources %s", src.Name)
		}
	}
	if !slices.ContainsFunc(Buckets(), func(b bus.BucketSpec) bool { return b.Name == bus.BucketSecrets }) {
		t.Fatal("the secrets bucket is not provisioned")
	}
}

// TestViewCannotReadSecrets: kube's view leaves Secrets out; edit reads and writes them.
func TestViewCannotReadSecrets(t *testing.T) {
	can := func(rules func() []rbacv1.PolicyRule, verb string) bool {
		for _, r := range rules() {
			if slices.Contains(r.Resources, "secrets") && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	if can(viewRules, "get") || can(viewRules, "list") {
		t.Error("view reads secrets")
	}
	if !can(editRules, "get") || !can(editRules, "create") {
		t.Error("edit cannot read or write secrets")
	}
}
