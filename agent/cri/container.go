package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// LabelNode marks the containers of one node, so agents sharing a containerd namespace keep apart.
const LabelNode = "io.podbus.node"

// logPath is where attempt of container name of pod uid writes its stdout and stderr.
func (r *Runtime) logPath(uid, name string, attempt int32) string {
	return filepath.Join(r.cfg.StateDir, "logs", uid, name, strconv.Itoa(int(attempt))+".log")
}

// CreateContainer implements agent.ContainerManager: an OCI spec from the image and the pod spec, and a
// fresh snapshot of the image as its root filesystem. The task is created by StartContainer.
func (r *Runtime) CreateContainer(ctx context.Context, sb agent.Sandbox, c *pb.Container, attempt int32) (_ agent.ContainerID, retErr error) {
	rec, err := r.loadRecord(sb.PodUID)
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", c.GetName(), err)
	}
	if rec.ID != sb.ID {
		return "", fmt.Errorf("create container %s: sandbox %s: %w", c.GetName(), sb.ID, agent.ErrNotFound)
	}
	ref, err := normalizeImage(c.GetImage())
	if err != nil {
		return "", err
	}
	image, err := r.client.GetImage(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("create container %s: image %s: %w", c.GetName(), ref, err)
	}
	imgSpec, err := image.Spec(ctx)
	if err != nil {
		return "", fmt.Errorf("create container %s: image config of %s: %w", c.GetName(), ref, err)
	}
	args := containerArgs(c, imgSpec.Config.Entrypoint, imgSpec.Config.Cmd)
	if len(args) == 0 {
		return "", fmt.Errorf("create container %s: no command specified and the image has none", c.GetName())
	}
	var env []string
	for _, e := range c.GetEnv() {
		env = append(env, e.GetName()+"="+e.GetValue())
	}
	podOpts, err := r.podSpecOpts(rec, c, imgSpec.Config.User)
	if err != nil {
		return "", err
	}
	opts := []oci.SpecOpts{
		oci.WithImageConfig(image),
		oci.WithProcessArgs(args...),
		oci.WithEnv(env),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: rec.NetNS}),
	}
	if wd := c.GetWorkingDir(); wd != "" {
		opts = append(opts, oci.WithProcessCwd(wd))
	}
	opts = append(opts, resourceOpts(c.GetResources())...)
	mounts, err := r.volumeMounts(rec.PodUID, c)
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", c.GetName(), err)
	}
	opts = append(opts, oci.WithMounts(mounts))
	opts = append(opts, podOpts...)

	id := newID()
	labels := map[string]string{
		LabelNode:          r.cfg.NodeName,
		LabelPodUID:        rec.PodUID,
		LabelPodName:       rec.Name,
		LabelPodNamespace:  rec.Namespace,
		LabelSandboxID:     rec.ID,
		LabelContainerName: c.GetName(),
		LabelAttempt:       strconv.Itoa(int(attempt)),
		labelImage:         c.GetImage(),
		labelImageRef:      image.Name() + "@" + image.Target().Digest.String(),
		labelLogPath:       r.logPath(rec.PodUID, c.GetName(), attempt),
		labelTTY:           strconv.FormatBool(c.GetTty()),
		labelStdin:         stdinMode(c),
	}
	_, err = r.client.NewContainer(ctx, id,
		containerd.WithImage(image),
		containerd.WithNewSnapshot(id, image),
		containerd.WithContainerLabels(labels),
		containerd.WithNewSpec(opts...),
	)
	if err != nil {
		// The snapshot is made before the container record; do not leave it behind.
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		if rerr := r.client.SnapshotService(defaults.DefaultSnapshotter).Remove(cctx, id); rerr != nil && !errdefs.IsNotFound(rerr) {
			r.log.Warn("undo snapshot", "container", id, "err", rerr)
		}
		return "", fmt.Errorf("create container %s of pod %s/%s: %w", c.GetName(), rec.Namespace, rec.Name, err)
	}
	return agent.ContainerID(id), nil
}

