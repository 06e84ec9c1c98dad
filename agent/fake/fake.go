// Package fake is a simulated container runtime for tests and load tests: sandboxes get IPs from the
// node's pod CIDR (host-local style), containers live in memory and "run" their command:
//
//	command+args ending in "exit N"   exits with code N as soon as it started
//	command+args ending in "sleep N"  runs N seconds (fractions allowed), then exits 0
//	anything else                     runs until stopped (an init container: exits 0 at once)
//
// It is cheap: no goroutine per container (timers only), one mutex, so one process can simulate
// many nodes full of pods.
package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/podbus/podbus/agent"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// ErrIPsExhausted is returned by RunSandbox when every address of the pod CIDR is in use.
var ErrIPsExhausted = errors.New("no IP addresses available in range")

// Version is what Version reports.
const Version = "fake://1.0.0"

// Exit codes of a stopped container: SIGTERM honoured, or SIGKILL after the grace period.
const (
	exitTerm = 143
	exitKill = 137
)

// Config configures the fake runtime.
type Config struct {
	// PodCIDR the sandbox IPs come from (default 10.88.0.0/16). Like host-local IPAM, the network
	// address, the first host (the gateway) and the broadcast address are never handed out.
	PodCIDR string
	// StartDelay is how long StartContainer takes, to simulate a real runtime.
	StartDelay time.Duration
	// Probe, when set, answers probes; nil answers every probe with success.
	Probe func(t agent.ProbeTarget) agent.ProbeResult
	// Images present on the "machine"; nil means every image is present.
	Images []string
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Runtime is the fake runtime. It implements agent.Runtime and agent.Prober.
type Runtime struct {
	cfg Config

	mu         sync.Mutex
	ipam       *ipam
	sandboxes  map[string]*sandbox // by pod uid
	containers map[agent.ContainerID]*container
	images     map[string]bool  // nil: all present
	checkErr   map[string]error // CheckSandbox's answer by pod uid (SetCheckError)
	nextID     uint64
}

var (
	_ agent.Runtime = (*Runtime)(nil)
	_ agent.Prober  = (*Runtime)(nil)
)

type sandbox struct {
	sb         agent.Sandbox
	containers []agent.ContainerID
	usage      map[string]usageBasis // by container name (usage.go)
	init       map[string]bool       // names of the pod's init containers
}

type container struct {
	st      agent.ContainerStatus
	sandbox string // pod uid
	spec    *pb.Container
	init    bool
	timer   *time.Timer
	waiters []func(agent.ContainerStatus)
	log     []string
}

// New returns a fake runtime.
func New(cfg Config) (*Runtime, error) {
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = "10.88.0.0/16"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ip, err := newIPAM(cfg.PodCIDR)
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg:        cfg,
		ipam:       ip,
		sandboxes:  map[string]*sandbox{},
		containers: map[agent.ContainerID]*container{},
	}
	if cfg.Images != nil {
		r.images = map[string]bool{}
		for _, im := range cfg.Images {
			r.images[im] = true
		}
	}
	return r, nil
}

// Version implements agent.Runtime.
func (r *Runtime) Version(context.Context) (string, error) { return Version, nil }

// RunSandbox implements agent.SandboxManager.
func (r *Runtime) RunSandbox(_ context.Context, pod *pb.Pod) (agent.Sandbox, error) {
	md := pod.GetMetadata()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sandboxes[md.GetUid()]; ok {
		return s.sb, nil
	}
	ip, err := r.ipam.allocate(md.GetUid())
	if err != nil {
		return agent.Sandbox{}, fmt.Errorf("setup network for pod %q: %w", md.GetName(), err)
	}
	r.nextID++
	sb := agent.Sandbox{
		ID:        fmt.Sprintf("sb-%d", r.nextID),
		PodUID:    md.GetUid(),
		Namespace: md.GetNamespace(),
		Name:      md.GetName(),
		IP:        ip.String(),
		IPs:       []string{ip.String()},
		CreatedAt: r.cfg.Now(),
	}
	s := &sandbox{sb: sb}
	for _, c := range pod.GetSpec().GetInitContainers() {
		if s.init == nil {
			s.init = map[string]bool{}
		}
		s.init[c.GetName()] = true
	}
	r.sandboxes[md.GetUid()] = s
	return sb, nil
}

