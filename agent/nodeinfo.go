package agent

import (
	"context"
	"runtime"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// HostInfoProvider is a runtime on a real machine (agent/cri): it tells the node's identity and
// whether the pod network is in place, for the node's status.
type HostInfoProvider interface {
	HostInfo(ctx context.Context) (HostInfo, error)
}

// HostInfo is a real node's identity.
type HostInfo struct {
	InternalIP    string // the default-route interface's address; "" if none
	Hostname      string
	KernelVersion string
	OSImage       string
	// NetworkReady is nil when the pod network (CNI configuration and plugins) is set up.
	NetworkReady error
}

// learnHost reads the runtime's host information once, before anything runs: the node's address
// (unless Config.HostIP was given) and its system info.
func (a *Agent) learnHost(ctx context.Context) error {
	hp, ok := a.rt.(HostInfoProvider)
	if !ok {
		return nil
	}
	hi, err := hp.HostInfo(ctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.host = &hi
	if !a.hostIPSet && hi.InternalIP != "" {
		a.cfg.HostIP = hi.InternalIP
	}
	return nil
}

// hostDetails are the node's addresses, system info and network condition for its status.
func (a *Agent) hostDetails(cond func(typ, status, reason, msg string) *pb.NodeCondition) ([]*pb.NodeAddress, *pb.NodeSystemInfo, *pb.NodeCondition) {
	a.mu.Lock()
	hi := a.host
	a.mu.Unlock()
	hostname := a.cfg.Node
	info := &pb.NodeSystemInfo{
		KubeletVersion:          KubeletVersion,
		ContainerRuntimeVersion: a.runtimeVersion,
		OperatingSystem:         "linux",
		Architecture:            runtime.GOARCH,
		OsImage:                 "podbus",
	}
	var network *pb.NodeCondition
	if hi != nil {
		if hi.Hostname != "" {
			hostname = hi.Hostname
		}
		info.KernelVersion, info.OsImage = hi.KernelVersion, hi.OSImage
		if hi.NetworkReady == nil {
			network = cond(CondNetworkUnavailable, podutil.False, "PodNetworkReady", "the pod network (CNI bridge) is set up")
		} else {
			network = cond(CondNetworkUnavailable, podutil.True, "PodNetworkNotReady", hi.NetworkReady.Error())
		}
	}
	addrs := []*pb.NodeAddress{
		{Type: "InternalIP", Address: a.cfg.HostIP},
		{Type: "Hostname", Address: hostname},
	}
	return addrs, info, network
}
