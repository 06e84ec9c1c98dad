package bus

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerConfig configures an embedded nats-server.
type ServerConfig struct {
	Host     string // default 127.0.0.1
	Port     int    // -1: random
	StoreDir string // JetStream storage
	Name     string
	// Cluster, when set, joins a cluster: its name, this node's route listen address and the routes.
	ClusterName   string
	ClusterListen string
	Routes        []string
	HTTPPort      int // monitoring; 0 off
	// Configure, when set, changes the options last (authorization, TLS).
	Configure func(*server.Options) error
}

// RunServer starts an embedded nats-server with JetStream and waits until it accepts clients.
func RunServer(cfg ServerConfig) (*server.Server, error) {
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       cfg.Host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		HTTPPort:   cfg.HTTPPort,
		// Large enough for bursts of pod commands from many clients.
		MaxPayload:    8 << 20,
		MaxPending:    256 << 20,
		WriteDeadline: 10 * time.Second,
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if cfg.ClusterName != "" {
		opts.Cluster.Name = cfg.ClusterName
		host, port, err := splitHostPort(cfg.ClusterListen)
		if err != nil {
			return nil, err
		}
		opts.Cluster.Host, opts.Cluster.Port = host, port
		opts.Routes = server.RoutesFromStr(joinComma(cfg.Routes))
	}
	if cfg.Configure != nil {
		if err := cfg.Configure(opts); err != nil {
			return nil, err
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats-server did not become ready")
	}
	return s, nil
}
