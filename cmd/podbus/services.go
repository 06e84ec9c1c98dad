package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/nodepool"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/convert"
	"github.com/podbus/podbus/internal/health"
	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/internal/pki"
	"github.com/podbus/podbus/internal/secretbox"
	"github.com/podbus/podbus/loadtest"
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

// common are the flags every service has.
type common struct {
	nats string
	natsFlags
	id         string
	healthAddr string
	replicas   int
	heap       heapFlags
	// consumers are the durables the service works: /readyz waits until they are bound.
	consumers []string
}

func (c *common) register(fs *flag.FlagSet, service string) {
	host, _ := os.Hostname()
	fs.StringVar(&c.nats, "nats", "nats://127.0.0.1:4222", "NATS server URL(s), comma separated")
	c.natsFlags.register(fs)
	fs.StringVar(&c.id, "id", fmt.Sprintf("%s-%d", host, os.Getpid()), "replica identity (stamped on every message)")
	fs.StringVar(&c.healthAddr, "health-addr", "", "serve /healthz, /readyz and /debug/vars here (e.g. :8081)")
	fs.IntVar(&c.replicas, "replicas", 1, "replicas of streams and buckets when this service provisions them (3 in a cluster)")
	c.heap.register(fs)
}

// busOptions shape the streams and buckets, the API's kinds' buckets included, so every service finds
// them whichever starts first.
// With a service's NATS credential (not the admin's), an administrator provisions them instead.
func (c *common) busOptions() bus.Options {
	return bus.Options{Replicas: c.replicas, Buckets: admission.Buckets(), Provisioned: c.restricted()}
}

// serve connects, provisions, and runs one service with its health endpoint until ctx ends.
func (c *common) serve(ctx context.Context, service string, mk func(*bus.Conn) (interface{ Run(context.Context) error }, error)) error {
	if err := c.heap.apply(); err != nil {
		return err
	}
	opts, err := c.natsFlags.options()
	if err != nil {
		return err
	}
	conn, err := bus.Connect(ctx, c.nats, "podbus-"+service+"/"+c.id, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := bus.Provision(ctx, conn.JS, c.busOptions()); err != nil {
		return err
	}
	svc, err := mk(conn)
	if err != nil {
		return err
	}
	var ready atomic.Bool
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return health.Serve(gctx, c.healthAddr, func() bool {
			return serviceReady(ready.Load(), conn.NC.IsConnected(), c.consumers)
		})
	})
	if r, ok := svc.(interface{ Ready() <-chan struct{} }); ok {
		// A service that loads state before it works (the scheduler's node cache, the API's listener)
		// is ready only once that is done, so that a probe does not send it work it would stall on.
		g.Go(func() error {
			select {
			case <-r.Ready():
				ready.Store(true)
			case <-gctx.Done():
			}
			return nil
		})
	} else {
		ready.Store(true)
	}
	g.Go(func() error { return svc.Run(gctx) })
	return g.Wait()
}

// serviceReady is a service's /readyz: it has started (its Ready channel, if any, is closed), it is
// connected to NATS, no consumer of the process is being bound, and its own consumers are.
func serviceReady(started, connected bool, consumers []string) bool {
	return started && connected && bus.Unbound() == 0 && bus.Bound(consumers...)
}

func runStore(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("store", flag.ExitOnError)
	c.register(fs, "store")
	workers := fs.Int("workers", 32, "commands handled at once (podbus up runs the store with the same)")
	if err := parse(fs, args); err != nil {
		return err
	}
	c.consumers = []string{bus.ConsumerStore}
	return c.serve(ctx, "store", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return store.New(store.Config{ID: c.id, Workers: *workers}, cn)
	})
}

// profileFlag registers --profile and its alias --config: a scheduler configuration file, either
// kube-scheduler's KubeSchedulerConfiguration or podbus's profile file (told apart by apiVersion and
// kind; see sched/config).
func profileFlag(fs *flag.FlagSet, note string) *string {
	p := new(string)
	usage := "scheduler configuration file: a KubeSchedulerConfiguration (apiVersion " + config.KubeAPIVersion +
		") or a podbus profile file (YAML; one profile or profiles: [...]); pods pick a profile by spec.schedulerName" + note
	fs.StringVar(p, "profile", "", usage)
	fs.StringVar(p, "config", "", "alias of --profile")
	return p
}

