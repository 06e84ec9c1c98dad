package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/internal/pki"
)

// tokenFile writes a static token file of the given CSV lines.
func tokenFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// clientAs speaks to e's API over TLS presenting cert.
func (e *env) clientAs(cert tls.Certificate) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: e.ca.Pool(), Certificates: []tls.Certificate{cert}}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// Over TLS, a request needs a client certificate of the client CA or a token of the token file; the
// public paths need neither.
func TestAuthenticationHTTP(t *testing.T) {
	e := start(t, func(c *Config) {
		c.InsecureHTTP = false
		c.TokenAuthFile = tokenFile(t, `t0k,alice,1,"dev,ops"`)
	}, true)
	admin, err := e.ca.IssueClient("system:admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.IssueClient("system:admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	const pods = "/api/v1/namespaces/default/pods"
	tests := []struct {
		name  string
		cert  *tls.Certificate
		token string
		path  string
		code  int
	}{
		{name: "admin certificate", cert: &admin, path: pods, code: 200},
		{name: "certificate of another CA", cert: &stranger, path: pods, code: 401},
		{name: "token", token: "t0k", path: pods, code: 200},
		{name: "bogus token", token: "nope", path: pods, code: 401},
		{name: "certificate of another CA and a token", cert: &stranger, token: "t0k", path: pods, code: 200},
		{name: "no credentials", path: pods, code: 401},
		{name: "no credentials, discovery", path: "/api", code: 401},
		{name: "version", path: "/version", code: 200},
		{name: "healthz", path: "/healthz", code: 200},
		{name: "readyz", path: "/readyz", code: 200},
		{name: "livez", path: "/livez", code: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := e.client
			if tt.cert != nil {
				client = e.clientAs(*tt.cert)
			}
			req, _ := http.NewRequest("GET", e.base+tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var st metav1.Status
			if tt.code == 401 {
				st = decodeBody(t, resp)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d, want %d", resp.StatusCode, tt.code)
			}
			if tt.code == 401 && (st.Kind != "Status" || st.Reason != metav1.StatusReasonUnauthorized || st.Code != 401) {
				t.Errorf("401 body %+v, want kube's Unauthorized Status", st)
			}
		})
	}
	plain, err := http.Get("http://" + e.svc.Addr() + "/version")
	if err == nil {
		if plain.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP on the TLS port: %d, want 400", plain.StatusCode)
		}
		plain.Body.Close()
	}
}

func decodeBody(t *testing.T, resp *http.Response) metav1.Status {
	t.Helper()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return decodeStatus(t, data)
}