// containerArgs resolves the process arguments like Kubernetes: command replaces the image's Entrypoint,
// args replace its Cmd (and a command without args drops the image's Cmd).
func containerArgs(c *pb.Container, entrypoint, cmd []string) []string {
	switch {
	case len(c.GetCommand()) > 0:
		return append(append([]string{}, c.GetCommand()...), c.GetArgs()...)
	case len(c.GetArgs()) > 0:
		return append(append([]string{}, entrypoint...), c.GetArgs()...)
	default:
		return append(append([]string{}, entrypoint...), cmd...)
	}
}

// resourceOpts maps requests and limits to cgroup settings as the kubelet does: cpu shares from the
// cpu request (2 for none), CFS quota from the cpu limit over a 100ms period, memory limit.
func resourceOpts(res *pb.ResourceRequirements) []oci.SpecOpts {
	req, lim := podutil.Parse(res.GetRequests()), podutil.Parse(res.GetLimits())
	reqCPU := req.GetMilliCpu()
	if reqCPU == 0 {
		reqCPU = lim.GetMilliCpu() // the API defaults a missing request to the limit
	}
	shares := uint64(max(reqCPU*1024/1000, 2))
	opts := []oci.SpecOpts{oci.WithCPUShares(shares)}
	if m := lim.GetMilliCpu(); m > 0 {
		const period = 100000
		opts = append(opts, oci.WithCPUCFS(max(m*period/1000, 1000), period))
	}
	if m := lim.GetMemory(); m > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(m)))
	}
	return opts
}

func (r *Runtime) load(ctx context.Context, id agent.ContainerID, what string) (containerd.Container, error) {
	c, err := r.client.LoadContainer(ctx, string(id))
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%s %s: %w", what, id, agent.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, id, err)
	}
	return c, nil
}

// StartContainer implements agent.ContainerManager: a task whose output the shim appends to the
// container's log file (so logging goes on while the agent is down), then started.
func (r *Runtime) StartContainer(ctx context.Context, id agent.ContainerID) (retErr error) {
	c, err := r.load(ctx, id, "start container")
	if err != nil {
		return err
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	logPath := labels[labelLogPath]
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return fmt.Errorf("start container %s: log dir: %w", id, err)
	}
	creator, afterStart, cleanup, err := r.taskIO(logPath, labels[labelTTY] == "true")
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	if creator, err = r.stdinCreator(string(id), labels[labelStdin], creator); err != nil {
		cleanup()
		return fmt.Errorf("start container %s: %w", id, err)
	}
	task, err := c.NewTask(ctx, creator)
	if err != nil {
		cleanup()
		return fmt.Errorf("start container %s: create task: %w", id, err)
	}
	afterStart(task)
	defer func() {
		if retErr != nil {
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			if _, err := task.Delete(cctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
				r.log.Warn("undo task", "container", id, "err", err)
			}
		}
	}()
	if err := task.Start(ctx); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	if _, err := c.SetLabels(ctx, map[string]string{labelStartedAt: formatTime(time.Now())}); err != nil {
		return fmt.Errorf("start container %s: record start: %w", id, err)
	}
	return nil
}

// StopContainer implements agent.ContainerManager: SIGTERM, SIGKILL after grace, then the exit is
// recorded and the task deleted.
func (r *Runtime) StopContainer(ctx context.Context, id agent.ContainerID, grace time.Duration) error {
	c, err := r.load(ctx, id, "stop container")
	if err != nil {
		return err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil // never started, or exited and reaped
	}
	if err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	st, err := task.Status(ctx)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	if err == nil && st.Status != containerd.Stopped {
		exited, err := task.Wait(ctx)
		if err != nil {
			return fmt.Errorf("stop container %s: wait: %w", id, err)
		}
		kill := func(sig syscall.Signal) error {
			if err := task.Kill(ctx, sig, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("stop container %s: signal %v: %w", id, sig, err)
			}
			return nil
		}
		sig := syscall.SIGKILL
		if grace > 0 {
			sig = syscall.SIGTERM
		}
		if err := kill(sig); err != nil {
			return err
		}
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-exited:
		case <-ctx.Done():
			return fmt.Errorf("stop container %s: %w", id, ctx.Err())
		case <-timer.C:
			if err := kill(syscall.SIGKILL); err != nil {
				return err
			}
			select {
			case <-exited:
			case <-ctx.Done():
				return fmt.Errorf("stop container %s: %w", id, ctx.Err())
			}
		}
	}
	// The process is gone: record it even if the caller stops caring now (a probe's context ends
	// as soon as the exit is seen elsewhere).
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	return r.reap(cctx, c, task)
}