func runScheduler(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("scheduler", flag.ExitOnError)
	c.register(fs, "scheduler")
	profile := profileFlag(fs, "; every replica must load the same")
	if err := parse(fs, args); err != nil {
		return err
	}
	var profiles []config.Profile
	if *profile != "" {
		var err error
		if profiles, err = config.LoadProfiles(*profile); err != nil {
			return err
		}
	}
	return c.serve(ctx, "scheduler", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return scheduler.New(scheduler.Config{ID: c.id, Profiles: profiles}, cn)
	})
}

func runBinder(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("binder", flag.ExitOnError)
	c.register(fs, "binder")
	if err := parse(fs, args); err != nil {
		return err
	}
	c.consumers = []string{bus.ConsumerBinder, bus.ConsumerBinderDeleted}
	return c.serve(ctx, "binder", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return binder.New(binder.Config{ID: c.id}, cn)
	})
}

func runStatus(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	c.register(fs, "status")
	grace := fs.Duration("node-monitor-grace-period", 40*time.Second, "a node whose heartbeats stop for this long becomes NotReady")
	skew := fs.Duration("max-clock-skew", time.Minute, "refuse agent reports and heartbeats dated further than this ahead of the bus's clock")
	report := fs.Duration("node-status-report-frequency", 5*time.Minute, "write a node whose status is unchanged this often (heartbeats in between renew its lease alone)")
	if err := parse(fs, args); err != nil {
		return err
	}
	c.consumers = []string{bus.ConsumerStatus, bus.ConsumerHeartbeats}
	return c.serve(ctx, "status", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return status.New(status.Config{ID: c.id, NodeMonitorGracePeriod: *grace, MaxClockSkew: *skew, NodeStatusReportFrequency: *report}, cn)
	})
}

func runAuditSeal(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("auditseal", flag.ExitOnError)
	c.register(fs, "auditseal")
	dataDir := fs.String("data-dir", ".podbus", "holds the signing key ("+audit.SealKeyFile+", created on first start) and its public key ("+audit.SealPubKeyFile+")")
	records := fs.Int("block-records", 1024, "most records per seal block")
	interval := fs.Duration("block-interval", time.Second, "longest a record waits for its block")
	if err := parse(fs, args); err != nil {
		return err
	}
	return c.serve(ctx, "auditseal", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return auditseal.New(auditseal.Config{ID: c.id, DataDir: *dataDir, BlockRecords: *records, BlockInterval: *interval}, cn)
	})
}

