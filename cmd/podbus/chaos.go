package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/podbus/podbus/chaos"
)

// runChaos is "podbus chaos": the multi-process deployment under seeded faults, then the history
// checker (package chaos). It prints the run's table and fails on any violation.
func runChaos(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	var cfg chaos.Config
	fs.Int64Var(&cfg.Seed, "seed", 0, "chooses the workload and the faults (0: from the clock; the run prints it)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long the workload and the faults run")
	fs.DurationVar(&cfg.FaultEvery, "fault-every", 5*time.Second, "mean time between faults")
	fs.DurationVar(&cfg.Settle, "settle", 2*time.Minute, "how long after the last fault everything must have settled")
	fs.IntVar(&cfg.Pods, "pods", 30, "pods the workload keeps, about")
	fs.BoolVar(&cfg.OpenBus, "open-bus", false, "run NATS without credentials or TLS (default: a credential per role and TLS, as a real deployment)")
	storeMiB := fs.Int64("store-limit", 512, "MiB of the tmpfs on one NATS member's store that the disk-full fault fills (root only)")
	fs.StringVar(&cfg.Containerd, "containerd-address", "", "containerd socket: one agent runs its pods with it (root, the CNI plugins, busybox-static) and the checker holds its containers to the history; empty or off: simulated agents only")
	fs.StringVar(&cfg.Dir, "dir", "", "working directory: NATS storage, process logs, workload.jsonl, faults.jsonl (default: a new temporary one, kept)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.StoreLimit = *storeMiB << 20
	if cfg.Containerd == "off" {
		cfg.Containerd = ""
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano() % 1_000_000
	}
	var err error
	if cfg.Bin, err = os.Executable(); err != nil {
		return err
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", fmt.Sprintf("podbus-chaos-%d-", cfg.Seed)); err != nil {
			return err
		}
	}
	rep, err := chaos.Run(ctx, cfg)
	if werr := chaos.WriteReport(os.Stdout, rep); werr != nil && err == nil {
		err = werr
	}
	return err
}
