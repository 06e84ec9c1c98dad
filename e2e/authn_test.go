package e2e

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/pki"
)

// `make run`'s cluster serves TLS: the real kubectl with the kubeconfig `up` writes works as the admin;
// with the CA alone, a wrong token or a client certificate of another CA it is told it must log in; and a
// kubectl that does not trust the CA refuses the server.
func TestKubectlTLSAndAuthentication(t *testing.T) {
	needKubectl(t)
	dataDir := t.TempDir()
	cl, _ := startCluster(t, up.Config{DataDir: dataDir, Nodes: 1, StartDelay: 20 * time.Millisecond})
	if !strings.HasPrefix(cl.APIURL, "https://") || cl.Kubeconfig != filepath.Join(dataDir, "kubeconfig") {
		t.Fatalf("API %s, kubeconfig %s: want https and <data>/kubeconfig", cl.APIURL, cl.Kubeconfig)
	}
	admin, err := pki.LoadKubeconfig(cl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	strangerCert, strangerKey, err := other.Client("stranger", up.AdminUser, up.AdminGroup)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := func(name string, k pki.Kubeconfig) string {
		p := filepath.Join(t.TempDir(), name)
		k.Server = cl.APIURL
		if err := pki.WriteKubeconfig(p, "podbus", k); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// kubectl never sends a request without any credential: with none in the kubeconfig it prompts for a
	// user name and a password (basic auth, which the API, as kube-apiserver since 1.19, does not take).
	// So the kubeconfig names a user, and a plain request with no credential checks the rest.
	userOnly := writeFile(t, "user-only", `apiVersion: v1
kind: Config
clusters:
- name: p
  cluster: {server: "`+cl.APIURL+`", certificate-authority-data: `+base64.StdEncoding.EncodeToString(admin.CA)+`}
contexts:
- name: p
  context: {cluster: p, user: p}
current-context: p
users:
- name: p
  user: {username: nobody}
`)
	caOnly, err := pki.Kubeconfig{CA: admin.CA}.Transport(nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: caOnly}).Get(cl.APIURL + "/api/v1/namespaces/default/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no credentials: %s, want 401", resp.Status)
	}
	tests := []struct {
		name       string
		kubeconfig string
		ok         bool
		want       string // in kubectl's output
	}{
		{name: "admin", kubeconfig: cl.Kubeconfig, ok: true, want: "No resources found"},
		{name: "CA and a user name only", kubeconfig: userOnly, want: "must be logged in"},
		{name: "bogus token", kubeconfig: kubeconfig("token", pki.Kubeconfig{CA: admin.CA, Token: "bogus"}), want: "must be logged in"},
		{name: "certificate of another CA", kubeconfig: kubeconfig("stranger", pki.Kubeconfig{CA: admin.CA, ClientCert: strangerCert, ClientKey: strangerKey}), want: "must be logged in"},
		{name: "server not trusted", kubeconfig: kubeconfig("untrusted", pki.Kubeconfig{CA: other.CertPEM(), ClientCert: admin.ClientCert, ClientKey: admin.ClientKey}), want: "certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := kube{t: t, kubeconfig: tt.kubeconfig}.run("get", "pods")
			if (err == nil) != tt.ok || !strings.Contains(out, tt.want) {
				t.Errorf("kubectl get pods: %v\n%s\nwant ok=%v and %q", err, out, tt.ok, tt.want)
			}
		})
	}
	for _, f := range []string{"ca.key", "serving.key", "admin.key"} {
		if st, err := os.Stat(filepath.Join(dataDir, "pki", f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("pki/%s: %v, want mode 0600", f, err)
		}
	}
}