func runAdmission(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("admission", flag.ExitOnError)
	c.register(fs, "admission")
	addr := fs.String("listen", "127.0.0.1:6443", "address of the Kubernetes API")
	certFile := fs.String("tls-cert-file", "", "serving certificate (PEM); empty: one generated in --cert-dir")
	keyFile := fs.String("tls-private-key-file", "", "key of --tls-cert-file")
	clientCA := fs.String("client-ca-file", "", "authenticate client certificates signed by this CA (CN user, O groups); empty: the CA of --cert-dir when the serving certificate is generated there")
	tokenFile := fs.String("token-auth-file", "", "static bearer tokens, kube's CSV: token,user,uid,\"group1,group2\"")
	certDir := fs.String("cert-dir", filepath.Join(".podbus", "pki"), "where the CA and serving certificate are generated (first start) and reused when --tls-cert-file is not given")
	sans := fs.String("tls-san", "", "extra host names and IP addresses of the generated serving certificate, comma separated")
	insecure := fs.Bool("insecure-http", false, "serve plain HTTP without authentication, every request an administrator (system:masters); refused with any credential flag")
	limits := limitFlags(fs)
	kubeconfig := fs.String("kubeconfig-out", "", "write an admin kubeconfig here (the generated CA and a client certificate of "+up.AdminUser+" in "+up.AdminGroup+")")
	server := fs.String("kubeconfig-server", "", "server URL in --kubeconfig-out (default: https:// and --listen, a wildcard host as 127.0.0.1)")
	priorityFile := fs.String("priority-classes", "", "YAML file of PriorityClass objects (scheduling.k8s.io/v1) besides the built-in system classes")
	encKey := fs.String("encryption-key-file", filepath.Join(".podbus", "encryption.key"), "AES-GCM keys sealing Secrets at rest (name:base64 a line, the first seals; created on first start; every replica and real agent needs the same); empty: Secrets in clear")
	if err := parse(fs, args); err != nil {
		return err
	}
	var classes *convert.PriorityClasses
	if *priorityFile != "" {
		var err error
		if classes, err = convert.LoadPriorityClasses(*priorityFile); err != nil {
			return err
		}
	}
	cfg := admission.Config{ID: c.id, Addr: *addr, Limits: limits.get(), PriorityClasses: classes, Bus: c.busOptions(),
		TLSCertFile: *certFile, TLSKeyFile: *keyFile, ClientCAFile: *clientCA, TokenAuthFile: *tokenFile, InsecureHTTP: *insecure, EncryptionKeyFile: *encKey}
	kc, err := admissionTLS(&cfg, *certDir, splitList(*sans), *kubeconfig != "")
	if err != nil {
		return err
	}
	if *kubeconfig != "" {
		kc.Server = *server
		if kc.Server == "" {
			kc.Server = "https://" + up.Dialable(*addr)
			if *insecure {
				kc.Server = "http://" + up.Dialable(*addr)
			}
		}
		if err := pki.WriteKubeconfig(*kubeconfig, "podbus", kc); err != nil {
			return err
		}
	}
	return c.serve(ctx, "admission", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return admission.New(cfg, cn)
	})
}

// errAdminKubeconfig is returned when --kubeconfig-out cannot carry an admin credential.
var errAdminKubeconfig = errors.New("--kubeconfig-out needs the generated PKI: no --tls-cert-file, and no --client-ca-file or that of --cert-dir")

// admissionTLS generates (or reuses) the CA and serving certificate in certDir when no serving
// certificate is given, as kube-apiserver and k3s do; the CA then also authenticates client certificates
// unless another client CA is given. With admin, it returns an admin kubeconfig's CA and credential.
func admissionTLS(cfg *admission.Config, certDir string, sans []string, admin bool) (pki.Kubeconfig, error) {
	if cfg.InsecureHTTP {
		return pki.Kubeconfig{}, nil
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		if admin {
			return pki.Kubeconfig{}, errAdminKubeconfig
		}
		return pki.Kubeconfig{}, nil
	}
	ca, err := pki.LoadOrCreate(certDir)
	if err != nil {
		return pki.Kubeconfig{}, err
	}
	if cfg.TLSCertFile, cfg.TLSKeyFile, err = ca.Serving(sans...); err != nil {
		return pki.Kubeconfig{}, err
	}
	if cfg.ClientCAFile == "" {
		cfg.ClientCAFile = ca.CertFile()
	}
	if !admin {
		return pki.Kubeconfig{}, nil
	}
	if cfg.ClientCAFile != ca.CertFile() {
		return pki.Kubeconfig{}, errAdminKubeconfig
	}
	certPEM, keyPEM, err := ca.Client("admin", up.AdminUser, up.AdminGroup)
	if err != nil {
		return pki.Kubeconfig{}, err
	}
	return pki.Kubeconfig{CA: ca.CertPEM(), ClientCert: certPEM, ClientKey: keyPEM}, nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func runNamespaces(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("namespaces", flag.ExitOnError)
	c.register(fs, "namespaces")
	resync := fs.Duration("resync", namespaces.DefaultResync, "re-examine every terminating namespace this often")
	if err := parse(fs, args); err != nil {
		return err
	}
	return c.serve(ctx, "namespaces", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return namespaces.New(namespaces.Config{ID: c.id, Buckets: admission.NamespacedBuckets(), Resync: *resync}, cn)
	})
}

func runControllers(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("controllers", flag.ExitOnError)
	c.register(fs, "controllers")
	resync := fs.Duration("resync", controllers.DefaultResync, "re-examine every DaemonSet, budget and owned object this often")
	if err := parse(fs, args); err != nil {
		return err
	}
	return c.serve(ctx, "controllers", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return controllers.New(controllers.Config{ID: c.id, Kinds: admission.KindBuckets(), Resync: *resync}, cn)
	})
}