// reap copies a stopped task's exit into the container's labels, then deletes the task (and with it
// the shim). Idempotent: a later reaper finds no task.
func (r *Runtime) reap(ctx context.Context, c containerd.Container, task containerd.Task) error {
	// One reaper at a time: a second Delete while the first one stops the shim fails ("ttrpc: closed").
	unlock := r.lock("ctr/" + c.ID())
	defer unlock()
	st, err := task.Status(ctx)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("status of container %s: %w", c.ID(), err)
	}
	if st.Status != containerd.Stopped {
		return nil
	}
	finished := st.ExitTime
	if finished.IsZero() {
		finished = time.Now()
	}
	exit := map[string]string{
		labelExitCode:   strconv.FormatUint(uint64(st.ExitStatus), 10),
		labelFinishedAt: formatTime(finished),
	}
	if st.ExitStatus != 0 && oomKilled(ctx, task) {
		exit[labelReason] = reasonOOMKilled
	}
	if _, err := c.SetLabels(ctx, exit); err != nil {
		return fmt.Errorf("record exit of container %s: %w", c.ID(), err)
	}
	if _, err := task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete task of container %s: %w", c.ID(), err)
	}
	return nil
}

// RemoveContainer implements agent.ContainerManager: task (killed if still there), container, snapshot.
func (r *Runtime) RemoveContainer(ctx context.Context, id agent.ContainerID) error {
	c, err := r.client.LoadContainer(ctx, string(id))
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	return r.remove(ctx, c)
}

func (r *Runtime) remove(ctx context.Context, c containerd.Container) error {
	unlock := r.lock("ctr/" + c.ID())
	defer unlock()
	if task, err := c.Task(ctx, nil); err == nil {
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove container %s: delete task: %w", c.ID(), err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", c.ID(), err)
	}
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", c.ID(), err)
	}
	r.removeStdin(c.ID())
	return nil
}

// podContainers lists this node's containers of pod uid, or of every pod when uid is "", by pod uid.
func (r *Runtime) podContainers(ctx context.Context, uid string) (map[string][]containerd.Container, error) {
	filter := fmt.Sprintf("labels.%q==%q", LabelNode, r.cfg.NodeName)
	if uid != "" {
		filter += fmt.Sprintf(",labels.%q==%q", LabelPodUID, uid)
	}
	cs, err := r.client.Containers(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := map[string][]containerd.Container{}
	for _, c := range cs {
		info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.ID(), err)
		}
		u := info.Labels[LabelPodUID]
		out[u] = append(out[u], c)
	}
	return out, nil
}

func (r *Runtime) removePodContainers(ctx context.Context, uid string) error {
	byUID, err := r.podContainers(ctx, uid)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range byUID[uid] {
		errs = append(errs, r.remove(ctx, c))
	}
	return errors.Join(errs...)
}

// ContainerStatus implements agent.ContainerManager.
func (r *Runtime) ContainerStatus(ctx context.Context, id agent.ContainerID) (agent.ContainerStatus, error) {
	c, err := r.load(ctx, id, "container status")
	if err != nil {
		return agent.ContainerStatus{}, err
	}
	return r.status(ctx, c)
}

