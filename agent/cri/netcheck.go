package cri

import (
	"context"
	"fmt"
	"os"

	"github.com/containernetworking/cni/libcni"

	"github.com/podbus/podbus/agent"
)

var _ agent.ConnectivityChecker = (*Runtime)(nil)

// connectivityNet is the node's network reduced to the plugin the pod's connectivity rests on: the
// bridge, which checks the pod's interface, its address and routes, and calls its IPAM's CHECK (the
// reservation). portmap and firewall (iptables rules, which serialize on the xtables lock) are left
// to the full CheckSandbox. The name is the full network's, so CHECK finds the result ADD cached.
func (r *Runtime) connectivityNet() *libcni.NetworkConfigList {
	sub := *r.net
	sub.Plugins = nil
	for _, p := range r.net.Plugins {
		if p.Network.Type == "bridge" {
			sub.Plugins = append(sub.Plugins, p)
		}
	}
	return &sub
}

// CheckSandboxConnectivity implements agent.ConnectivityChecker: CNI CHECK of the bridge and its IPAM.
func (r *Runtime) CheckSandboxConnectivity(ctx context.Context, sb agent.Sandbox) error {
	rec, err := r.startedRecord(sb)
	if err != nil {
		return err
	}
	if _, err := os.Stat(rec.NetNS); err != nil {
		return fmt.Errorf("netns of sandbox %s: %w", rec.ID, err)
	}
	if err := r.cni.CheckNetworkList(ctx, r.connectivityNet(), r.runtimeConf(rec, rec.NetNS)); err != nil {
		return fmt.Errorf("CNI CHECK %s (bridge): %w", r.net.Name, err)
	}
	return nil
}