func runNodeLifecycle(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("nodelifecycle", flag.ExitOnError)
	c.register(fs, "nodelifecycle")
	rate := fs.Float64("node-eviction-rate", nodelifecycle.DefaultEvictionRate, "pods this replica evicts per second at most from nodes that are not Ready (token bucket)")
	burst := fs.Int("node-eviction-burst", 0, "evictions at once before the rate applies (default: the rate, at least 1)")
	if err := parse(fs, args); err != nil {
		return err
	}
	return c.serve(ctx, "nodelifecycle", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return nodelifecycle.New(nodelifecycle.Config{ID: c.id, EvictionRate: *rate, EvictionBurst: *burst}, cn)
	})
}

func runWorkloads(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("workloads", flag.ExitOnError)
	c.register(fs, "workloads")
	workers := fs.Int("workers", workloads.DefaultWorkers, "objects synced at once")
	resync := fs.Duration("resync", workloads.DefaultResync, "re-examine every ReplicaSet and Deployment this often")
	if err := parse(fs, args); err != nil {
		return err
	}
	return c.serve(ctx, "workloads", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return workloads.New(workloads.Config{ID: c.id, Workers: *workers, Resync: *resync}, cn)
	})
}

func runAgent(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	c.register(fs, "agent")
	host, _ := os.Hostname()
	node := fs.String("node", host, "node name")
	nodes := fs.Int("nodes", 1, "simulated nodes to run in this process (fake runtime), sharing one consumer: named <node>-1 ... <node>-N when more than one, node i's pod CIDR the i-th /24 after --pod-cidr's")
	runtime := fs.String("runtime", "fake", "container runtime: fake (simulated) or containerd (real pods; root, containerd and the CNI plugins)")
	cidr := fs.String("pod-cidr", "10.42.1.0/24", "pod CIDR of this node; auto: a /24 of 10.0.0.0/8 from the last two bytes of the node's IPv4 address (times --nodes)")
	cpu := fs.String("cpu", "8", "cpu capacity (containerd: the machine's cores unless set)")
	mem := fs.String("memory", "32Gi", "memory capacity (containerd: the machine's memory unless set)")
	maxPods := fs.Int("max-pods", 110, "maximum pods")
	labels := fs.String("node-labels", "", "labels to add when registering the node (k=v,k=v)")
	taints := fs.String("register-with-taints", "", "taints the node registers with (key=value:Effect,key:Effect); later changes by users win")
	startDelay := fs.Duration("start-delay", 0, "simulated container start time (fake runtime)")
	hb := fs.Duration("heartbeat", 10*time.Second, "heartbeat interval")
	allowPriv := fs.Bool("allow-privileged", false, "run pods with privileged containers (rejected otherwise)")
	clockFile := fs.String("clock-offset-file", "", "testing: a file holding a duration (-1h, 30s) added to this agent's clock, read at each use (podbus chaos steps it)")
	address := fs.String("containerd-address", cri.DefaultAddress, "containerd socket (containerd runtime)")
	namespace := fs.String("containerd-namespace", cri.DefaultNamespace, "containerd namespace of podbus's containers (containerd runtime)")
	stateDir := fs.String("state-dir", "", "sandbox records, network namespaces, container logs and IPAM data of this node (containerd runtime; default /var/lib/podbus/agent/<node>)")
	evictionHard := fs.String("eviction-hard", agent.DefaultEvictionHard, "hard eviction thresholds (containerd runtime), kubelet syntax: signal<quantity or signal<N%, comma separated (memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, pid.available); none: no eviction")
	nodeIP := fs.String("node-ip", "", "the node's InternalIP (default: containerd runtime, the address of the default-route interface; fake, 127.0.0.1)")
	usageInterval := fs.Duration("usage-interval", agent.DefaultUsageInterval, "how often resource usage is measured and published (kubectl top)")
	plainHTTP := fs.String("plain-http-registries", "", "registry hosts (host:port, comma separated) pulled over plain HTTP; loopback ones always are")
	allowHostPath := fs.Bool("allow-host-path", false, "let pods mount hostPath volumes (containerd runtime); off: such pods fail with reason HostPathNotAllowed")
	encKey := fs.String("encryption-key-file", "", "the API's --encryption-key-file, to open the Secrets pods mount (containerd runtime)")
	keepSb := fs.Bool("test-keep-sandboxes", false, "testing: never remove a pod's sandbox and containers (containerd runtime), a broken agent for podbus chaos's checker to catch")
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *cidr == "auto" {
		*cidr = autoPodCIDR(*nodes)
	}
	lbls, err := nodepool.ParseLabels(*labels)
	if err != nil {
		return fmt.Errorf("--node-labels: %w", err)
	}
	tnts, err := nodepool.ParseTaints(*taints)
	if err != nil {
		return fmt.Errorf("--register-with-taints: %w", err)
	}
	var rt agent.Runtime
	switch *runtime {
	case "fake":
		f, err := fake.New(fake.Config{StartDelay: *startDelay, PodCIDR: *cidr})
		if err != nil {
			return err
		}
		rt = f
	case "containerd":
		if *stateDir == "" {
			*stateDir = filepath.Join("/var/lib/podbus/agent", *node)
		}
		var hosts []string
		for _, h := range strings.Split(*plainHTTP, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hosts = append(hosts, h)
			}
		}
		r, err := cri.New(ctx, cri.Config{NodeName: *node, Address: *address, Namespace: *namespace, PodCIDR: *cidr,
			StateDir: *stateDir, PlainHTTP: hosts, AllowHostPath: *allowHostPath})
		if err != nil {
			return err
		}
		defer r.Close()
		rt = r
		if *keepSb {
			rt = keepSandboxes{r}
		}
		mcpu, mmem, err := cri.MachineCapacity()
		if err != nil {
			return err
		}
		if !set["cpu"] {
			*cpu = mcpu
		}
		if !set["memory"] {
			*mem = mmem
		}
	default:
		return fmt.Errorf("unknown runtime %q (fake or containerd)", *runtime)
	}
	c.id = *node
	acfg := agent.Config{Node: *node, PodCIDR: *cidr, CPU: *cpu, Memory: *mem, MaxPods: *maxPods, Labels: lbls, Taints: tnts, HeartbeatInterval: *hb,
		EvictionHard: *evictionHard, HostIP: *nodeIP, UsageInterval: *usageInterval,
		AllowPrivileged: *allowPriv}
	if *encKey != "" {
		if acfg.SecretBox, err = secretbox.Load(*encKey); err != nil {
			return err
		}
	}
	if *clockFile != "" {
		acfg.Clock = offsetClock(*clockFile)
	}
	if *nodes > 1 {
		if *runtime != "fake" {
			return fmt.Errorf("--nodes %d: only simulated nodes (--runtime fake) run many to a process", *nodes)
		}
		return c.serve(ctx, "agent", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
			return simulatedHost(acfg, *nodes, *startDelay, cn)
		})
	}
	return c.serve(ctx, "agent", func(cn *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return agent.New(acfg, cn, rt)
	})
}

