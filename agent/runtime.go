package agent

import (
	"context"
	"errors"
	"io"
	"time"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The container runtime, as the agent sees it. The roles mirror the CRI (RuntimeService and
// ImageService) closely enough that a containerd + CNI implementation fits without the agent changing:
// RunSandbox creates the network namespace and runs CNI ADD, CheckSandbox is CNI CHECK, RemoveSandbox
// is CNI DEL plus teardown. Probes over the network (http, tcp) are run by the agent against the pod IP;
// exec probes go through ExecSync. A runtime whose pods are not reachable (the fake) can answer probes
// itself by also implementing Prober.

// Runtime is everything the agent needs from a container runtime.
type Runtime interface {
	SandboxManager
	ImageManager
	ContainerManager
	// Version is the runtime's name and version as shown in node info ("containerd://1.7.24").
	Version(ctx context.Context) (string, error)
}

// SandboxManager manages pod sandboxes: the network namespace and the pod's IP.
type SandboxManager interface {
	// RunSandbox creates the pod's sandbox and attaches it to the pod network (CNI ADD).
	// It is idempotent: a sandbox that already exists for the pod's uid is returned as is.
	RunSandbox(ctx context.Context, pod *pb.Pod) (Sandbox, error)
	// CheckSandbox verifies the sandbox's network is still in place (CNI CHECK).
	CheckSandbox(ctx context.Context, sb Sandbox) error
	// RemoveSandbox removes the sandbox and every container in it and releases its IP (CNI DEL).
	// Removing a sandbox that does not exist is not an error.
	RemoveSandbox(ctx context.Context, sb Sandbox) error
	// ListSandboxes lists what exists, with the containers of each sandbox, for reconciliation.
	ListSandboxes(ctx context.Context) ([]SandboxInfo, error)
}

// ImageManager makes images available.
type ImageManager interface {
	// PullImage makes image present according to policy (Always, IfNotPresent, Never) and reports
	// whether it had to pull. ErrImageNeverPull when policy is Never and the image is absent.
	PullImage(ctx context.Context, image, policy string) (pulled bool, err error)
}

// ContainerManager manages containers inside sandboxes.
type ContainerManager interface {
	// CreateContainer creates (does not start) container c of the pod in sb. attempt is the restart count.
	CreateContainer(ctx context.Context, sb Sandbox, c *pb.Container, attempt int32) (ContainerID, error)
	// StartContainer starts a created container.
	StartContainer(ctx context.Context, id ContainerID) error
	// StopContainer stops a container, killing it after grace. Stopping an exited container is a no-op.
	StopContainer(ctx context.Context, id ContainerID, grace time.Duration) error
	// RemoveContainer removes an exited container.
	RemoveContainer(ctx context.Context, id ContainerID) error
	// ContainerStatus returns the container's current status; ErrNotFound if it does not exist.
	ContainerStatus(ctx context.Context, id ContainerID) (ContainerStatus, error)
	// WaitContainer returns a channel that delivers the container's final status once it exited.
	// The channel is never closed without a value unless ctx ends.
	WaitContainer(ctx context.Context, id ContainerID) (<-chan ContainerStatus, error)
	// ExecSync runs cmd in the container and returns its exit code and output.
	ExecSync(ctx context.Context, id ContainerID, cmd []string, timeout time.Duration) (ExecResult, error)
	// ContainerLogs writes the container's log to w.
	ContainerLogs(ctx context.Context, id ContainerID, w io.Writer, opts LogOptions) error
}

// ExitNotifier is implemented by a runtime that calls back on a container's exit instead of handing
// out a channel to wait on. The simulated runtime does: it runs many nodes' pods in one process, and a
// goroutine parked per running container is what every collection of that process scans.
type ExitNotifier interface {
	// NotifyExit calls f once with the container's final status when it exits, at once when it already
	// has; ErrNotFound when there is no such container. f may run with the runtime's lock held: it must
	// not block or call the runtime.
	NotifyExit(id ContainerID, f func(ContainerStatus)) error
}

// Prober runs one probe attempt. The agent has a network prober; a runtime may provide its own.
type Prober interface {
	Probe(ctx context.Context, t ProbeTarget, p *pb.Probe) ProbeResult
}

// Runtime errors. Implementations wrap them so that the agent can tell them apart with errors.Is.
var (
	// ErrNotFound: the sandbox or container does not exist.
	ErrNotFound = errors.New("not found")
	// ErrImageNeverPull: the image is absent and the pull policy is Never.
	ErrImageNeverPull = errors.New("image not present with pull policy Never")
	// ErrImagePull: the image could not be pulled.
	ErrImagePull = errors.New("image pull failed")
	// ErrContainerConfig: the container's spec cannot be applied (CreateContainerConfigError).
	ErrContainerConfig = errors.New("container config error")
)

// ContainerID is the runtime's id of a container.
type ContainerID string

// Sandbox is a pod's sandbox: its identity and its network.
type Sandbox struct {
	ID        string
	PodUID    string
	Namespace string
	Name      string
	IP        string
	IPs       []string
	CreatedAt time.Time
}

// SandboxInfo is a sandbox with its containers, as listed by the runtime.
type SandboxInfo struct {
	Sandbox
	Containers []ContainerStatus
}

// ContainerState is the lifecycle state of a runtime container.
type ContainerState string

// Container states, as in the CRI.
const (
	StateCreated ContainerState = "Created"
	StateRunning ContainerState = "Running"
	StateExited  ContainerState = "Exited"
	StateUnknown ContainerState = "Unknown"
)

// ContainerStatus is what the runtime knows of a container.
type ContainerStatus struct {
	ID         ContainerID
	Name       string // the pod spec's container name
	Attempt    int32
	Image      string
	ImageRef   string
	State      ContainerState
	ExitCode   int32
	Reason     string // runtime's reason for an exit (OOMKilled, ...); empty lets the agent decide
	Message    string
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// ExecResult is the outcome of ExecSync.
type ExecResult struct {
	ExitCode int32
	Output   []byte
}

// LogOptions select part of a container's log.
type LogOptions struct {
	TailLines int64 // 0: everything
	Previous  bool  // the log of the attempt before the given container's (same container name)
}

// ProbeKind is the kind of a probe.
type ProbeKind string

// Probe kinds.
const (
	Readiness ProbeKind = "Readiness"
	Liveness  ProbeKind = "Liveness"
	Startup   ProbeKind = "Startup"
)

// ProbeTarget says what a probe attempt is aimed at.
type ProbeTarget struct {
	Kind        ProbeKind
	PodUID      string
	PodIP       string
	Container   *pb.Container
	ContainerID ContainerID
}

// ProbeResult is the outcome of one probe attempt.
type ProbeResult struct {
	Success bool
	Output  string // why it failed, shown in the Unhealthy event
}
