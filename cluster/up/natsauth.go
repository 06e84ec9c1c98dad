package up

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/internal/pki"
)

// NATSCredsDir is where `up` keeps the NATS credentials, under its data directory.
const NATSCredsDir = "nats-creds"

// NATSRoles are the roles `up` makes credentials for: every service's, its agents' (the simulated
// nodes' host and the real node), and those asked for by AgentCreds and PoolCreds.
func NATSRoles(cfg Config) []string {
	roles := append([]string{}, natsauth.ServiceRoles...)
	roles = append(roles, simRole(cfg))
	if cfg.Runtime == RuntimeContainerd || cfg.Runtime == RuntimeAuto {
		roles = append(roles, natsauth.AgentRole(cfg.RealNode))
	}
	for _, n := range cfg.AgentCreds {
		roles = append(roles, natsauth.AgentRole(n))
	}
	for _, h := range cfg.PoolCreds {
		roles = append(roles, natsauth.PoolRole(h))
	}
	return roles
}

// natsAuth creates (first start) or reuses the credentials and the listener's certificate, records where
// they are in c, and returns what makes the embedded server require them: every client, in-process ones
// included, authenticates with a role's nkey; clients over the socket (other processes) use TLS.
func natsAuth(cfg Config, c *Cluster) (func(*server.Options) error, error) {
	dir := filepath.Join(cfg.DataDir, NATSCredsDir)
	creds, err := natsauth.LoadOrCreate(dir, NATSRoles(cfg)...)
	if err != nil {
		return nil, err
	}
	ca, err := pki.LoadOrCreate(filepath.Join(cfg.DataDir, "pki"))
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := ca.Serving()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("nats certificate: %w", err)
	}
	c.NATSCredsDir, c.NATSCA = dir, ca.CertFile()
	return func(o *server.Options) error {
		if err := natsauth.Configure(o, creds); err != nil {
			return err
		}
		// Loopback only, whatever the caller asked: other processes on this machine reach it, over TLS.
		o.Host = "127.0.0.1"
		o.TLS = true
		o.TLSTimeout = 5
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		o.AuthTimeout = (5 * time.Second).Seconds()
		return nil
	}, nil
}

// NATSCreds is the path of role's NATS credential, "" without Config.NATSAuth.
func (c *Cluster) NATSCreds(role string) string {
	if c.NATSCredsDir == "" {
		return ""
	}
	return natsauth.File(c.NATSCredsDir, role)
}

// simRole is the role of the simulated nodes' connections: their host's, or the node's own when there is
// one node (an agent host of one agent uses that node's consumer, bus.ConsumerAgent).
func simRole(cfg Config) string {
	if a := agentConfigs(cfg); len(a) == 1 {
		return natsauth.AgentRole(a[0].Node)
	}
	return natsauth.PoolRole(SimHost)
}