// simulatedHost runs n simulated nodes like base, named base.Node-1 ... base.Node-n, in one agent host
// named base.Node.
func simulatedHost(base agent.Config, n int, startDelay time.Duration, cn *bus.Conn) (*agent.Host, error) {
	agents := make([]*agent.Agent, 0, n)
	for i := range n {
		cfg := base
		cfg.Node = fmt.Sprintf("%s-%d", base.Node, i+1)
		cidr, err := nthCIDR(base.PodCIDR, i)
		if err != nil {
			return nil, fmt.Errorf("--pod-cidr: %w", err)
		}
		cfg.PodCIDR = cidr
		rt, err := fake.New(fake.Config{StartDelay: startDelay, PodCIDR: cidr})
		if err != nil {
			return nil, err
		}
		a, err := agent.New(cfg, cn, rt)
		if err != nil {
			return nil, err
		}
		agents = append(agents, a)
	}
	return agent.NewHost(agent.HostConfig{Name: base.Node}, cn, agents...)
}

// nthCIDR is the i-th /24 after the one cidr starts in (the 0th is cidr's own).
func nthCIDR(cidr string, i int) (string, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return "", fmt.Errorf("%q is not an IPv4 CIDR", cidr)
	}
	b := p.Addr().As4()
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8) + uint32(i)<<8
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), 0}).String() + "/24", nil
}

