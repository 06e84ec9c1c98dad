package cri

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/pkg/netns"
)

// LegacyNetNSDir is where runtimes before per-node netns dirs mounted the pods' network namespaces
// (shared by every node, so nobody could tell its own leftovers there). Records naming a netns there
// still work: the record holds the full path.
const LegacyNetNSDir = "/var/run/netns"

// NetNSDir is the directory of a node's pod network namespaces (StateDir/netns): bind mounts of the
// namespaces, opened by path by the CNI plugins and runc, as under /var/run/netns.
//
// It is the node's own so that New can sweep it: RunSandbox creates the netns before the record that
// names it, and an agent killed in between leaves a netns nothing refers to. Writing the record first
// would not close the window (the netns name is random and chosen at creation); sweeping every netns of
// the node that no record names does, whatever the step the agent died at.
func NetNSDir(stateDir string) string { return filepath.Join(stateDir, "netns") }

// sweepNetNS unmounts and removes every netns in the node's netns dir that no sandbox record names.
// Only New calls it, before the runtime makes any sandbox, so no netns can be between its creation and
// its record then. A record that cannot be read stops the sweep: the netns it names is unknown.
func sweepNetNS(stateDir string, log *slog.Logger) error {
	named := map[string]bool{}
	entries, err := os.ReadDir(sandboxDir(stateDir))
	if err != nil {
		return fmt.Errorf("sweep netns: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		var rec sandboxRecord
		b, err := os.ReadFile(filepath.Join(sandboxDir(stateDir), e.Name()))
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil {
			log.Warn("netns not swept: unreadable sandbox record", "file", e.Name(), "err", err)
			return nil
		}
		named[filepath.Clean(rec.NetNS)] = true
	}
	dir := NetNSDir(stateDir)
	nss, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep netns: %w", err)
	}
	for _, e := range nss {
		path := filepath.Join(dir, e.Name())
		if named[path] {
			continue
		}
		// Remove also takes a mount point that was never mounted (killed between the file and the bind mount).
		if err := netns.LoadNetNS(path).Remove(); err != nil {
			return fmt.Errorf("sweep netns %s: %w", path, err)
		}
		log.Info("removed a netns no sandbox record names", "netns", path)
	}
	return nil
}
