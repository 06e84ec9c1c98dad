package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The CA is created once and kept; the serving certificate is kept while it covers the hosts asked for
// and is far from its end, and replaced otherwise.
func TestServingReuse(t *testing.T) {
	tests := []struct {
		name    string
		before  func(t *testing.T, ca *CA) // run after a first Serving("api.example")
		hosts   []string
		renewed bool
	}{
		{name: "same hosts", hosts: []string{"api.example"}, renewed: false},
		{name: "fewer hosts", hosts: nil, renewed: false},
		{name: "default host asked", hosts: []string{"127.0.0.1"}, renewed: false},
		{name: "new name", hosts: []string{"other.example"}, renewed: true},
		{name: "new IP", hosts: []string{"10.1.2.3"}, renewed: true},
		{name: "near its end", before: func(t *testing.T, ca *CA) {
			tmpl := &x509.Certificate{DNSNames: append([]string{"api.example"}, DefaultHosts...)}
			if _, _, err := ca.issue(servingName, tmpl, RenewBefore/2); err != nil {
				t.Fatal(err)
			}
		}, hosts: []string{"api.example"}, renewed: true},
		{name: "signed by another CA", before: func(t *testing.T, ca *CA) {
			other, err := LoadOrCreate(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := other.Serving("api.example"); err != nil {
				t.Fatal(err)
			}
			for _, ext := range []string{".crt", ".key"} {
				data, _ := os.ReadFile(filepath.Join(other.Dir(), servingName+ext))
				if err := os.WriteFile(filepath.Join(ca.Dir(), servingName+ext), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}, hosts: []string{"api.example"}, renewed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pki")
			ca, err := LoadOrCreate(dir)
			if err != nil {
				t.Fatal(err)
			}
			certFile, _, err := ca.Serving("api.example")
			if err != nil {
				t.Fatal(err)
			}
			if tt.before != nil {
				tt.before(t, ca)
			}
			first := readCert(t, certFile)
			ca2, err := LoadOrCreate(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ca.CertPEM(), ca2.CertPEM()) {
				t.Fatal("CA replaced on the second start")
			}
			certFile, keyFile, err := ca2.Serving(tt.hosts...)
			if err != nil {
				t.Fatal(err)
			}
			got := readCert(t, certFile)
			if renewed := got.SerialNumber.Cmp(first.SerialNumber) != 0; renewed != tt.renewed {
				t.Errorf("renewed = %v, want %v", renewed, tt.renewed)
			}
			for _, h := range append(slices.Clone(DefaultHosts), tt.hosts...) {
				if err := got.VerifyHostname(h); err != nil {
					t.Errorf("serving certificate: %v", err)
				}
			}
			if _, err := got.Verify(x509.VerifyOptions{Roots: ca2.Pool(), DNSName: "localhost"}); err != nil {
				t.Errorf("serving certificate does not chain to the CA: %v", err)
			}
			for _, f := range []string{keyFile, filepath.Join(dir, "ca.key")} {
				if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v (%v), want 0600", f, st.Mode().Perm(), err)
				}
			}
		})
	}
}

// Client certificates carry the user as Kubernetes reads it and are reused while the subject matches.
func TestClient(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, user string
		groups     []string
		reused     bool
	}{
		{"admin", "system:admin", []string{"system:masters"}, false},
		{"admin", "system:admin", []string{"system:masters"}, true},
		{"admin", "system:admin", []string{"system:masters", "extra"}, false},
		{"admin", "root", []string{"system:masters", "extra"}, false},
		{"alice", "alice", nil, false},
	}
	prev := map[string][]byte{}
	for _, tt := range tests {
		certPEM, keyPEM, err := ca.Client(tt.name, tt.user, tt.groups...)
		if err != nil {
			t.Fatal(err)
		}
		if reused := bytes.Equal(prev[tt.name], certPEM); reused != tt.reused {
			t.Errorf("%s %s %v: reused = %v, want %v", tt.name, tt.user, tt.groups, reused, tt.reused)
		}
		prev[tt.name] = certPEM
		b, _ := pem.Decode(certPEM)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if c.Subject.CommonName != tt.user || !sameSet(c.Subject.Organization, tt.groups) {
			t.Errorf("subject %v, want CN %s O %v", c.Subject, tt.user, tt.groups)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("client certificate: %v", err)
		}
		if len(keyPEM) == 0 {
			t.Error("no key")
		}
	}
	if _, _, err := ca.Client("../x", "x"); err == nil {
		t.Error("a name with a path was accepted")
	}
}

func TestKubeconfigRoundTrip(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Client("admin", "system:admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		k    Kubeconfig
	}{
		{"certificate", Kubeconfig{Server: "https://127.0.0.1:6443", CA: ca.CertPEM(), ClientCert: certPEM, ClientKey: keyPEM}},
		{"token", Kubeconfig{Server: "https://127.0.0.1:6443", CA: ca.CertPEM(), Token: "t0k"}},
		{"CA only", Kubeconfig{Server: "https://127.0.0.1:6443", CA: ca.CertPEM()}},
		{"plain", Kubeconfig{Server: "http://127.0.0.1:6443"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kubeconfig")
			if err := WriteKubeconfig(path, "podbus", tt.k); err != nil {
				t.Fatal(err)
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
				t.Errorf("mode %v", st.Mode().Perm())
			}
			got, err := LoadKubeconfig(path)
			if err != nil {
				t.Fatal(err)
			}
			if got.Server != tt.k.Server || !bytes.Equal(got.CA, tt.k.CA) || !bytes.Equal(got.ClientCert, tt.k.ClientCert) ||
				!bytes.Equal(got.ClientKey, tt.k.ClientKey) || got.Token != tt.k.Token {
				t.Errorf("read back %+v, want %+v", got, tt.k)
			}
			tc, err := got.TLSConfig()
			if err != nil {
				t.Fatal(err)
			}
			if (len(tc.Certificates) == 1) != (len(tt.k.ClientCert) > 0) {
				t.Errorf("%d client certificates", len(tc.Certificates))
			}
		})
	}
}

// The CA outlives what it signs: a certificate never ends after it.
func TestValidity(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certFile, _, err := ca.Serving()
	if err != nil {
		t.Fatal(err)
	}
	c := readCert(t, certFile)
	caCert := readCert(t, ca.CertFile())
	if c.NotAfter.After(caCert.NotAfter) || time.Until(caCert.NotAfter) < 9*365*24*time.Hour {
		t.Errorf("serving until %v, CA until %v", c.NotAfter, caCert.NotAfter)
	}
}