// CheckSandbox implements agent.SandboxManager.
func (r *Runtime) CheckSandbox(_ context.Context, sb agent.Sandbox) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sandboxes[sb.PodUID]
	if !ok || s.sb.ID != sb.ID {
		return fmt.Errorf("sandbox %s: %w", sb.ID, agent.ErrNotFound)
	}
	if err := r.checkErr[sb.PodUID]; err != nil {
		return fmt.Errorf("CNI CHECK of sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// StaticNetwork reports that a sandbox's network breaks only through SetCheckError, so an agent
// checks it periodically only when its NetworkCheckInterval says so.
func (r *Runtime) StaticNetwork() bool { return true }

// SetCheckError makes CheckSandbox of the pod's sandbox fail with err (a broken pod network); nil
// repairs it.
func (r *Runtime) SetCheckError(podUID string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.checkErr, podUID)
		return
	}
	if r.checkErr == nil {
		r.checkErr = map[string]error{}
	}
	r.checkErr[podUID] = err
}

// RemoveSandbox implements agent.SandboxManager.
func (r *Runtime) RemoveSandbox(_ context.Context, sb agent.Sandbox) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sandboxes[sb.PodUID]
	if !ok {
		return nil
	}
	for _, id := range s.containers {
		if c := r.containers[id]; c != nil {
			r.exitLocked(c, exitKill, "")
			delete(r.containers, id)
		}
	}
	r.ipam.release(sb.PodUID)
	delete(r.sandboxes, sb.PodUID)
	return nil
}

// ListSandboxes implements agent.SandboxManager.
func (r *Runtime) ListSandboxes(context.Context) ([]agent.SandboxInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]agent.SandboxInfo, 0, len(r.sandboxes))
	for _, s := range r.sandboxes {
		info := agent.SandboxInfo{Sandbox: s.sb}
		for _, id := range s.containers {
			if c := r.containers[id]; c != nil {
				info.Containers = append(info.Containers, c.st)
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// PullImage implements agent.ImageManager.
func (r *Runtime) PullImage(_ context.Context, image, policy string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	present := r.images == nil || r.images[image]
	switch {
	case policy == "Always":
		r.markPresent(image)
		return true, nil
	case present:
		return false, nil
	case policy == "Never":
		return false, fmt.Errorf("image %q: %w", image, agent.ErrImageNeverPull)
	default:
		r.markPresent(image)
		return true, nil
	}
}

func (r *Runtime) markPresent(image string) {
	if r.images != nil {
		r.images[image] = true
	}
}

// CreateContainer implements agent.ContainerManager.
func (r *Runtime) CreateContainer(_ context.Context, sb agent.Sandbox, c *pb.Container, attempt int32) (agent.ContainerID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sandboxes[sb.PodUID]
	if !ok {
		return "", fmt.Errorf("create container %s: sandbox %s: %w", c.GetName(), sb.ID, agent.ErrNotFound)
	}
	r.nextID++
	id := agent.ContainerID(fmt.Sprintf("c-%d", r.nextID))
	r.containers[id] = &container{
		sandbox: sb.PodUID,
		spec:    c,
		init:    s.init[c.GetName()],
		st: agent.ContainerStatus{
			ID: id, Name: c.GetName(), Attempt: attempt, Image: c.GetImage(),
			ImageRef: "fake://" + c.GetImage(), State: agent.StateCreated, CreatedAt: r.cfg.Now(),
		},
	}
	s.containers = append(s.containers, id)
	return id, nil
}

// StartContainer implements agent.ContainerManager. It takes StartDelay.
func (r *Runtime) StartContainer(ctx context.Context, id agent.ContainerID) error {
	if d := r.cfg.StartDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("start container %s: %w", id, ctx.Err())
		case <-t.C:
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return fmt.Errorf("start container %s: %w", id, agent.ErrNotFound)
	}
	if c.st.State != agent.StateCreated {
		return fmt.Errorf("start container %s: state %s", id, c.st.State)
	}
	c.st.State = agent.StateRunning
	c.st.StartedAt = r.cfg.Now()
	c.log = append(c.log, "started "+strings.Join(append(c.spec.GetCommand(), c.spec.GetArgs()...), " "))
	switch b := behaviourOf(c.spec); {
	case b.exits:
		c.timer = time.AfterFunc(0, func() { r.exit(id, b.code) })
	case b.sleeps:
		c.timer = time.AfterFunc(b.sleep, func() { r.exit(id, 0) })
	case c.init:
		c.timer = time.AfterFunc(0, func() { r.exit(id, 0) }) // an init container's work is done at once
	}
	return nil
}

// StopContainer implements agent.ContainerManager: the fake honours SIGTERM at once.
func (r *Runtime) StopContainer(_ context.Context, id agent.ContainerID, grace time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return fmt.Errorf("stop container %s: %w", id, agent.ErrNotFound)
	}
	code := int32(exitTerm)
	if grace <= 0 {
		code = exitKill
	}
	r.exitLocked(c, code, "")
	return nil
}

// RemoveContainer implements agent.ContainerManager.
func (r *Runtime) RemoveContainer(_ context.Context, id agent.ContainerID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return nil
	}
	if c.st.State == agent.StateRunning {
		return fmt.Errorf("remove container %s: still running", id)
	}
	r.exitLocked(c, exitKill, "") // wake waiters of a created-never-started container
	delete(r.containers, id)
	if s := r.sandboxes[c.sandbox]; s != nil {
		for i, x := range s.containers {
			if x == id {
				s.containers = append(s.containers[:i], s.containers[i+1:]...)
				break
			}
		}
	}
	return nil
}