func runNATS(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nats", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "client listen host")
	port := fs.Int("port", 4222, "client port")
	store := fs.String("store", ".podbus/nats", "JetStream storage directory")
	name := fs.String("name", "podbus", "server name (unique in a cluster)")
	cluster := fs.String("cluster-name", "", "join a cluster of this name")
	listen := fs.String("cluster-listen", "0.0.0.0:6222", "route listen address in a cluster")
	routes := fs.String("routes", "", "routes to the other cluster members, comma separated (nats://n2:6222,...)")
	advertise := fs.String("cluster-advertise", "", "route address told to the other members, which they may connect to besides --routes (default: --cluster-listen)")
	routePing := fs.Duration("cluster-ping-interval", bus.DefaultRoutePingInterval, "how often a member pings each route; a route whose second ping goes unanswered is dropped, which is how a silent partition is noticed")
	httpPort := fs.Int("http-port", 0, "monitoring port (/healthz: ready once JetStream reaches its meta leader) or 0")
	var sec natsauth.ServerSecurity
	fs.StringVar(&sec.Auth, "auth", "", "authorization file (podbus natsauth init's nats-auth.conf): every client must hold one of its credentials; monitoring then listens on loopback only")
	fs.StringVar(&sec.Cert, "tls-cert", "", "TLS certificate (PEM) for client connections and routes (podbus natsauth init's nats.crt)")
	fs.StringVar(&sec.Key, "tls-key", "", "key of --tls-cert")
	fs.StringVar(&sec.CA, "tls-ca", "", "CA (PEM) that routes' certificates must chain to (mutual TLS between cluster members)")
	var heap heapFlags
	heap.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := heap.apply(); err != nil {
		return err
	}
	cfg := bus.ServerConfig{Host: *host, Port: *port, StoreDir: *store, Name: *name, HTTPPort: *httpPort, Logger: slog.Default(), Configure: sec.Configure}
	if *cluster != "" {
		cfg.ClusterName, cfg.ClusterListen, cfg.ClusterAdvertise, cfg.RoutePingInterval = *cluster, *listen, *advertise, *routePing
		for _, r := range strings.Split(*routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				cfg.Routes = append(cfg.Routes, r)
			}
		}
	}
	srv, err := bus.RunServer(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "nats-server %s listening on %s\n", *name, srv.ClientURL())
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}

