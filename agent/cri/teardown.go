package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/pkg/netns"
)

// Teardown stops and removes every pod of this node, as k3s's killall script does for its node: each
// recorded sandbox's containers are killed and removed, CNI DEL releases its IP and host-side rules, its
// netns is unmounted and removed; then containers without a record, any netns left, and the node's bridge
// go too. The runtime is unusable for pods afterwards. It goes on past a failing pod and returns every
// failure.
func (r *Runtime) Teardown(ctx context.Context) error {
	var errs []error
	entries, err := os.ReadDir(sandboxDir(r.cfg.StateDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("teardown: %w", err)
	}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		rec, err := r.loadRecord(uid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.log.Info("removing pod", "pod", rec.Namespace+"/"+rec.Name, "sandbox", rec.ID)
		unlock := r.lock(uid)
		err = r.removeSandbox(ctx, rec)
		unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	byUID, err := r.podContainers(ctx, "")
	if err != nil {
		errs = append(errs, err)
	}
	for uid := range byUID {
		if err := r.removePodContainers(ctx, uid); err != nil {
			errs = append(errs, err)
		}
	}
	if err := RemoveNetNS(r.cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	if err := deleteLink(BridgeFor(r.cfg.NodeName)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RemoveNetNS unmounts and removes every network namespace under the node's state dir (NetNSDir),
// whatever the records say: what is left once the pods are gone, or all of them when containerd cannot
// be reached to remove the pods first.
func RemoveNetNS(stateDir string) error {
	dir := NetNSDir(stateDir)
	nss, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove netns: %w", err)
	}
	var errs []error
	for _, e := range nss {
		path := filepath.Join(dir, e.Name())
		if err := netns.LoadNetNS(path).Remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove netns %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}

// deleteLink deletes a network interface if it exists.
func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("delete bridge %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