// ContainerStatus implements agent.ContainerManager.
func (r *Runtime) ContainerStatus(_ context.Context, id agent.ContainerID) (agent.ContainerStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return agent.ContainerStatus{}, fmt.Errorf("container %s: %w", id, agent.ErrNotFound)
	}
	return c.st, nil
}

// WaitContainer implements agent.ContainerManager.
func (r *Runtime) WaitContainer(_ context.Context, id agent.ContainerID) (<-chan agent.ContainerStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return nil, fmt.Errorf("wait container %s: %w", id, agent.ErrNotFound)
	}
	ch := make(chan agent.ContainerStatus, 1)
	r.notifyLocked(c, func(st agent.ContainerStatus) { ch <- st }) // buffered 1, sent once
	return ch, nil
}

// NotifyExit implements agent.ExitNotifier: f runs under the runtime's lock.
func (r *Runtime) NotifyExit(id agent.ContainerID, f func(agent.ContainerStatus)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return fmt.Errorf("wait container %s: %w", id, agent.ErrNotFound)
	}
	r.notifyLocked(c, f)
	return nil
}

func (r *Runtime) notifyLocked(c *container, f func(agent.ContainerStatus)) {
	if c.st.State == agent.StateExited {
		f(c.st)
		return
	}
	c.waiters = append(c.waiters, f)
}

// ExecSync implements agent.ContainerManager: every command succeeds in a running container.
func (r *Runtime) ExecSync(_ context.Context, id agent.ContainerID, cmd []string, _ time.Duration) (agent.ExecResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return agent.ExecResult{}, fmt.Errorf("exec in %s: %w", id, agent.ErrNotFound)
	}
	if c.st.State != agent.StateRunning {
		return agent.ExecResult{}, fmt.Errorf("exec in %s: container not running", id)
	}
	return agent.ExecResult{ExitCode: 0}, nil
}

// ContainerLogs implements agent.ContainerManager.
func (r *Runtime) ContainerLogs(_ context.Context, id agent.ContainerID, w io.Writer, opts agent.LogOptions) error {
	r.mu.Lock()
	c, ok := r.containers[id]
	var lines []string
	if ok {
		lines = append(lines, c.log...)
	}
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("logs of %s: %w", id, agent.ErrNotFound)
	}
	if n := opts.TailLines; n > 0 && int64(len(lines)) > n {
		lines = lines[int64(len(lines))-n:]
	}
	for _, l := range lines {
		if _, err := io.WriteString(w, l+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// Probe implements agent.Prober: the fake's pod IPs are not reachable, so it answers itself.
func (r *Runtime) Probe(_ context.Context, t agent.ProbeTarget, _ *pb.Probe) agent.ProbeResult {
	if r.cfg.Probe != nil {
		return r.cfg.Probe(t)
	}
	return agent.ProbeResult{Success: true}
}

// IPsInUse reports how many pod IPs are allocated.
func (r *Runtime) IPsInUse() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ipam.byOwner)
}

