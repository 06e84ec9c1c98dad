package natsauth

import (
	"crypto/tls"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerSecurity is what makes a standalone NATS server (`podbus nats`) a security boundary: the
// authorization file Init writes, and TLS on client connections and on routes, where each cluster
// member must present a certificate of CA.
type ServerSecurity struct {
	Auth          string // nats-auth.conf (ConfigText)
	Cert, Key, CA string
}

// Configure applies s to opts; it changes nothing when s is empty.
func (s ServerSecurity) Configure(opts *server.Options) error {
	if s.Auth != "" {
		fo, err := server.ProcessConfigFile(s.Auth)
		if err != nil {
			return fmt.Errorf("natsauth: %s: %w", s.Auth, err)
		}
		if len(fo.Nkeys) == 0 {
			return fmt.Errorf("natsauth: %s: no users", s.Auth)
		}
		opts.Nkeys = fo.Nkeys
		// Monitoring is read without credentials: only from inside the server's own host.
		opts.HTTPHost = "127.0.0.1"
	}
	if s.Cert == "" && s.Key == "" {
		return nil
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: s.Cert, KeyFile: s.Key})
	if err != nil {
		return fmt.Errorf("natsauth: client TLS: %w", err)
	}
	opts.TLSConfig, opts.TLS, opts.TLSTimeout = tc, true, 5
	if opts.Cluster.Name != "" {
		if s.CA == "" {
			return fmt.Errorf("natsauth: TLS on routes needs the CA of the members' certificates")
		}
		rc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: s.Cert, KeyFile: s.Key, CaFile: s.CA, Verify: true})
		if err != nil {
			return fmt.Errorf("natsauth: route TLS: %w", err)
		}
		// A member is both server and client of its routes, as nats-server's own cluster tls block makes it.
		rc.ClientAuth, rc.RootCAs = tls.RequireAndVerifyClientCert, rc.ClientCAs
		opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = rc, 5
	}
	return nil
}
