// Package cri is the agent's real container runtime: containerd for images and containers, CNI for the
// pod network. It implements agent.Runtime the way containerd's CRI plugin implements the CRI, without
// the gRPC layer in between:
//
//	RunSandbox     netns (StateDir/netns) ─▶ record (StateDir/sandboxes/<uid>.json) ─▶ CNI ADD (lo, bridge+portmap+firewall) ─▶ record the IP
//	CreateContainer  OCI spec (image config + pod spec) and a fresh snapshot, labelled with the pod uid
//	StartContainer   task with stdout/stderr to StateDir/logs/<uid>/<container>/<attempt>.log, started
//	exit             exit code and times copied into the container's labels, task deleted
//	RemoveSandbox    containers and tasks removed ─▶ CNI DEL ─▶ netns removed ─▶ record deleted
//
// Everything the runtime knows lives either in containerd (containers and their labels, tasks) or in
// StateDir (sandbox records, network namespaces, logs, CNI cache, host-local IPAM), so a new Runtime on the same StateDir
// sees what an earlier one left (agent restarts).
package cri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containernetworking/cni/libcni"
	"golang.org/x/sync/singleflight"

	"github.com/podbus/podbus/agent"
)

// Defaults of Config.
const (
	DefaultAddress   = "/run/podbus/containerd/containerd.sock"
	DefaultNamespace = "podbus"
)

// DefaultCNIBinDirs are searched for the CNI plugins (Debian's package, then the upstream location).
var DefaultCNIBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// requiredPlugins are the CNI plugins the generated network configuration uses.
var requiredPlugins = []string{"loopback", "bridge", "host-local", "portmap", "firewall"}

// Labels on every container podbus creates.
const (
	LabelPodUID        = "io.podbus.pod.uid"
	LabelPodName       = "io.podbus.pod.name"
	LabelPodNamespace  = "io.podbus.pod.namespace"
	LabelContainerName = "io.podbus.container.name"
	LabelAttempt       = "io.podbus.container.attempt"
	LabelSandboxID     = "io.podbus.sandbox.id"
	labelImage         = "io.podbus.container.image"     // the image as the pod spec names it
	labelImageRef      = "io.podbus.container.image-ref" // name@digest actually run
	labelLogPath       = "io.podbus.container.log"
	labelStartedAt     = "io.podbus.container.started-at" // RFC 3339 nanos, set once the task started
	labelFinishedAt    = "io.podbus.container.finished-at"
	labelExitCode      = "io.podbus.container.exit-code"
	labelReason        = "io.podbus.container.reason"
)

// ErrUnavailable says this machine cannot run real pods (see Check).
var ErrUnavailable = errors.New("containerd runtime unavailable")

// Config configures a Runtime.
type Config struct {
	NodeName   string
	Address    string   // containerd socket; default DefaultAddress
	Namespace  string   // containerd namespace; default DefaultNamespace
	PodCIDR    string   // host-local subnet of this node, e.g. 10.244.1.0/24 (required)
	StateDir   string   // per node: sandbox records, logs, CNI cache, host-local IPAM data (required)
	CNIBinDirs []string // default DefaultCNIBinDirs
	// PlainHTTP lists registry hosts ("host:port") pulled over plain HTTP; loopback hosts always are.
	PlainHTTP []string
	Logger    *slog.Logger
	// AllowHostPath lets pods mount hostPath volumes (off: such pods fail, reason HostPathNotAllowed).
	AllowHostPath bool
}

// Runtime runs pods with containerd and CNI. It implements agent.Runtime.
type Runtime struct {
	cfg    Config
	client *containerd.Client
	cni    *libcni.CNIConfig
	net    *libcni.NetworkConfigList
	lo     *libcni.PluginConfig
	log    *slog.Logger
	pulls  singleflight.Group

	mu    sync.Mutex
	locks map[string]*podLock // see lock
}

var _ agent.Runtime = (*Runtime)(nil)

type podLock struct {
	mu   sync.Mutex
	refs int
}

