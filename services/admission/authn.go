package admission

// Authentication, as kube-apiserver's: a client certificate verified against the client CA (CN the
// user, O its groups), else a bearer token from the static token file; every authenticated user is also
// in system:authenticated. A request with no credentials, or with wrong ones, is 401 (there is no
// anonymous access) except on the public paths (Handler). Plain HTTP is only the explicit insecure
// mode, in which every request is system:unsecured in system:masters, as kube's old insecure port was.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Users and groups of authentication.
const (
	unsecuredUser      = "system:unsecured"
	groupMasters       = "system:masters"
	groupAuthenticated = "system:authenticated"
)

// authn holds what the credentials of a request are checked against.
type authn struct {
	insecure  bool
	clientCAs *x509.CertPool      // nil: no x509 authentication
	tokens    map[string]userInfo // by token
	serving   *tls.Certificate    // nil when insecure
	unsecured userInfo            // the user of every request in insecure mode
}

// newAuthn loads the serving certificate, the client CA and the token file of cfg.
func newAuthn(cfg Config) (*authn, error) {
	a := &authn{insecure: cfg.InsecureHTTP}
	if cfg.InsecureHTTP {
		if cfg.ClientCAFile != "" || cfg.TokenAuthFile != "" || cfg.TLSCertFile != "" {
			return nil, fmt.Errorf("%w: plain HTTP (InsecureHTTP) never serves credentials: no client CA, token file or serving certificate with it", ErrConfig)
		}
		a.unsecured = userInfo{Name: unsecuredUser, Groups: []string{groupMasters, groupAuthenticated}}
		return a, nil
	}
	if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
		return nil, fmt.Errorf("%w: a serving certificate and key (TLSCertFile, TLSKeyFile) are required unless InsecureHTTP", ErrConfig)
	}
	pair, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: serving certificate: %w", ErrConfig, err)
	}
	a.serving = &pair
	if cfg.ClientCAFile != "" {
		data, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client CA: %w", ErrConfig, err)
		}
		a.clientCAs = x509.NewCertPool()
		if !a.clientCAs.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("%w: client CA %s: no PEM certificate", ErrConfig, cfg.ClientCAFile)
		}
	}
	if cfg.TokenAuthFile != "" {
		if a.tokens, err = readTokenFile(cfg.TokenAuthFile); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return a, nil
}

// tlsConfig serves the certificate and asks for a client certificate without requiring one: a
// certificate from an unknown CA is 401 (authenticate), not a failed handshake, as kube-apiserver's.
// HTTP/1.1 only, as over plain HTTP: the per-request deadlines and limits (limits.go) are made for it.
func (a *authn) tlsConfig() *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*a.serving},
		NextProtos:   []string{"http/1.1"},
	}
	if a.clientCAs != nil {
		c.ClientAuth = tls.RequestClientCert
		c.ClientCAs = a.clientCAs
	}
	return c
}

// authenticate returns the requester, nil for no or wrong credentials.
func (a *authn) authenticate(r *http.Request) *userInfo {
	if a.insecure {
		u := a.unsecured
		u.Groups = slices.Clone(u.Groups)
		return &u
	}
	if u := a.x509User(r); u != nil {
		return u
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || a.tokens == nil {
		return nil
	}
	u, ok := a.tokens[strings.TrimSpace(tok)]
	if !ok {
		return nil
	}
	return withAuthenticated(u.Name, u.Groups)
}

// connAuthKey keys the connection's verified certificate user in a request's context (withConnAuth).
type connAuthKey struct{}

// connAuth is the client certificate user of one TLS connection, verified on its first request: a
// connection's peer certificates never change (the server refuses renegotiation), so verifying the chain
// again on every request of a keep-alive connection would only repeat the same answer.
type connAuth struct {
	mu       sync.Mutex
	user     *userInfo // nil until a request verified the chain
	notAfter time.Time // the chain is verified again once any of its certificates has expired
}

// withConnAuth is the server's ConnContext: it gives each connection an empty connAuth.
func withConnAuth(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connAuthKey{}, &connAuth{})
}

// x509User is the user of the request's client certificate when it chains to the client CA.
func (a *authn) x509User(r *http.Request) *userInfo {
	if a.clientCAs == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil
	}
	ca, _ := r.Context().Value(connAuthKey{}).(*connAuth)
	if ca == nil {
		u, _ := a.verify(r.TLS.PeerCertificates)
		return u
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if ca.user != nil && time.Now().Before(ca.notAfter) {
		return withAuthenticated(ca.user.Name, ca.user.Groups)
	}
	u, notAfter := a.verify(r.TLS.PeerCertificates)
	ca.user, ca.notAfter = u, notAfter
	return u
}

// verify checks the chain against the client CA and returns its user and the earliest expiry of the
// verified chain; nil when it does not verify.
func (a *authn) verify(certs []*x509.Certificate) (*userInfo, time.Time) {
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: a.clientCAs, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil || leaf.Subject.CommonName == "" {
		return nil, time.Time{}
	}
	notAfter := leaf.NotAfter
	for _, chain := range chains {
		for _, c := range chain {
			if c.NotAfter.Before(notAfter) {
				notAfter = c.NotAfter
			}
		}
	}
	return withAuthenticated(leaf.Subject.CommonName, leaf.Subject.Organization), notAfter
}

func withAuthenticated(name string, groups []string) *userInfo {
	g := slices.Clone(groups)
	if !slices.Contains(g, groupAuthenticated) {
		g = append(g, groupAuthenticated)
	}
	return &userInfo{Name: name, Groups: g}
}

// ErrTokenFile is returned for a token file that is not kube's static token CSV.
var ErrTokenFile = errors.New("bad token file")

// readTokenFile reads kube-apiserver's --token-auth-file: one CSV record per token,
// token,user,uid[,"group1,group2"].
func readTokenFile(path string) (map[string]userInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	return parseTokens(f, path)
}

func parseTokens(r io.Reader, path string) (map[string]userInfo, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	tokens := map[string]userInfo{}
	for n := 1; ; n++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return tokens, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrTokenFile, path, err)
		}
		if len(rec) < 3 {
			return nil, fmt.Errorf("%w %s: record %d: want token,user,uid[,groups], found %d columns", ErrTokenFile, path, n, len(rec))
		}
		if rec[0] == "" || rec[1] == "" {
			return nil, fmt.Errorf("%w %s: record %d: empty token or user", ErrTokenFile, path, n)
		}
		u := userInfo{Name: rec[1]}
		if len(rec) >= 4 && rec[3] != "" {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					u.Groups = append(u.Groups, g)
				}
			}
		}
		tokens[rec[0]] = u
	}
}