// testPKI is a CA with a serving certificate (its files), and another CA whose certificates the first
// does not trust.
func testPKI(t *testing.T) (ca, other *pki.CA, certFile, keyFile string) {
	t.Helper()
	var err error
	if ca, err = pki.LoadOrCreate(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if other, err = pki.LoadOrCreate(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if certFile, keyFile, err = ca.Serving(); err != nil {
		t.Fatal(err)
	}
	return ca, other, certFile, keyFile
}

// The user and groups each credential stands for, as Kubernetes reads them.
func TestAuthenticateUser(t *testing.T) {
	ca, other, certFile, keyFile := testPKI(t)
	secure, err := newAuthn(Config{TLSCertFile: certFile, TLSKeyFile: keyFile, ClientCAFile: ca.CertFile(),
		TokenAuthFile: tokenFile(t, `t0k,alice,1,"dev,ops"`, "t1k,bob,2", "t2k,carol,3,system:authenticated")})
	if err != nil {
		t.Fatal(err)
	}
	insecure, err := newAuthn(Config{InsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *pki.CA, user string, groups ...string) *tls.Certificate {
		c, err := ca.IssueClient(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	tests := []struct {
		name  string
		a     *authn
		cert  *tls.Certificate
		token string
		want  *userInfo
	}{
		{name: "admin certificate", a: secure, cert: issue(ca, "system:admin", "system:masters"),
			want: &userInfo{Name: "system:admin", Groups: []string{"system:masters", "system:authenticated"}}},
		{name: "certificate without groups", a: secure, cert: issue(ca, "dave"),
			want: &userInfo{Name: "dave", Groups: []string{"system:authenticated"}}},
		{name: "certificate of another CA", a: secure, cert: issue(other, "system:admin", "system:masters")},
		{name: "certificate wins over token", a: secure, cert: issue(ca, "dave"), token: "t0k",
			want: &userInfo{Name: "dave", Groups: []string{"system:authenticated"}}},
		{name: "token with groups", a: secure, token: "t0k",
			want: &userInfo{Name: "alice", Groups: []string{"dev", "ops", "system:authenticated"}}},
		{name: "token without groups", a: secure, token: "t1k",
			want: &userInfo{Name: "bob", Groups: []string{"system:authenticated"}}},
		{name: "token already authenticated", a: secure, token: "t2k",
			want: &userInfo{Name: "carol", Groups: []string{"system:authenticated"}}},
		{name: "bogus token", a: secure, token: "nope"},
		{name: "nothing", a: secure},
		{name: "insecure", a: insecure,
			want: &userInfo{Name: "system:unsecured", Groups: []string{"system:masters", "system:authenticated"}}},
		{name: "insecure ignores a token", a: insecure, token: "nope",
			want: &userInfo{Name: "system:unsecured", Groups: []string{"system:masters", "system:authenticated"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "https://x/api", nil)
			if tt.cert != nil {
				r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{tt.cert.Leaf}}
			}
			if tt.token != "" {
				r.Header.Set("Authorization", "Bearer "+tt.token)
			}
			if d := cmp.Diff(tt.want, tt.a.authenticate(r)); d != "" {
				t.Errorf("user (-want +got):\n%s", d)
			}
		})
	}
}

// Plain HTTP is explicit and never comes with credentials; TLS needs a certificate.
func TestAuthnConfig(t *testing.T) {
	ca, _, certFile, keyFile := testPKI(t)
	tokens := tokenFile(t, "t0k,alice,1")
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"insecure", Config{InsecureHTTP: true}, true},
		{"insecure with a token file", Config{InsecureHTTP: true, TokenAuthFile: tokens}, false},
		{"insecure with a client CA", Config{InsecureHTTP: true, ClientCAFile: ca.CertFile()}, false},
		{"insecure with a serving certificate", Config{InsecureHTTP: true, TLSCertFile: certFile, TLSKeyFile: keyFile}, false},
		{"nothing", Config{}, false},
		{"TLS", Config{TLSCertFile: certFile, TLSKeyFile: keyFile}, true},
		{"TLS with both", Config{TLSCertFile: certFile, TLSKeyFile: keyFile, ClientCAFile: ca.CertFile(), TokenAuthFile: tokens}, true},
		{"key missing", Config{TLSCertFile: certFile}, false},
		{"client CA not PEM", Config{TLSCertFile: certFile, TLSKeyFile: keyFile, ClientCAFile: tokens}, false},
		{"bad token file", Config{TLSCertFile: certFile, TLSKeyFile: keyFile, TokenAuthFile: tokenFile(t, "t0k,alice")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newAuthn(tt.cfg)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Errorf("newAuthn: %v, want ok=%v or ErrConfig", err, tt.ok)
			}
		})
	}
}

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name, csv string
		want      map[string]userInfo
		err       bool
	}{
		{name: "kube's format", csv: "t0k,alice,1,\"dev,ops\"\nt1k,bob,2\n",
			want: map[string]userInfo{"t0k": {Name: "alice", Groups: []string{"dev", "ops"}}, "t1k": {Name: "bob"}}},
		{name: "one group, spaces", csv: "t0k, alice, 1, dev\n", want: map[string]userInfo{"t0k": {Name: "alice", Groups: []string{"dev"}}}},
		{name: "empty", csv: "", want: map[string]userInfo{}},
		{name: "two columns", csv: "t0k,alice\n", err: true},
		{name: "empty token", csv: ",alice,1\n", err: true},
		{name: "bad quoting", csv: "t0k,\"alice,1\n", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTokens(strings.NewReader(tt.csv), "tokens.csv")
			if tt.err {
				if !errors.Is(err, ErrTokenFile) {
					t.Errorf("err %v, want ErrTokenFile", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("tokens (-want +got):\n%s", d)
			}
		})
	}
}

// A connection's certificate is verified on its first request and its user reused on the next ones,
// until a certificate of the chain expires; a certificate not chaining to the client CA is never cached.
func TestConnAuthCache(t *testing.T) {
	ca, other, certFile, keyFile := testPKI(t)
	a, err := newAuthn(Config{TLSCertFile: certFile, TLSKeyFile: keyFile, ClientCAFile: ca.CertFile()})
	if err != nil {
		t.Fatal(err)
	}
	dave, err := ca.IssueClient("dave")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.IssueClient("system:admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	daveUser := &userInfo{Name: "dave", Groups: []string{"system:authenticated"}}
	cached := &userInfo{Name: "cached", Groups: []string{"system:authenticated"}}
	tests := []struct {
		name   string
		cert   tls.Certificate
		cached *userInfo // the connection's user before the request
		until  time.Time // and until when it holds
		want   *userInfo
	}{
		{name: "first request verifies", cert: dave, want: daveUser},
		{name: "later request reuses", cert: dave, cached: cached, until: time.Now().Add(time.Hour), want: cached},
		{name: "expired chain verifies again", cert: dave, cached: cached, until: time.Now().Add(-time.Second), want: daveUser},
		{name: "certificate of another CA", cert: stranger},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := &connAuth{user: tt.cached, notAfter: tt.until}
			r, _ := http.NewRequest("GET", "https://x/api", nil)
			r = r.WithContext(context.WithValue(r.Context(), connAuthKey{}, state))
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{tt.cert.Leaf}}
			if d := cmp.Diff(tt.want, a.authenticate(r)); d != "" {
				t.Errorf("user (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.want, state.user); d != "" {
				t.Errorf("cached user (-want +got):\n%s", d)
			}
		})
	}
}

// /readyz passes (without credentials) once connected and every watch cache has read its bucket, and
// fails, naming NATS, when the connection is gone; /livez still answers.
func TestReadyzFollowsNATS(t *testing.T) {
	e := start(t, nil, false)
	get := func(path string) (int, string) {
		resp, err := http.Get(e.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get("/readyz?verbose")
		if code == 200 && strings.Contains(body, "[+]nats ok") && strings.Contains(body, "[+]watch-cache-") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.conn.NC.Close()
	if code, body := get("/readyz"); code != 500 || !strings.Contains(body, "[-]nats failed") {
		t.Errorf("/readyz without NATS: %d %q, want 500 naming nats", code, body)
	}
	if code, _ := get("/livez"); code != 200 {
		t.Errorf("/livez: %d", code)
	}
}
