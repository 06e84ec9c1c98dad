package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// Kubeconfig is the one cluster and one user of a kubeconfig file, with the data inline so that the file
// works wherever it is copied.
type Kubeconfig struct {
	Server string
	// CA is the PEM of the CA the server's certificate chains to (empty: the system's roots).
	CA []byte
	// ClientCert and ClientKey are a client certificate (PEM); Token a bearer token. Both may be empty.
	ClientCert, ClientKey []byte
	Token                 string
}

// ErrKubeconfig is returned by LoadKubeconfig for a file it cannot use.
var ErrKubeconfig = errors.New("pki: unusable kubeconfig")

// kubeconfig file, as clientcmd's v1 Config (only what podbus writes and reads).
type kubeconfigFile struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
	Users          []namedUser    `json:"users"`
}

type namedCluster struct {
	Name    string `json:"name"`
	Cluster struct {
		Server                   string `json:"server"`
		CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
		CertificateAuthority     string `json:"certificate-authority,omitempty"`
	} `json:"cluster"`
}

type namedContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster   string `json:"cluster"`
		User      string `json:"user"`
		Namespace string `json:"namespace,omitempty"`
	} `json:"context"`
}

type namedUser struct {
	Name string `json:"name"`
	User struct {
		ClientCertificateData []byte `json:"client-certificate-data,omitempty"`
		ClientKeyData         []byte `json:"client-key-data,omitempty"`
		ClientCertificate     string `json:"client-certificate,omitempty"`
		ClientKey             string `json:"client-key,omitempty"`
		Token                 string `json:"token,omitempty"`
	} `json:"user"`
}

// WriteKubeconfig writes k to path (mode 0600: it may hold a key or a token), its cluster, context and
// user all named name.
func WriteKubeconfig(path, name string, k Kubeconfig) error {
	f := kubeconfigFile{APIVersion: "v1", Kind: "Config", CurrentContext: name}
	var c namedCluster
	c.Name = name
	c.Cluster.Server = k.Server
	c.Cluster.CertificateAuthorityData = k.CA
	var x namedContext
	x.Name = name
	x.Context.Cluster, x.Context.User, x.Context.Namespace = name, name, "default"
	var u namedUser
	u.Name = name
	u.User.ClientCertificateData, u.User.ClientKeyData, u.User.Token = k.ClientCert, k.ClientKey, k.Token
	f.Clusters, f.Contexts, f.Users = []namedCluster{c}, []namedContext{x}, []namedUser{u}
	data, err := yaml.Marshal(f)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return writeFile(path, data, 0o600)
}

// LoadKubeconfig reads the current context's cluster and user of a kubeconfig file; file references
// (certificate-authority, client-certificate, client-key) are read, relative to the file's directory.
func LoadKubeconfig(path string) (Kubeconfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Kubeconfig{}, fmt.Errorf("pki: %w", err)
	}
	var f kubeconfigFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return Kubeconfig{}, fmt.Errorf("%w: %s: %w", ErrKubeconfig, path, err)
	}
	var ctx *namedContext
	for i := range f.Contexts {
		if f.Contexts[i].Name == f.CurrentContext || (f.CurrentContext == "" && len(f.Contexts) == 1) {
			ctx = &f.Contexts[i]
		}
	}
	if ctx == nil {
		return Kubeconfig{}, fmt.Errorf("%w: %s: no context %q", ErrKubeconfig, path, f.CurrentContext)
	}
	var k Kubeconfig
	found := false
	dir := filepath.Dir(path)
	read := func(p string) ([]byte, error) {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return os.ReadFile(p)
	}
	for _, c := range f.Clusters {
		if c.Name != ctx.Context.Cluster {
			continue
		}
		found = true
		k.Server, k.CA = c.Cluster.Server, c.Cluster.CertificateAuthorityData
		if len(k.CA) == 0 && c.Cluster.CertificateAuthority != "" {
			if k.CA, err = read(c.Cluster.CertificateAuthority); err != nil {
				return Kubeconfig{}, fmt.Errorf("pki: %w", err)
			}
		}
	}
	if !found {
		return Kubeconfig{}, fmt.Errorf("%w: %s: no cluster %q", ErrKubeconfig, path, ctx.Context.Cluster)
	}
	for _, u := range f.Users {
		if u.Name != ctx.Context.User {
			continue
		}
		k.ClientCert, k.ClientKey, k.Token = u.User.ClientCertificateData, u.User.ClientKeyData, u.User.Token
		if len(k.ClientCert) == 0 && u.User.ClientCertificate != "" {
			if k.ClientCert, err = read(u.User.ClientCertificate); err != nil {
				return Kubeconfig{}, fmt.Errorf("pki: %w", err)
			}
		}
		if len(k.ClientKey) == 0 && u.User.ClientKey != "" {
			if k.ClientKey, err = read(u.User.ClientKey); err != nil {
				return Kubeconfig{}, fmt.Errorf("pki: %w", err)
			}
		}
	}
	return k, nil
}

// TLSConfig trusts k's CA (the system's roots without one) and presents k's client certificate if any.
func (k Kubeconfig) TLSConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(k.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(k.CA) {
			return nil, fmt.Errorf("%w: no certificate in its CA data", ErrKubeconfig)
		}
		cfg.RootCAs = pool
	}
	if len(k.ClientCert) > 0 {
		pair, err := tls.X509KeyPair(k.ClientCert, k.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %w", ErrKubeconfig, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Transport is an http.RoundTripper that speaks to k's server as k's user: base (nil: a copy of
// http.DefaultTransport) with k's TLS configuration, and k's token on every request.
func (k Kubeconfig) Transport(base *http.Transport) (http.RoundTripper, error) {
	tc, err := k.TLSConfig()
	if err != nil {
		return nil, err
	}
	t := base
	if t == nil {
		t = http.DefaultTransport.(*http.Transport).Clone()
	}
	t.TLSClientConfig = tc
	if k.Token == "" {
		return t, nil
	}
	return bearer{token: k.Token, next: t}, nil
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
