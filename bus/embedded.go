package bus

import (
	"context"
	"fmt"
	"log/slog"
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
	// ClusterAdvertise is the route address this node tells the others (default: ClusterListen).
	ClusterAdvertise string
	// RoutePingInterval is how often a member pings each route (0: DefaultRoutePingInterval).
	RoutePingInterval time.Duration
	HTTPPort          int    // monitoring; 0 off
	HTTPHost          string // monitoring host (default Host)
	// Logger receives the server's log (nil: the server logs nothing). Its debug level turns on the
	// server's debug log; the protocol trace stays off.
	Logger *slog.Logger
	// Configure, when set, changes the options last (authorization, TLS).
	Configure func(*server.Options) error
}

// DefaultRoutePingInterval is how often a cluster member pings each of its routes. A member drops a
// route after two pings go unanswered, and only then stops listing that peer to its clients, which is
// what moves them off a member cut off by a silent partition (isolation.go). nats-server's own
// interval for routes is 30 s, so such a cut would go unseen for a minute or more.
const DefaultRoutePingInterval = 5 * time.Second

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
		HTTPHost:   cfg.HTTPHost,
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
		opts.Cluster.Advertise = cfg.ClusterAdvertise
		opts.Cluster.PingInterval = cfg.RoutePingInterval
		if opts.Cluster.PingInterval <= 0 {
			opts.Cluster.PingInterval = DefaultRoutePingInterval
		}
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
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// The server reports what stops its start (a port in use) only as a fatal log line, and then
	// never becomes ready: the adapter hands that line over so that RunServer fails at once with it.
	fatal := make(chan string, 1)
	s.SetLoggerV2(slogAdapter{l: logger, fatal: fatal}, logger.Enabled(context.Background(), slog.LevelDebug), false, false)
	go s.Start()
	deadline := time.Now().Add(30 * time.Second)
	for !s.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			s.Shutdown()
			return nil, fmt.Errorf("nats-server: %s", msg)
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("nats-server did not become ready")
		}
	}
	return s, nil
}

// slogAdapter is a nats-server logger writing to slog, each line tagged component=nats-server. A
// fatal error is logged as an error, and handed to fatal when nothing waits there yet: an embedded
// server never exits the process.
type slogAdapter struct {
	l     *slog.Logger
	fatal chan<- string
}

func (a slogAdapter) Noticef(format string, v ...any) { a.log(slog.LevelInfo, format, v) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.log(slog.LevelWarn, format, v) }
func (a slogAdapter) Fatalf(format string, v ...any) {
	a.log(slog.LevelError, format, v)
	select {
	case a.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}
func (a slogAdapter) Errorf(format string, v ...any) { a.log(slog.LevelError, format, v) }
func (a slogAdapter) Debugf(format string, v ...any) { a.log(slog.LevelDebug, format, v) }
func (a slogAdapter) Tracef(format string, v ...any) { a.log(slog.LevelDebug-4, format, v) }

func (a slogAdapter) log(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if !a.l.Enabled(ctx, level) {
		return
	}
	a.l.Log(ctx, level, fmt.Sprintf(format, v...), "component", "nats-server")
}