func runUp(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	var cfg up.Config
	fs.StringVar(&cfg.NATSURL, "nats", "", "use this NATS server instead of an embedded one")
	fs.IntVar(&cfg.NATSPort, "nats-port", 4222, "port of the embedded NATS server (-1: random)")
	healthAddr := fs.String("health-addr", "", "serve /healthz, /readyz, /metrics and /debug/vars of the whole process here (no authentication: keep it on loopback)")
	natsMonitor := fs.String("nats-monitor", "127.0.0.1:8222", "where the embedded NATS server serves its monitoring endpoint (/varz, /jsz, /healthz); off: nowhere")
	fs.BoolVar(&cfg.NATSAuth, "nats-auth", true, "embedded NATS: a credential per role in <data>/"+up.NATSCredsDir+" (made on first start, reused after), each service connecting with its own; TLS on the loopback listener (CA in <data>/pki); false: open to any local process")
	agentCreds := fs.String("agent-creds", "", "with --nats-auth: node names to make agent credentials for, comma separated (for `podbus agent --node NAME` processes)")
	poolCreds := fs.String("pool-creds", "", "with --nats-auth: agent host names to make simulated-node pool credentials for, comma separated (for `podbus agent --runtime fake --nodes N --node HOST`)")
	fs.StringVar(&cfg.DataDir, "data", ".podbus", "data directory (NATS storage, the API's certificates, kubeconfig)")
	fs.StringVar(&cfg.APIAddr, "listen", "127.0.0.1:6443", "address of the Kubernetes API")
	fs.BoolVar(&cfg.InsecureHTTP, "insecure-http", false, "serve the API over plain HTTP without authentication, every request an administrator (default: TLS, PKI in <data>/pki)")
	sans := fs.String("tls-san", "", "extra host names and IP addresses of the API's serving certificate, comma separated")
	limits := limitFlags(fs)
	fs.IntVar(&cfg.Nodes, "nodes", 3, "simulated nodes")
	fs.StringVar(&cfg.NodeCPU, "node-cpu", "8", "cpu of each simulated node")
	fs.StringVar(&cfg.NodeMemory, "node-memory", "32Gi", "memory of each simulated node")
	fs.IntVar(&cfg.MaxPods, "max-pods", 110, "pods per simulated node")
	fs.DurationVar(&cfg.StartDelay, "start-delay", 300*time.Millisecond, "simulated container start time")
	fs.IntVar(&cfg.Schedulers, "schedulers", 1, "scheduler replicas")
	fs.DurationVar(&cfg.NodeMonitorGracePeriod, "node-monitor-grace-period", 40*time.Second, "a node whose heartbeats stop for this long becomes NotReady (tainted unreachable)")
	fs.Float64Var(&cfg.NodeEvictionRate, "node-eviction-rate", nodelifecycle.DefaultEvictionRate, "pods evicted per second at most from nodes that are not Ready")
	fs.StringVar(&cfg.Runtime, "runtime", up.RuntimeAuto, "auto: one real node (containerd) next to the simulated ones if this machine can run it; containerd: require it; fake: simulated nodes only")
	fs.StringVar(&cfg.RealNode, "real-node", up.DefaultRealNode, "name of the real node")
	fs.StringVar(&cfg.ContainerdAddress, "containerd-address", cri.DefaultAddress, "containerd socket of the real node")
	fs.StringVar(&cfg.RealNodePodCIDR, "real-node-pod-cidr", up.RealPodCIDR, "pod CIDR of the real node")
	profile := profileFlag(fs, "")
	priorityFile := fs.String("priority-classes", "", "YAML file of PriorityClass objects (scheduling.k8s.io/v1) besides the built-in system classes")
	fs.StringVar(&cfg.RegistryAddr, "registry", up.DefaultRegistryAddr, "with a real node: where to serve the built-in images (podbus/demo-web, podbus/busybox); off: none")
	pools := fs.String("node-pools", "", "node pools file (YAML, see examples/node-pools.yaml); replaces --nodes")
	fs.BoolVar(&cfg.RegisterOnly, "register-only", false, "with --node-pools: write the nodes as Ready without agents (kwok-style; pods bound to them never run)")
	plainHTTP := fs.String("plain-http-registries", "", "registry hosts (host:port, comma separated) the real node pulls from over plain HTTP; loopback ones always are")
	var heap heapFlags
	heap.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := heap.apply(); err != nil {
		return err
	}
	for _, h := range strings.Split(*plainHTTP, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.PlainHTTPRegistries = append(cfg.PlainHTTPRegistries, h)
		}
	}
	if *pools != "" {
		p, err := nodepool.Load(*pools)
		if err != nil {
			return err
		}
		cfg.NodePools = &p
	}
	if *profile != "" {
		p, err := config.LoadProfiles(*profile)
		if err != nil {
			return err
		}
		cfg.Profiles = p
	}
	if *priorityFile != "" {
		pc, err := convert.LoadPriorityClasses(*priorityFile)
		if err != nil {
			return err
		}
		cfg.PriorityClasses = pc
	}
	cfg.APILimits = limits.get()
	cfg.APIHosts = splitList(*sans)
	if *natsMonitor != "off" {
		cfg.NATSMonitor = *natsMonitor
	}
	cfg.AgentCreds, cfg.PoolCreds = splitList(*agentCreds), splitList(*poolCreds)
	c, err := up.Start(ctx, cfg)
	if err != nil {
		return err
	}
	if *healthAddr != "" {
		go func() {
			if err := health.Serve(ctx, *healthAddr, func() bool { return bus.Unbound() == 0 }); err != nil {
				slog.Error("health endpoint", "addr", *healthAddr, "err", err)
			}
		}()
	}
	if c.NoRealNode != nil {
		fmt.Printf("simulated nodes only: %v\n", c.NoRealNode)
	}
	if c.RealNode != "" {
		fmt.Printf("real node %s runs pods with containerd (pod CIDR %s)\n", c.RealNode, cfg.RealNodePodCIDR)
		if cfg.Nodes > 0 || cfg.NodePools != nil {
			fmt.Printf("  reserved: only pods that tolerate %s=%s:NoSchedule land there (examples/web.yaml)\n", up.RealNodeTaintKey, up.RealNodeTaintValue)
		}
	}
	if c.NATSMonitorURL != "" {
		fmt.Printf("NATS monitoring at %s\n", c.NATSMonitorURL)
	}
	fmt.Printf("podbus is up: API %s, NATS %s\n  kubectl --kubeconfig %s get nodes\n", c.APIURL, c.NATSURL, c.Kubeconfig)
	if c.APIURL != "" {
		fmt.Printf("live web view: kubectl --kubeconfig %s proxy, then open http://127.0.0.1:8001/ui/\n", c.Kubeconfig)
	}
	if c.NATSCredsDir != "" {
		fmt.Printf("NATS credentials (one per role) in %s, CA %s; e.g.\n  podbus audit replay --nats %s --nats-creds %s --nats-ca %s\n",
			c.NATSCredsDir, c.NATSCA, c.NATSURL, c.NATSCreds(natsauth.RoleReader), c.NATSCA)
		fmt.Printf("  podbus cluster --nats %s --nats-creds %s --nats-ca %s\n", c.NATSURL, c.NATSCreds(natsauth.RoleReader), c.NATSCA)
		if len(cfg.AgentCreds) > 0 {
			fmt.Printf("  podbus agent --node %s --nats %s --nats-creds %s --nats-ca %s\n", cfg.AgentCreds[0], c.NATSURL,
				c.NATSCreds(natsauth.AgentRole(cfg.AgentCreds[0])), c.NATSCA)
		}
	}
	<-ctx.Done()
	return c.Wait()
}

