package up

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/podbus/podbus/agent/cri"
)

// DownConfig says what Down tears down: the real nodes `up` ran on DataDir, and DataDir itself.
type DownConfig struct {
	DataDir string // default .podbus
	// ContainerdAddress, ContainerdNamespace and RealNodePodCIDR are those `up` ran its real node with
	// (defaults as up's).
	ContainerdAddress   string
	ContainerdNamespace string
	RealNodePodCIDR     string
	// KeepData removes the real nodes' pods only. Force deletes DataDir even when some pod could not be
	// removed (its records go with it: nothing will find that pod again).
	KeepData bool
	Force    bool
	Logger   *slog.Logger
}

// ErrNodeTeardown is returned when a real node's pods could not all be removed; DataDir is then kept,
// so that Down can be run again, unless DownConfig.Force.
var ErrNodeTeardown = errors.New("real node not torn down")

// Down tears down what `up` leaves behind when it stops: it stops the pods of every real node that ran
// on DataDir (as a kubelet restart would keep them running), runs CNI DEL for them, unmounts and
// removes their network namespaces, deletes the node's bridge, and then deletes DataDir, as k3s's
// killall script and uninstall do. Run it with `up` stopped: a running agent would start pods again.
func Down(ctx context.Context, cfg DownConfig) error {
	if cfg.DataDir == "" {
		cfg.DataDir = ".podbus"
	}
	if cfg.RealNodePodCIDR == "" {
		cfg.RealNodePodCIDR = RealPodCIDR
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	agents := filepath.Join(cfg.DataDir, "agent")
	entries, err := os.ReadDir(agents)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		node, state := e.Name(), filepath.Join(agents, e.Name())
		if err := downNode(ctx, cfg, node, state); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrNodeTeardown, node, err))
		}
	}
	if err := errors.Join(errs...); err != nil && !cfg.Force {
		return err
	}
	if cfg.KeepData {
		return errors.Join(errs...)
	}
	cfg.Logger.Info("removing the data directory", "dir", cfg.DataDir)
	if rerr := os.RemoveAll(cfg.DataDir); rerr != nil {
		errs = append(errs, rerr)
	}
	return errors.Join(errs...)
}

// downNode removes one real node's pods; without containerd it still unmounts their namespaces, and
// says that their containers may be left.
func downNode(ctx context.Context, cfg DownConfig, node, state string) error {
	log := cfg.Logger.With("node", node)
	log.Info("tearing down real node", "state", state)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := cri.Check(cctx, cfg.ContainerdAddress, nil)
	cancel()
	if err != nil {
		return errors.Join(fmt.Errorf("its containers may still run: %w", err), cri.RemoveNetNS(state))
	}
	rt, err := cri.New(ctx, cri.Config{NodeName: node, Address: cfg.ContainerdAddress, Namespace: cfg.ContainerdNamespace,
		PodCIDR: cfg.RealNodePodCIDR, StateDir: state, Logger: cfg.Logger})
	if err != nil {
		return errors.Join(fmt.Errorf("its containers may still run: %w", err), cri.RemoveNetNS(state))
	}
	defer rt.Close()
	return rt.Teardown(ctx)
}
