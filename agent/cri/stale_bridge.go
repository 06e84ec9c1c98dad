package cri

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
)

// removeStaleBridge deletes the node's bridge when it carries an address outside the node's pod CIDR and no
// pod of this node is recorded: the bridge plugin refuses to reuse a bridge whose address differs ("already
// has an IP address different from ..."), so a node restarted with another CIDR could never run a pod. A
// bridge with recorded pods is left alone; their pods still use it.
func removeStaleBridge(stateDir, bridge, podCIDR string, log *slog.Logger) error {
	iface, err := net.InterfaceByName(bridge)
	if err != nil {
		return nil // no bridge yet
	}
	_, subnet, err := net.ParseCIDR(podCIDR)
	if err != nil {
		return fmt.Errorf("pod CIDR %q: %w", podCIDR, err)
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", bridge, err)
	}
	stale := ""
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if ok && ipn.IP.To4() != nil && !subnet.Contains(ipn.IP) {
			stale = ipn.String()
		}
	}
	if stale == "" {
		return nil
	}
	entries, err := os.ReadDir(sandboxDir(stateDir))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read sandbox records: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			return fmt.Errorf("bridge %s has address %s outside the pod CIDR %s, and pods of this node are still recorded in %s",
				bridge, stale, podCIDR, sandboxDir(stateDir))
		}
	}
	log.Info("removing a bridge left with another pod CIDR", "bridge", bridge, "address", stale, "pod CIDR", podCIDR)
	if out, err := exec.Command("ip", "link", "delete", bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("delete stale bridge %s: %v: %s", bridge, err, strings.TrimSpace(string(out)))
	}
	return nil
}