// Running reports how many containers are running.
func (r *Runtime) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.containers {
		if c.st.State == agent.StateRunning {
			n++
		}
	}
	return n
}

func (r *Runtime) exit(id agent.ContainerID, code int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.containers[id]; ok {
		r.exitLocked(c, code, "")
	}
}

func (r *Runtime) exitLocked(c *container, code int32, reason string) {
	if c.st.State == agent.StateExited {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.st.State = agent.StateExited
	c.st.ExitCode = code
	c.st.Reason = reason
	c.st.FinishedAt = r.cfg.Now()
	c.log = append(c.log, fmt.Sprintf("exited with code %d", code))
	for _, f := range c.waiters {
		f(c.st)
	}
	c.waiters = nil
}

// behaviour is what a container does once started.
type behaviour struct {
	exits  bool
	code   int32
	sleeps bool
	sleep  time.Duration
}

var (
	exitRe  = regexp.MustCompile(`(?:^|[\s;&|])exit\s+(\d+)\s*$`)
	sleepRe = regexp.MustCompile(`(?:^|[\s;&|])sleep\s+(\d+(?:\.\d+)?)\s*$`)
)

func behaviourOf(c *pb.Container) behaviour {
	line := strings.TrimSpace(strings.Join(append(append([]string{}, c.GetCommand()...), c.GetArgs()...), " "))
	if m := exitRe.FindStringSubmatch(line); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 32)
		if err == nil {
			return behaviour{exits: true, code: int32(n)}
		}
	}
	if m := sleepRe.FindStringSubmatch(line); m != nil {
		f, err := strconv.ParseFloat(m[1], 64)
		if err == nil {
			return behaviour{sleeps: true, sleep: time.Duration(f * float64(time.Second))}
		}
	}
	return behaviour{}
}

// ipam hands out addresses of a CIDR like CNI's host-local plugin: round-robin from the last
// allocation, so a freed address is reused once the range wraps (or at once when it is the only free one).
type ipam struct {
	first, last netip.Addr // usable range
	cursor      netip.Addr // last allocated
	byAddr      map[netip.Addr]string
	byOwner     map[string]netip.Addr
}

func newIPAM(cidr string) (*ipam, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod cidr %q: %w", cidr, err)
	}
	p = p.Masked()
	if !p.Addr().Is4() || p.Bits() > 30 {
		return nil, fmt.Errorf("pod cidr %q: need an IPv4 range of at least 4 addresses", cidr)
	}
	network := p.Addr()
	size := uint32(1) << (32 - p.Bits())
	first := network.Next().Next()   // .0 is the network, .1 the gateway
	last := addrAdd(network, size-2) // broadcast excluded
	return &ipam{
		first: first, last: last, cursor: last,
		byAddr: map[netip.Addr]string{}, byOwner: map[string]netip.Addr{},
	}, nil
}

func (a *ipam) allocate(owner string) (netip.Addr, error) {
	if ip, ok := a.byOwner[owner]; ok {
		return ip, nil
	}
	ip := a.cursor
	for {
		ip = ip.Next()
		if ip.Compare(a.last) > 0 {
			ip = a.first
		}
		if _, used := a.byAddr[ip]; !used {
			a.byAddr[ip] = owner
			a.byOwner[owner] = ip
			a.cursor = ip
			return ip, nil
		}
		if ip == a.cursor {
			return netip.Addr{}, ErrIPsExhausted
		}
	}
}

func (a *ipam) release(owner string) {
	if ip, ok := a.byOwner[owner]; ok {
		delete(a.byOwner, owner)
		delete(a.byAddr, ip)
	}
}

func addrAdd(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
