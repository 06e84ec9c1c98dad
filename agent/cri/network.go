package cri

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// podIfName is the pod's interface inside its netns.
const podIfName = "eth0"

// portMapping is the portmap plugin's runtime config entry (capability portMappings).
type portMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// networkConfig builds the node's CNI network: a bridge of its own (its name derived from the node name,
// so two agents on one machine never share one) with host-local IPAM on the node's pod CIDR, portmap for
// hostPorts, and firewall, which adds the FORWARD accept rules a DROP policy (dockerd sets one) needs.
// The loopback plugin, a network of its own, brings lo up.
func networkConfig(cfg Config) (*libcni.NetworkConfigList, *libcni.PluginConfig, error) {
	prefix, err := netip.ParsePrefix(cfg.PodCIDR)
	if err != nil || !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, nil, fmt.Errorf("pod CIDR %q: need an IPv4 range like 10.244.1.0/24", cfg.PodCIDR)
	}
	short := nodeHash(cfg.NodeName)
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "podbus-" + short,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "pb" + short,
				"isGateway":   true,
				"ipMasq":      true,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": prefix.Masked().String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(cfg.StateDir, "ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
			map[string]any{"type": "firewall"},
		},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, nil, err
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		return nil, nil, fmt.Errorf("CNI network config: %w", err)
	}
	lo, err := libcni.NetworkPluginConfFromBytes([]byte(`{"cniVersion":"1.0.0","name":"podbus-loopback","type":"loopback"}`))
	if err != nil {
		return nil, nil, fmt.Errorf("CNI loopback config: %w", err)
	}
	return list, lo, nil
}

func nodeHash(node string) string {
	sum := sha256.Sum256([]byte(node))
	return hex.EncodeToString(sum[:])[:8]
}

// BridgeFor is the Linux bridge the pods of node attach to (created by CNI ADD of its first pod, left in
// place when the runtime stops: whoever removes the node for good deletes it).
func BridgeFor(node string) string { return "pb" + nodeHash(node) }

// NetworkName is the name of the node's CNI network (host-local keeps its reservations in
// StateDir/ipam/<NetworkName>).
func (r *Runtime) NetworkName() string { return r.net.Name }

// BridgeName is the Linux bridge the node's pods attach to.
func (r *Runtime) BridgeName() string {
	for _, p := range r.net.Plugins {
		if p.Network.Type == "bridge" {
			var c struct {
				Bridge string `json:"bridge"`
			}
			_ = json.Unmarshal(p.Bytes, &c)
			return c.Bridge
		}
	}
	return ""
}

func (r *Runtime) runtimeConf(rec *sandboxRecord, netns string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{
		ContainerID: rec.ID,
		NetNS:       netns,
		IfName:      podIfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", rec.Namespace},
			{"K8S_POD_NAME", rec.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", rec.ID},
			{"K8S_POD_UID", rec.PodUID},
		},
	}
	if len(rec.PortMappings) > 0 {
		rt.CapabilityArgs = map[string]any{"portMappings": rec.PortMappings}
	}
	return rt
}

// setupNetwork runs CNI ADD for lo and the pod network and returns the pod's IPs.
func (r *Runtime) setupNetwork(ctx context.Context, rec *sandboxRecord) (ips []string, retErr error) {
	rt := r.runtimeConf(rec, rec.NetNS)
	// lo and the pod network are independent: bring them up together (lo costs a plugin exec).
	loDone := make(chan error, 1)
	go func() {
		_, err := r.cni.AddNetwork(ctx, r.lo, &libcni.RuntimeConf{ContainerID: rec.ID, NetNS: rec.NetNS, IfName: "lo"})
		loDone <- err
	}()
	res, err := r.cni.AddNetworkList(ctx, r.net, rt)
	loErr := <-loDone
	if err != nil {
		return nil, fmt.Errorf("CNI ADD %s: %w", r.net.Name, err)
	}
	defer func() {
		if retErr != nil {
			dctx, cancel := cleanupContext(ctx)
			defer cancel()
			if err := r.cni.DelNetworkList(dctx, r.net, rt); err != nil {
				r.log.Warn("undo CNI ADD", "sandbox", rec.ID, "err", err)
			}
		}
	}()
	if loErr != nil {
		return nil, fmt.Errorf("CNI ADD loopback: %w", loErr)
	}
	result, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("CNI result: %w", err)
	}
	for _, ip := range result.IPs {
		if ip.Interface != nil && *ip.Interface < len(result.Interfaces) && result.Interfaces[*ip.Interface].Sandbox == "" {
			continue // an address on the host side
		}
		ips = append(ips, ip.Address.IP.String())
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("CNI ADD %s: no IP address in the result", r.net.Name)
	}
	return ips, nil
}

// checkNetwork runs CNI CHECK on the pod network.
func (r *Runtime) checkNetwork(ctx context.Context, rec *sandboxRecord) error {
	if _, err := os.Stat(rec.NetNS); err != nil {
		return fmt.Errorf("netns of sandbox %s: %w", rec.ID, err)
	}
	if err := r.cni.CheckNetworkList(ctx, r.net, r.runtimeConf(rec, rec.NetNS)); err != nil {
		return fmt.Errorf("CNI CHECK %s: %w", r.net.Name, err)
	}
	return nil
}

// teardownNetwork runs CNI DEL, which releases the IP; with the netns already gone the plugins still
// clean up the host side (IPAM, iptables).
func (r *Runtime) teardownNetwork(ctx context.Context, rec *sandboxRecord) error {
	netns := rec.NetNS
	if _, err := os.Stat(netns); err != nil {
		netns = ""
	}
	if err := r.cni.DelNetworkList(ctx, r.net, r.runtimeConf(rec, netns)); err != nil {
		return fmt.Errorf("CNI DEL %s: %w", r.net.Name, err)
	}
	return nil
}