// status is a container's status from its labels and its task. A stopped task is reaped on the way.
func (r *Runtime) status(ctx context.Context, c containerd.Container) (agent.ContainerStatus, error) {
	info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
	if err != nil {
		return agent.ContainerStatus{}, fmt.Errorf("container %s: %w", c.ID(), err)
	}
	st := statusFromLabels(c.ID(), info.Labels, info.CreatedAt)
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return st, nil
	}
	if err != nil {
		return agent.ContainerStatus{}, fmt.Errorf("task of container %s: %w", c.ID(), err)
	}
	ts, err := task.Status(ctx)
	if errdefs.IsNotFound(err) {
		return r.refreshed(ctx, c)
	}
	if err != nil {
		return agent.ContainerStatus{}, fmt.Errorf("task of container %s: %w", c.ID(), err)
	}
	switch ts.Status {
	case containerd.Running, containerd.Paused, containerd.Pausing:
		st.State = agent.StateRunning
		if st.StartedAt.IsZero() {
			st.StartedAt = time.Now() // started, label not yet written
		}
	case containerd.Created:
		st.State = agent.StateCreated
	case containerd.Stopped:
		if err := r.reap(ctx, c, task); err != nil {
			return agent.ContainerStatus{}, err
		}
		return r.refreshed(ctx, c)
	default:
		st.State = agent.StateUnknown
	}
	return st, nil
}

func (r *Runtime) refreshed(ctx context.Context, c containerd.Container) (agent.ContainerStatus, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return agent.ContainerStatus{}, fmt.Errorf("container %s: %w", c.ID(), err)
	}
	return statusFromLabels(c.ID(), info.Labels, info.CreatedAt), nil
}

// statusFromLabels is the status of a container without a task: Created if it never started, Exited
// with the recorded exit otherwise (Unknown exit 255 if the task vanished without one, e.g. a reboot).
func statusFromLabels(id string, l map[string]string, created time.Time) agent.ContainerStatus {
	attempt, _ := strconv.Atoi(l[LabelAttempt])
	st := agent.ContainerStatus{
		ID: agent.ContainerID(id), Name: l[LabelContainerName], Attempt: int32(attempt),
		Image: l[labelImage], ImageRef: l[labelImageRef], CreatedAt: created,
		StartedAt: parseTime(l[labelStartedAt]), FinishedAt: parseTime(l[labelFinishedAt]),
		State: agent.StateCreated,
	}
	if code, ok := l[labelExitCode]; ok {
		n, _ := strconv.Atoi(code)
		st.State, st.ExitCode, st.Reason = agent.StateExited, int32(n), l[labelReason]
	} else if !st.StartedAt.IsZero() {
		st.State, st.ExitCode, st.Reason = agent.StateExited, 255, "Unknown"
		st.Message = "the container's task is gone without a recorded exit"
	}
	return st
}

// WaitContainer implements agent.ContainerManager.
func (r *Runtime) WaitContainer(ctx context.Context, id agent.ContainerID) (<-chan agent.ContainerStatus, error) {
	c, err := r.load(ctx, id, "wait container")
	if err != nil {
		return nil, err
	}
	ch := make(chan agent.ContainerStatus, 1)
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		st, err := r.status(ctx, c)
		if err != nil {
			return nil, err
		}
		if st.State != agent.StateExited {
			return nil, fmt.Errorf("wait container %s: not started", id)
		}
		ch <- st
		return ch, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wait container %s: %w", id, err)
	}
	exited, err := task.Wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("wait container %s: %w", id, err)
	}
	go func() {
		select {
		case <-exited:
		case <-ctx.Done():
			return
		}
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			cctx, cancel := cleanupContext(ctx)
			err := r.reap(cctx, c, task)
			var st agent.ContainerStatus
			if err == nil {
				st, err = r.refreshed(cctx, c)
			}
			cancel()
			if err == nil {
				ch <- st
				return
			}
			r.log.Warn("record container exit", "container", id, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}()
	return ch, nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}
