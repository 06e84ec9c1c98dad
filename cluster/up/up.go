// Package up composes a whole podbus cluster in one process: an embedded nats-server (or an external
// one), the five services, simulated node agents and the API, and writes a kubeconfig for kubectl.
// It is what `podbus up` / `make run` runs and what the end-to-end tests start.
package up

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/nodepool"
	"github.com/podbus/podbus/internal/convert"
	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/internal/pki"
	"github.com/podbus/podbus/sched/config"
	"github.com/podbus/podbus/services/admission"
	"github.com/podbus/podbus/services/auditseal"
	"github.com/podbus/podbus/services/binder"
	"github.com/podbus/podbus/services/controllers"
	"github.com/podbus/podbus/services/namespaces"
	"github.com/podbus/podbus/services/nodelifecycle"
	"github.com/podbus/podbus/services/scheduler"
	"github.com/podbus/podbus/services/status"
	"github.com/podbus/podbus/services/store"
	"github.com/podbus/podbus/services/workloads"
)

// Config shapes the cluster.
type Config struct {
	// NATSURL of an existing server; empty starts an embedded one storing in DataDir/nats.
	NATSURL string
	// NATSPort for the embedded server (0: 4222 would clash in tests, so -1 picks a random port).
	NATSPort int
	// NATSMonitor is where the embedded server serves its monitoring endpoint (/varz, /jsz, /healthz;
	// host:port, port 0 picks one); "" serves none.
	NATSMonitor string
	// NATSAuth makes the embedded server a security boundary (internal/natsauth): one credential per role
	// in DataDir/nats-creds (created on first start, reused after), each service connecting with its own,
	// and the client listener on TLS with the CA of DataDir/pki. AgentCreds and PoolCreds name extra nodes
	// and agent hosts to make credentials for, for `podbus agent` processes run against this cluster.
	NATSAuth   bool
	AgentCreds []string
	PoolCreds  []string
	// DataDir holds the embedded server's storage and the kubeconfig (default .podbus).
	DataDir string
	// APIAddr is where the Kubernetes API listens (default 127.0.0.1:6443; ":0" style picks a port).
	APIAddr string
	// APILimits bound the API's requests and watches (zero: the admission defaults).
	APILimits admission.Limits
	// The API serves TLS with a CA and serving certificate kept in DataDir/pki (created on first start,
	// reused after), and the kubeconfig carries the admin's client certificate. APIHosts are extra names
	// and addresses for the serving certificate. InsecureHTTP serves plain HTTP instead, where every
	// request is an administrator (admission.Config.InsecureHTTP).
	APIHosts     []string
	InsecureHTTP bool
	// Nodes is how many simulated nodes to run, each with NodeCPU, NodeMemory and MaxPods.
	Nodes      int
	NodeCPU    string
	NodeMemory string
	MaxPods    int
	// StartDelay of the simulated runtime (time to "start" a container).
	StartDelay time.Duration
	// Schedulers is the number of scheduler replicas (default 1).
	Schedulers int
	// HeartbeatInterval of the agents (default 10s).
	HeartbeatInterval time.Duration
	// NodeMonitorGracePeriod without heartbeats before a node is marked Unknown (status's default when 0)
	// and NodeEvictionRate the evictions per second of the node lifecycle controller (its default when 0).
	NodeMonitorGracePeriod time.Duration
	NodeEvictionRate       float64
	// NodePools, when set, shapes the nodes instead of Nodes/NodeCPU/NodeMemory/MaxPods: one simulated
	// agent per pool node, with the pool's capacity, labels and taints.
	NodePools *nodepool.Pools
	// RegisterOnly writes the pools' nodes into the nodes bucket as Ready nodes without agents
	// (kwok-style, nodepool.Register): pods are scheduled and bound to them but never run.
	RegisterOnly bool
	// NoServices starts only NATS and the agents (the services run elsewhere).
	NoServices bool
	// Memory keeps streams in memory (load tests of the pipeline alone).
	Memory bool
	// NoAudit runs without the AUDIT stream.
	NoAudit bool
	Logger  *slog.Logger

	// Runtime says whether one real node (containerd + CNI) runs next to the simulated ones:
	// RuntimeFake (""), RuntimeContainerd or RuntimeAuto.
	Runtime string
	// RealNode names the real node (default DefaultRealNode); ContainerdAddress is containerd's socket
	// (default cri.DefaultAddress); PlainHTTPRegistries are pulled from over plain HTTP (loopback always is).
	RealNode            string
	ContainerdAddress   string
	PlainHTTPRegistries []string
	// RealNodePodCIDR is the real node's pod range (default RealPodCIDR) and ContainerdNamespace its
	// containerd namespace (default cri.DefaultNamespace): clusters running side by side (tests) each
	// need their own.
	RealNodePodCIDR     string
	ContainerdNamespace string
	// RealNodeEvictionHard is the real node's agent.Config EvictionHard ("": the agent's default).
	RealNodeEvictionHard string
	// UsageInterval is how often every agent publishes resource usage (0: agent.DefaultUsageInterval).
	UsageInterval time.Duration
	// Profiles configure the schedulers (nil: the default profile); PriorityClasses the API's
	// priority classes besides the built-in ones (nil: those only).
	Profiles        []config.Profile
	PriorityClasses *convert.PriorityClasses
	// RegistryAddr is where the built-in images (podbus/demo-web, podbus/busybox) are served when a real
	// node runs (default DefaultRegistryAddr; "off": no registry).
	RegistryAddr string
}