func runDown(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	var cfg up.DownConfig
	fs.StringVar(&cfg.DataDir, "data", ".podbus", "the data directory up ran on")
	fs.StringVar(&cfg.ContainerdAddress, "containerd-address", cri.DefaultAddress, "containerd socket of the real node")
	fs.StringVar(&cfg.ContainerdNamespace, "containerd-namespace", cri.DefaultNamespace, "containerd namespace of the real node's containers")
	fs.StringVar(&cfg.RealNodePodCIDR, "real-node-pod-cidr", up.RealPodCIDR, "pod CIDR the real node ran with")
	fs.BoolVar(&cfg.KeepData, "keep-data", false, "remove the real node's pods only, keep the data directory")
	fs.BoolVar(&cfg.Force, "force", false, "delete the data directory even if some pod could not be removed")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := up.Down(ctx, cfg); err != nil {
		if errors.Is(err, up.ErrNodeTeardown) && !cfg.Force {
			return fmt.Errorf("%w\n(the data directory is kept; run down again as root with containerd up, or --force)", err)
		}
		return err
	}
	return nil
}

func runLoadtest(ctx context.Context, args []string) error {
	cfg, err := loadtest.ParseFlags(args)
	if err != nil {
		return err
	}
	// With --nodes the load test holds the whole cluster in this process; otherwise the reservation
	// costs it address space only.
	if err := reserveHugePages(os.Getenv("PODBUS_HUGE_PAGES")); err != nil {
		return err
	}
	return loadtest.Run(ctx, cfg, os.Stdout)
}

// offsetClock is the machine's clock plus the duration written in file (none, or unreadable: zero), so
// that a test can step one agent's clock while the machine's is shared.
func offsetClock(file string) func() time.Time {
	return func() time.Time {
		now := time.Now()
		b, err := os.ReadFile(file)
		if err != nil {
			return now
		}
		d, err := time.ParseDuration(strings.TrimSpace(string(b)))
		if err != nil {
			return now
		}
		return now.Add(d)
	}
}
