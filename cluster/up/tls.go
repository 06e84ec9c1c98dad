package up

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/podbus/podbus/internal/pki"
	"github.com/podbus/podbus/services/admission"
)

// The admin credential `up` writes into its kubeconfig, as k3s's: in system:masters, which RBAC binds to
// cluster-admin.
const (
	AdminUser  = "system:admin"
	AdminGroup = "system:masters"
	adminCert  = "admin" // admin.crt and admin.key in the PKI directory
)

// apiPKI creates (first start) or reuses the CA and serving certificate in DataDir/pki, points the API
// at them, and returns the admin's client certificate.
func apiPKI(cfg Config, api *admission.Config) (ca *pki.CA, certPEM, keyPEM []byte, err error) {
	ca, err = pki.LoadOrCreate(filepath.Join(cfg.DataDir, "pki"))
	if err != nil {
		return nil, nil, nil, err
	}
	hosts := cfg.APIHosts
	if h, _, err := net.SplitHostPort(cfg.APIAddr); err == nil && h != "" && !net.ParseIP(h).IsUnspecified() {
		hosts = append(hosts, h)
	}
	if name, err := os.Hostname(); err == nil {
		hosts = append(hosts, name)
	}
	if api.TLSCertFile, api.TLSKeyFile, err = ca.Serving(hosts...); err != nil {
		return nil, nil, nil, err
	}
	api.ClientCAFile = ca.CertFile()
	certPEM, keyPEM, err = ca.Client(adminCert, AdminUser, AdminGroup)
	if err != nil {
		return nil, nil, nil, err
	}
	return ca, certPEM, keyPEM, nil
}

// Dialable turns a listen address into one to connect to: a wildcard host becomes loopback.
func Dialable(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", p)
	}
	return addr
}

// HTTPClient speaks to the API as the admin (its kubeconfig's credential); a plain client when the API
// runs without TLS.
func (c *Cluster) HTTPClient() *http.Client {
	if c.AdminTLS == nil {
		return &http.Client{}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = c.AdminTLS.Clone()
	return &http.Client{Transport: t}
}

func adminTLS(k pki.Kubeconfig) (*tls.Config, error) {
	tc, err := k.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("admin credential: %w", err)
	}
	return tc, nil
}