func (c *Config) defaults() {
	if c.DataDir == "" {
		c.DataDir = ".podbus"
	}
	if c.APIAddr == "" {
		c.APIAddr = "127.0.0.1:6443"
	}
	if c.NodeCPU == "" {
		c.NodeCPU = "8"
	}
	if c.NodeMemory == "" {
		c.NodeMemory = "32Gi"
	}
	if c.MaxPods == 0 {
		c.MaxPods = 110
	}
	if c.Schedulers == 0 {
		c.Schedulers = 1
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.NATSPort == 0 {
		c.NATSPort = -1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RealNode == "" {
		c.RealNode = DefaultRealNode
	}
	if c.RealNodePodCIDR == "" {
		c.RealNodePodCIDR = RealPodCIDR
	}
}

// Cluster is a running podbus.
type Cluster struct {
	APIURL  string
	NATSURL string
	// NATSMonitorURL is the embedded server's monitoring endpoint, "" without one.
	NATSMonitorURL string
	Kubeconfig     string
	// CAFile is the CA the API's serving certificate chains to, and AdminTLS trusts it and presents the
	// admin's client certificate (see HTTPClient); both empty with Config.InsecureHTTP.
	CAFile   string
	AdminTLS *tls.Config
	// RealNode is the real node's name, "" without one; NoRealNode says why there is none when
	// Config.Runtime was RuntimeAuto.
	RealNode   string
	NoRealNode error
	// Registry is the address of the image registry serving the built-in images, "" without one.
	Registry string
	// NATSCredsDir holds one credential per role (natsauth.File) and NATSCA is the CA file of the NATS
	// listener's certificate; both empty without Config.NATSAuth.
	NATSCredsDir string
	NATSCA       string

	srv  *server.Server
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
	conn []*bus.Conn
	// stopped is closed once the services and the embedded server are all down.
	stopped chan struct{}
}

// runner is what every service is.
type runner interface {
	Run(ctx context.Context) error
}

// Start brings a cluster up and returns when the API answers and the nodes are registered.
// Everything stops when ctx is cancelled; Wait returns then.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg.defaults()
	log := cfg.Logger
	c := &Cluster{}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	url := cfg.NATSURL
	if url == "" {
		scfg := bus.ServerConfig{Port: cfg.NATSPort, StoreDir: filepath.Join(cfg.DataDir, "nats"), Name: "podbus", Logger: log}
		if cfg.NATSMonitor != "" {
			host, port, err := net.SplitHostPort(cfg.NATSMonitor)
			if err != nil {
				return nil, fmt.Errorf("NATS monitor address: %w", err)
			}
			if scfg.HTTPPort, err = strconv.Atoi(port); err != nil {
				return nil, fmt.Errorf("NATS monitor address: %w", err)
			}
			if scfg.HTTPPort == 0 {
				scfg.HTTPPort = -1 // nats-server's "any port"
			}
			scfg.HTTPHost = host
		}
		if cfg.NATSAuth {
			conf, err := natsAuth(cfg, c)
			if err != nil {
				return nil, err
			}
			scfg.Configure = conf
		}
		srv, err := bus.RunServer(scfg)
		if err != nil {
			return nil, err
		}
		c.srv = srv
		url = srv.ClientURL()
		if a := srv.MonitorAddr(); a != nil {
			c.NATSMonitorURL = "http://" + Dialable(a.String())
		}
	}
	c.NATSURL = url
	// The shared watches outlive the services that use them, so that none sees its watch end before
	// its own context does; they stop once every service has.
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	fail := func(err error) (*Cluster, error) {
		stopHub()
		c.closeConns()
		if c.srv != nil {
			c.srv.Shutdown()
		}
		return nil, err
	}
	// Each connection holds its role's credential, so the permissions are exercised in one process too.
	// An in-process connection skips TLS: its bytes never leave the process, so encrypting them only
	// costs CPU; it still authenticates with its role's nkey.
	dial := func(name, role string) (*bus.Conn, error) {
		var opts []nats.Option
		dialURL, ca := url, c.NATSCA
		if c.srv != nil {
			opts = append(opts, bus.InProcess(c.srv))
			dialURL, ca = bus.PlainURL(url), ""
		}
		if c.NATSCredsDir != "" {
			o, _, err := natsauth.ClientOptions(natsauth.File(c.NATSCredsDir, role), ca)
			if err != nil {
				return nil, err
			}
			opts = append(opts, o...)
		}
		cn, err := bus.Connect(ctx, dialURL, name, opts...)
		if err != nil {
			return nil, err
		}
		c.conn = append(c.conn, cn)
		return cn, nil
	}
	root, err := dial("podbus-up", natsauth.RoleAdmin)
	if err != nil {
		return fail(err)
	}
	busOpts := bus.Options{Memory: cfg.Memory, NoAudit: cfg.NoAudit, Buckets: admission.Buckets()}
	if err := bus.Provision(ctx, root.JS, busOpts); err != nil {
		return fail(err)
	}
	// The admin provisioned everything; the services' credentials could not.
	busOpts.Provisioned = c.NATSCredsDir != ""

	var api *admission.Service
	apiCfg := admission.Config{ID: "api-0", Logger: log, Addr: cfg.APIAddr, Limits: cfg.APILimits, PriorityClasses: cfg.PriorityClasses, Bus: busOpts, InsecureHTTP: cfg.InsecureHTTP,
		EncryptionKeyFile: filepath.Join(cfg.DataDir, EncryptionKeyFile)}
	kc := pki.Kubeconfig{}
	if !cfg.NoServices && !cfg.InsecureHTTP {
		ca, certPEM, keyPEM, err := apiPKI(cfg, &apiCfg)
		if err != nil {
			return fail(err)
		}
		kc = pki.Kubeconfig{CA: ca.CertPEM(), ClientCert: certPEM, ClientKey: keyPEM}
		if c.AdminTLS, err = adminTLS(kc); err != nil {
			return fail(err)
		}
		c.CAFile = ca.CertFile()
	}
	if !cfg.NoServices {
		// The services that follow the whole pods, nodes and alloc buckets share one watch of each: the
		// server delivers a change once to the process rather than once to each of them.
		wcn, err := dial("podbus-shared-watches", natsauth.RoleReader)
		if err != nil {
			return fail(err)
		}
		shared := bus.NewWatchHub(hubCtx, wcn.JS, log, bus.BucketPods, bus.BucketNodes, bus.BucketAlloc)
		apiCfg.SharedWatches = shared
		type mk func(cn *bus.Conn) (runner, error)
		services := []struct {
			name string
			mk   mk
		}{
			{"store", func(cn *bus.Conn) (runner, error) { return store.New(store.Config{ID: "store-0", Logger: log}, cn) }},
			{"binder", func(cn *bus.Conn) (runner, error) {
				return binder.New(binder.Config{ID: "binder-0", Logger: log, SharedWatches: shared}, cn)
			}},
			{"status", func(cn *bus.Conn) (runner, error) {
				return status.New(status.Config{ID: "status-0", Logger: log, NodeMonitorGracePeriod: cfg.NodeMonitorGracePeriod, SharedWatches: shared}, cn)
			}},
			{"nodelifecycle", func(cn *bus.Conn) (runner, error) {
				return nodelifecycle.New(nodelifecycle.Config{ID: "nodelifecycle-0", EvictionRate: cfg.NodeEvictionRate, Logger: log, SharedWatches: shared}, cn)
			}},
			{"controllers", func(cn *bus.Conn) (runner, error) {
				return controllers.New(controllers.Config{ID: "controllers-0", Kinds: admission.KindBuckets(), Logger: log, SharedWatches: shared}, cn)
			}},
			{"workloads", func(cn *bus.Conn) (runner, error) {
				return workloads.New(workloads.Config{ID: "workloads-0", Logger: log, SharedWatches: shared}, cn)
			}},
			{"namespaces", func(cn *bus.Conn) (runner, error) {
				return namespaces.New(namespaces.Config{ID: "namespaces-0", Logger: log, Buckets: admission.NamespacedBuckets()}, cn)
			}},
		}
		if !cfg.NoAudit {
			services = append(services, struct {
				name string
				mk   mk
			}{"auditseal", func(cn *bus.Conn) (runner, error) {
				return auditseal.New(auditseal.Config{ID: "auditseal-0", DataDir: cfg.DataDir, Logger: log}, cn)
			}})
		}
		for i := 0; i < cfg.Schedulers; i++ {
			id := fmt.Sprintf("sched-%d", i)
			services = append(services, struct {
				name string
				mk   mk
			}{"scheduler", func(cn *bus.Conn) (runner, error) {
				return scheduler.New(scheduler.Config{ID: id, Profiles: cfg.Profiles, Logger: log, SharedWatches: shared}, cn)
			}})
		}
		for _, s := range services {
			cn, err := dial("podbus-"+s.name, s.name)
			if err != nil {
				return fail(err)
			}
			r, err := s.mk(cn)
			if err != nil {
				return fail(fmt.Errorf("%s: %w", s.name, err))
			}
			c.run(ctx, s.name, r)
		}
		cn, err := dial("podbus-admission", natsauth.RoleAdmission)
		if err != nil {
			return fail(err)
		}
		api, err = admission.New(apiCfg, cn)
		if err != nil {
			return fail(fmt.Errorf("admission: %w", err))
		}
		c.run(ctx, "admission", api)
	}

	agents := agentConfigs(cfg)
	if cfg.NodePools != nil {
		cfg.Nodes = cfg.NodePools.Total()
		if cfg.RegisterOnly {
			if err := nodepool.Register(ctx, root, *cfg.NodePools); err != nil {
				return fail(err)
			}
			agents = nil
		}
	}
	// Agents share a few connections: 100 simulated nodes need not open 100 sockets.
	var agentConns []*bus.Conn
	for i := 0; i < min(len(agents), 4); i++ {
		cn, err := dial(fmt.Sprintf("podbus-agents-%d", i), simRole(cfg))
		if err != nil {
			return fail(err)
		}
		agentConns = append(agentConns, cn)
	}
	// The simulated nodes share one agent host: one consumer and one read of the store for all of them.
	var sim []*agent.Agent
	for i, acfg := range agents {
		rt, err := fake.New(fake.Config{StartDelay: cfg.StartDelay, PodCIDR: acfg.PodCIDR})
		if err != nil {
			return fail(err)
		}
		a, err := agent.New(acfg, agentConns[i%len(agentConns)], rt)
		if err != nil {
			return fail(fmt.Errorf("agent %s: %w", acfg.Node, err))
		}
		sim = append(sim, a)
	}
	if len(sim) > 0 {
		h, err := agent.NewHost(agent.HostConfig{Name: SimHost, Logger: log}, agentConns[0], sim...)
		if err != nil {
			return fail(err)
		}
		c.run(ctx, "simulated agents", h)
	}

	nodes := cfg.Nodes
	real, why := cfg.wantReal(ctx)
	if why != nil && cfg.Runtime != RuntimeAuto {
		return fail(why)
	}
	c.NoRealNode = why
	if real {
		cn, err := dial("podbus-agent-"+cfg.RealNode, natsauth.AgentRole(cfg.RealNode))
		if err != nil {
			return fail(err)
		}
		a, err := newRealAgent(ctx, cfg, cn, cfg.Nodes > 0)
		if err != nil {
			return fail(fmt.Errorf("real node %s: %w", cfg.RealNode, err))
		}
		c.run(ctx, "agent "+cfg.RealNode, a)
		c.RealNode = cfg.RealNode
		nodes++
		if cfg.RegistryAddr != "off" {
			// A busy port (another podbus, a registry of the user's) is not fatal: pods name their images.
			if reg, _, err := ServeImages(ctx, cfg.RegistryAddr, cfg.DataDir, log); err != nil {
				log.Warn("no built-in image registry", "err", err)
			} else {
				c.Registry = reg.Addr()
			}
		}
	}

	if api != nil {
		addr, err := waitAddr(ctx, api)
		if err != nil {
			return fail(err)
		}
		c.APIURL = "https://" + Dialable(addr)
		if cfg.InsecureHTTP {
			c.APIURL = "http://" + Dialable(addr)
		}
		kc.Server = c.APIURL
		c.Kubeconfig = filepath.Join(cfg.DataDir, "kubeconfig")
		if err := pki.WriteKubeconfig(c.Kubeconfig, "podbus", kc); err != nil {
			return fail(err)
		}
	}
	// Nodes are registered by the status service; without it here, the caller waits for them itself.
	if cfg.NoServices {
		nodes = 0
	}
	if err := WaitNodes(ctx, root, nodes); err != nil {
		return fail(err)
	}
	log.Info("podbus is up", "api", c.APIURL, "nats", c.NATSURL, "nodes", nodes, "real node", c.RealNode, "registry", c.Registry, "kubeconfig", c.Kubeconfig)
	c.stopped = make(chan struct{})
	go func() {
		defer close(c.stopped)
		<-ctx.Done()
		c.wg.Wait()
		stopHub()
		c.closeConns()
		if c.srv != nil {
			c.srv.Shutdown()
			c.srv.WaitForShutdown()
		}
	}()
	return c, nil
}

func (c *Cluster) run(ctx context.Context, name string, r runner) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			c.mu.Lock()
			c.errs = append(c.errs, fmt.Errorf("%s: %w", name, err))
			c.mu.Unlock()
			slog.Error("service stopped", "service", name, "err", err)
		}
	}()
}