// New connects to containerd, makes sure the namespace exists and that the CNI plugins are installed.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Address == "" {
		cfg.Address = DefaultAddress
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if len(cfg.CNIBinDirs) == 0 {
		cfg.CNIBinDirs = DefaultCNIBinDirs
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NodeName == "" || cfg.PodCIDR == "" || cfg.StateDir == "" {
		return nil, fmt.Errorf("%w: node name, pod CIDR and state dir are required", agent.ErrConfig)
	}
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	cfg.StateDir = dir
	for _, d := range []string{sandboxDir(dir), NetNSDir(dir), filepath.Join(dir, "logs"), filepath.Join(dir, "ipam"), filepath.Join(dir, "cni-cache")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create state dir: %w", err)
		}
	}
	if err := removeHalfWritten(dir, cfg.Logger); err != nil {
		return nil, err
	}
	if err := sweepNetNS(dir, cfg.Logger); err != nil {
		return nil, err
	}
	if err := checkPlugins(cfg.CNIBinDirs); err != nil {
		return nil, err
	}
	if err := removeStaleBridge(dir, BridgeFor(cfg.NodeName), cfg.PodCIDR, cfg.Logger); err != nil {
		return nil, err
	}
	netConf, loConf, err := networkConfig(cfg)
	if err != nil {
		return nil, err
	}
	client, err := containerd.New(cfg.Address, containerd.WithDefaultNamespace(cfg.Namespace))
	if err != nil {
		return nil, fmt.Errorf("%w: connect to containerd at %s: %v", ErrUnavailable, cfg.Address, err)
	}
	if err := client.NamespaceService().Create(ctx, cfg.Namespace, nil); err != nil && !errdefs.IsAlreadyExists(err) {
		client.Close()
		return nil, fmt.Errorf("create containerd namespace %s: %w", cfg.Namespace, err)
	}
	return &Runtime{
		cfg:    cfg,
		client: client,
		cni:    libcni.NewCNIConfigWithCacheDir(cfg.CNIBinDirs, filepath.Join(dir, "cni-cache"), nil),
		net:    netConf,
		lo:     loConf,
		log:    cfg.Logger.With("runtime", "containerd", "node", cfg.NodeName),
		locks:  map[string]*podLock{},
	}, nil
}

// Close closes the connection to containerd. Pods keep running.
func (r *Runtime) Close() error { return r.client.Close() }

// Client is the containerd client (tests inspect containerd with it).
func (r *Runtime) Client() *containerd.Client { return r.client }

// Version implements agent.Runtime.
func (r *Runtime) Version(ctx context.Context) (string, error) {
	v, err := r.client.Version(ctx)
	if err != nil {
		return "", fmt.Errorf("containerd version: %w", err)
	}
	return "containerd://" + v.Version, nil
}

// Check says why this machine cannot run real pods (not root, no containerd socket, CNI plugins
// missing), or nil when it can.
func Check(ctx context.Context, address string, binDirs []string) error {
	if address == "" {
		address = DefaultAddress
	}
	if len(binDirs) == 0 {
		binDirs = DefaultCNIBinDirs
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not running as root", ErrUnavailable)
	}
	if _, err := os.Stat(address); err != nil {
		return fmt.Errorf("%w: no containerd socket at %s", ErrUnavailable, address)
	}
	if err := checkPlugins(binDirs); err != nil {
		return err
	}
	client, err := containerd.New(address)
	if err != nil {
		return fmt.Errorf("%w: connect to containerd at %s: %v", ErrUnavailable, address, err)
	}
	defer client.Close()
	if _, err := client.Version(ctx); err != nil {
		return fmt.Errorf("%w: containerd at %s does not answer: %v", ErrUnavailable, address, err)
	}
	return nil
}

func checkPlugins(binDirs []string) error {
	var missing []string
	for _, p := range requiredPlugins {
		found := false
		for _, d := range binDirs {
			if fi, err := os.Stat(filepath.Join(d, p)); err == nil && !fi.IsDir() {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: CNI plugins %v not found in %v (Debian: apt install containernetworking-plugins)", ErrUnavailable, missing, binDirs)
	}
	return nil
}

// lock serializes operations on one key (a pod uid: sandbox operations; "ctr/"+id: reaping or removing
// a container); the returned func unlocks.
func (r *Runtime) lock(key string) func() {
	r.mu.Lock()
	l := r.locks[key]
	if l == nil {
		l = &podLock{}
		r.locks[key] = l
	}
	l.refs++
	r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(r.locks, key)
		}
		r.mu.Unlock()
	}
}
