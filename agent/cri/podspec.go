package cri

import (
	"context"
	"fmt"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/typeurl/v2"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// reasonOOMKilled is the exit reason of a container the OOM killer ended, as the kubelet shows it.
const reasonOOMKilled = "OOMKilled"

// podSpecOpts are the spec options that come from the pod around the container: its host name, its
// /etc files, the security contexts, and the terminal.
func (r *Runtime) podSpecOpts(rec *sandboxRecord, c *pb.Container, imageUser string) ([]oci.SpecOpts, error) {
	s := rec.settings()
	podRef := fmt.Sprintf("%s_%s(%s)", rec.Name, rec.Namespace, rec.PodUID)
	plan, err := planSecurity(s.GetSecurityContext(), c, imageUser, podRef)
	if err != nil {
		return nil, fmt.Errorf("create container %s: %w", c.GetName(), err)
	}
	hostname, _ := podHostname(rec.Name, rec.Namespace, s)
	opts := []oci.SpecOpts{oci.WithHostname(hostname)}
	if c.GetTty() {
		opts = append(opts, oci.WithTTY)
	}
	if m := r.etcMounts(rec.PodUID, plan.readOnlyRoot); len(m) > 0 {
		opts = append(opts, oci.WithMounts(m))
	}
	return append(opts, plan.opts()...), nil
}

// oomKilled says whether the OOM killer killed a process of the stopped task's cgroup, which lives
// until the task is deleted.
func oomKilled(ctx context.Context, task containerd.Task) bool {
	m, err := task.Metrics(ctx)
	if err != nil || m.Data == nil {
		return false
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return false
	}
	switch st := data.(type) {
	case *v1.Metrics:
		return st.GetMemoryOomControl().GetOomKill() > 0
	case *v2.Metrics:
		return st.GetMemoryEvents().GetOomKill() > 0
	}
	return false
}