func (c *Cluster) closeConns() {
	for _, cn := range c.conn {
		cn.NC.Close()
	}
}

// Wait blocks until every service and the embedded server have stopped (after ctx is cancelled) and
// returns the services' errors.
func (c *Cluster) Wait() error {
	<-c.stopped
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

// Server is the embedded nats-server, or nil.
func (c *Cluster) Server() *server.Server { return c.srv }

// agentConfigs are the simulated agents to run: one per pool node, or Nodes alike ones.
func agentConfigs(cfg Config) []agent.Config {
	var out []agent.Config
	if cfg.NodePools != nil {
		for i, n := range cfg.NodePools.Nodes() {
			a := n.AgentConfig()
			a.PodCIDR = PodCIDR(i)
			a.HeartbeatInterval = cfg.HeartbeatInterval
			a.UsageInterval = cfg.UsageInterval
			out = append(out, a)
		}
		return out
	}
	for i := 0; i < cfg.Nodes; i++ {
		out = append(out, agent.Config{
			Node:              NodeName(i),
			PodCIDR:           PodCIDR(i),
			CPU:               cfg.NodeCPU,
			Memory:            cfg.NodeMemory,
			MaxPods:           cfg.MaxPods,
			HeartbeatInterval: cfg.HeartbeatInterval,
			UsageInterval:     cfg.UsageInterval,
		})
	}
	return out
}

// SimHost names the agent host of the simulated nodes (its consumer is bus.ConsumerAgentHost(SimHost)).
const SimHost = "up"

// NodeName names the i-th simulated node.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i+1) }

// PodCIDR gives the i-th node its own /24 inside 10.42.0.0/15 and up.
func PodCIDR(i int) string {
	n := i + 1
	return fmt.Sprintf("10.%d.%d.0/24", 42+n/256, n%256)
}

func waitAddr(ctx context.Context, api *admission.Service) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if a := api.Addr(); a != "" {
			conn, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				conn.Close()
				return a, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("the API did not start listening")
}

// WaitNodes waits until want nodes are registered in the nodes bucket.
func WaitNodes(ctx context.Context, c *bus.Conn, want int) error {
	if want == 0 {
		return nil
	}
	kv, err := c.JS.KeyValue(ctx, bus.BucketNodes)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		keys, err := kv.ListKeys(ctx)
		n := 0
		if err == nil {
			for range keys.Keys() {
				n++
			}
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d nodes registered", n, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
