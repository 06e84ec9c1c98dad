// Package pki keeps the API's certificates in a directory, as kube-apiserver's --cert-dir and k3s do: a
// CA created on first start and never replaced, a serving certificate it signs (renewed when it no
// longer covers the hosts asked for or nears its end), and client certificates whose subject carries the
// user as Kubernetes reads it (CN the user name, O the groups).
//
// Files in the directory: ca.crt, ca.key, serving.crt, serving.key and <name>.crt, <name>.key per client.
// Keys are written 0600.
package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Lifetimes of what the CA signs, and how early before its end a certificate is replaced.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	CertValidity   = 365 * 24 * time.Hour
	RenewBefore    = 30 * 24 * time.Hour
	caCommonName   = "podbus-ca"
	servingName    = "serving"
	caName         = "ca"
	servingSubject = "podbus-apiserver"
)

// DefaultHosts are always in the serving certificate.
var DefaultHosts = []string{"localhost", "127.0.0.1", "::1"}

// ErrNoCA is returned by Open when the directory holds no CA.
var ErrNoCA = errors.New("pki: no CA")

// CA is the certificate authority of one directory.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// LoadOrCreate opens the CA of dir, creating dir and the CA when there is none. An existing CA is never
// replaced: every certificate and kubeconfig handed out trusts it.
func LoadOrCreate(dir string) (*CA, error) {
	ca, err := Open(dir)
	if !errors.Is(err, ErrNoCA) {
		return ca, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA: %w", err)
	}
	if err := writePair(dir, caName, der, key); err != nil {
		return nil, err
	}
	return Open(dir)
}

// Open reads the CA of dir (ErrNoCA when ca.crt is missing).
func Open(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caName+".crt"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s", ErrNoCA, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	cert, key, err := readPair(dir, caName)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA", filepath.Join(dir, caName+".crt"))
	}
	return &CA{dir: dir, cert: cert, key: key, pem: certPEM}, nil
}

// Dir is the CA's directory.
func (ca *CA) Dir() string { return ca.dir }

// CertFile is the path of the CA certificate (PEM): kube-apiserver's --client-ca-file and a client's
// certificate-authority.
func (ca *CA) CertFile() string { return filepath.Join(ca.dir, caName+".crt") }

// CertPEM is the CA certificate.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.pem) }

// Pool is a cert pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Serving returns the paths of a serving certificate and key valid for DefaultHosts and hosts (names or
// IP addresses), reusing the one in the directory while it covers them all and is not near its end.
func (ca *CA) Serving(hosts ...string) (certFile, keyFile string, err error) {
	want := slices.Clone(DefaultHosts)
	for _, h := range hosts {
		if h != "" && !slices.Contains(want, h) {
			want = append(want, h)
		}
	}
	certFile, keyFile = ca.paths(servingName)
	if cert, _, err := readPair(ca.dir, servingName); err == nil && ca.fresh(cert) && covers(cert, want) {
		return certFile, keyFile, nil
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: servingSubject},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range want {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if _, _, err := ca.issue(servingName, tmpl, CertValidity); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// Peer returns the paths of a certificate and key kept as name.crt and name.key, valid for DefaultHosts
// and hosts both as a server and as a client: a NATS server's, which also authenticates its routes to
// the other cluster members. Reused while it covers hosts and is not near its end.
func (ca *CA) Peer(name string, hosts ...string) (certFile, keyFile string, err error) {
	if name == "" || name == caName || name == servingName || filepath.Base(name) != name {
		return "", "", fmt.Errorf("pki: bad certificate name %q", name)
	}
	want := slices.Clone(DefaultHosts)
	for _, h := range hosts {
		if h != "" && !slices.Contains(want, h) {
			want = append(want, h)
		}
	}
	certFile, keyFile = ca.paths(name)
	if cert, _, err := readPair(ca.dir, name); err == nil && ca.fresh(cert) && covers(cert, want) {
		return certFile, keyFile, nil
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range want {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if _, _, err := ca.issue(name, tmpl, CertValidity); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// Client returns a client certificate and key (PEM) for user in groups, kept in the directory as
// name.crt and name.key and reused while its subject matches and it is not near its end.
func (ca *CA) Client(name, user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	if name == "" || name == caName || name == servingName || filepath.Base(name) != name {
		return nil, nil, fmt.Errorf("pki: bad client certificate name %q", name)
	}
	if cert, _, err := readPair(ca.dir, name); err == nil && ca.fresh(cert) &&
		cert.Subject.CommonName == user && sameSet(cert.Subject.Organization, groups) {
		certFile, keyFile := ca.paths(name)
		if certPEM, err = os.ReadFile(certFile); err != nil {
			return nil, nil, fmt.Errorf("pki: %w", err)
		}
		if keyPEM, err = os.ReadFile(keyFile); err != nil {
			return nil, nil, fmt.Errorf("pki: %w", err)
		}
		return certPEM, keyPEM, nil
	}
	return ca.issue(name, clientTemplate(user, groups), CertValidity)
}

// IssueClient signs a client certificate for user in groups without keeping it (tests, one-off users).
func (ca *CA) IssueClient(user string, groups ...string) (tls.Certificate, error) {
	certPEM, keyPEM, err := ca.sign(clientTemplate(user, groups), CertValidity)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

func clientTemplate(user string, groups []string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// fresh says cert was signed by this CA and does not end within RenewBefore.
func (ca *CA) fresh(cert *x509.Certificate) bool {
	return cert.CheckSignatureFrom(ca.cert) == nil && time.Until(cert.NotAfter) > RenewBefore
}

// sameSet compares groups regardless of order: a subject's O values are encoded as a sorted set.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func covers(cert *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// issue signs tmpl with a new key and writes both as name.crt and name.key.
func (ca *CA) issue(name string, tmpl *x509.Certificate, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = ca.sign(tmpl, validity)
	if err != nil {
		return nil, nil, err
	}
	certFile, keyFile := ca.paths(name)
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, nil, err
	}
	if err := writeFile(certFile, certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

func (ca *CA) sign(tmpl *x509.Certificate, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func (ca *CA) paths(name string) (certFile, keyFile string) {
	return filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := writeFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func readPair(dir, name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", name, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("pki: %s: not an ECDSA key", name)
	}
	return pair.Leaf, key, nil
}

// writeFile replaces path atomically, so that a reader never sees half a key.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}
