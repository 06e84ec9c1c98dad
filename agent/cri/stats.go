package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/internal/nodestats"
)

// Usage and node identity, as the kubelet's cadvisor reads them: each running container's cgroup
// through its task's metrics (cgroup v1 or v2, whichever the machine runs), the machine from /proc
// and the filesystems of the state dir and of containerd's root.

var (
	_ agent.StatsProvider    = (*Runtime)(nil)
	_ agent.HostInfoProvider = (*Runtime)(nil)
)

// ErrMetrics is returned for task metrics of a kind this runtime does not know.
var ErrMetrics = errors.New("unexpected task metrics")

// cgroupUsage is a container's cumulative CPU time and working set from its task metrics: usage minus
// inactive file pages, as the kubelet computes the working set.
func cgroupUsage(data any) (cpuNanos, workingSet uint64, err error) {
	var usage, inactive uint64
	switch m := data.(type) {
	case *v1.Metrics:
		cpuNanos = m.GetCPU().GetUsage().GetTotal()
		usage, inactive = m.GetMemory().GetUsage().GetUsage(), m.GetMemory().GetTotalInactiveFile()
	case *v2.Metrics:
		cpuNanos = m.GetCPU().GetUsageUsec() * 1000
		usage, inactive = m.GetMemory().GetUsage(), m.GetMemory().GetInactiveFile()
	default:
		return 0, 0, fmt.Errorf("%w: %T", ErrMetrics, data)
	}
	if inactive < usage {
		workingSet = usage - inactive
	}
	return cpuNanos, workingSet, nil
}

// Stats implements agent.StatsProvider.
func (r *Runtime) Stats(ctx context.Context) (agent.NodeStats, error) {
	st := agent.NodeStats{Time: time.Now()}
	var err error
	if st.CPUNanos, err = nodestats.ReadCPUNanos("/"); err != nil {
		return st, err
	}
	mem, err := nodestats.ReadMemory("/")
	if err != nil {
		return st, err
	}
	st.MemoryBytes = mem.Total - min(mem.Available, mem.Total)
	st.Signals.MemoryAvailable, st.Signals.MemoryCapacity = int64(mem.Available), int64(mem.Total)
	if fs, err := nodestats.ReadFS(r.cfg.StateDir); err == nil {
		st.Signals.NodeFSAvailable, st.Signals.NodeFSCapacity = int64(fs.AvailableBytes), int64(fs.Bytes)
		st.Signals.InodesFree, st.Signals.Inodes = int64(fs.InodesAvailable), int64(fs.Inodes)
	}
	if fs, err := nodestats.ReadFS(r.imageFSPath()); err == nil {
		st.Signals.ImageFSAvailable, st.Signals.ImageFSCapacity = int64(fs.AvailableBytes), int64(fs.Bytes)
	}
	if p, err := nodestats.ReadPIDs("/"); err == nil && p.Max > 0 {
		st.Signals.PIDAvailable, st.Signals.PIDCapacity = int64(p.Max)-int64(p.Running), int64(p.Max)
	}

	byUID, err := r.podContainers(ctx, "")
	if err != nil {
		return st, err
	}
	for uid, cs := range byUID {
		for _, c := range cs {
			cstat, ok, err := r.containerStats(ctx, c)
			if err != nil {
				r.log.Debug("container stats", "container", c.ID(), "err", err)
				continue
			}
			if ok {
				cstat.PodUID = uid
				st.Containers = append(st.Containers, cstat)
			}
		}
	}
	return st, nil
}

// containerStats samples one container; ok is false when it has no running task.
func (r *Runtime) containerStats(ctx context.Context, c containerd.Container) (agent.ContainerStats, bool, error) {
	info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
	if err != nil {
		return agent.ContainerStats{}, false, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return agent.ContainerStats{}, false, nil
	}
	if err != nil {
		return agent.ContainerStats{}, false, err
	}
	m, err := task.Metrics(ctx)
	if errdefs.IsNotFound(err) {
		return agent.ContainerStats{}, false, nil
	}
	if err != nil {
		return agent.ContainerStats{}, false, fmt.Errorf("metrics of %s: %w", c.ID(), err)
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return agent.ContainerStats{}, false, fmt.Errorf("metrics of %s: %w", c.ID(), err)
	}
	cpu, ws, err := cgroupUsage(data)
	if err != nil {
		return agent.ContainerStats{}, false, err
	}
	return agent.ContainerStats{
		ID: agent.ContainerID(c.ID()), Name: info.Labels[LabelContainerName],
		CPUNanos: cpu, MemoryWorkingSet: ws, StartedAt: parseTime(info.Labels[labelStartedAt]),
	}, true, nil
}

// imageFSPath is where images live: containerd's root, taken as the default one; the state dir when
// that is absent.
func (r *Runtime) imageFSPath() string {
	if _, err := os.Stat(containerdRoot); err == nil {
		return containerdRoot
	}
	return r.cfg.StateDir
}

const containerdRoot = "/var/lib/containerd"

// HostInfo implements agent.HostInfoProvider.
func (r *Runtime) HostInfo(context.Context) (agent.HostInfo, error) {
	hi := agent.HostInfo{KernelVersion: nodestats.KernelVersion("/"), OSImage: nodestats.OSImage("/")}
	hi.Hostname, _ = os.Hostname()
	ip, err := nodestats.InternalIP()
	if err != nil {
		r.log.Warn("no address from the default route", "err", err)
	}
	hi.InternalIP = ip
	if err := checkPlugins(r.cfg.CNIBinDirs); err != nil {
		hi.NetworkReady = err
	} else if r.net == nil {
		hi.NetworkReady = fmt.Errorf("%w: no CNI network configuration", ErrUnavailable)
	}
	return hi, nil
}
