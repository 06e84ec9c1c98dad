package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/podbus/podbus/internal/hugepages"
)

// defaultMemoryLimit is the soft limit when neither --memory-limit nor GOMEMLIMIT says otherwise, unless
// half the machine's (or the cgroup's) memory is less. A control plane holding Kubernetes' 150,000 pods
// must stay under 4 GiB; below that, the more room the heap has above its live data, the less often
// the GC runs when the cluster is full.
const defaultMemoryLimit = 3584 << 20

var errMemoryLimit = errors.New("invalid memory limit")

// heapFlags shape the Go runtime of a long-running command: its soft memory limit and whether its heap
// asks for transparent huge pages.
type heapFlags struct {
	memLimit  string
	hugePages string
}

func (h *heapFlags) register(fs *flag.FlagSet) {
	memoryLimitFlag(fs, &h.memLimit)
	fs.StringVar(&h.hugePages, "huge-pages", "auto", "back the heap with transparent huge pages where the host's mode is madvise "+
		"(auto; off: leave the heap to the host's mode; see docs/operations.md)")
}

// apply sets the limit, then reserves the heap's huge pages for it: do it before the heap grows.
func (h *heapFlags) apply() error {
	if err := applyMemoryLimit(h.memLimit); err != nil {
		return err
	}
	return reserveHugePages(h.hugePages)
}

// hugePagesOn reads a --huge-pages value.
func hugePagesOn(spec string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(spec)) {
	case "off", "false", "no":
		return false, nil
	case "auto", "", "on", "true":
		return true, nil
	}
	return false, fmt.Errorf("%w: %q (auto or off)", errHugePages, spec)
}

// memoryLimitFlag registers --memory-limit into p ("" means auto as well).
func memoryLimitFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "memory-limit", "auto", "soft memory limit of the Go runtime (e.g. 3GiB, 512Mi, bytes; "+
		"auto: GOMEMLIMIT if set, else 3.5GiB or half the machine's memory if that is less; off: none)")
}

var errHugePages = errors.New("invalid --huge-pages")

// reserveHugePages applies --huge-pages: under auto, the heap is reserved in advised memory for the soft
// limit now in force (internal/hugepages).
func reserveHugePages(spec string) error {
	if on, err := hugePagesOn(spec); !on {
		return err
	}
	n, err := hugepages.Reserve(hugePagesSize(debug.SetMemoryLimit(-1), machineMemory()))
	switch {
	case err == nil:
		slog.Debug("heap reserved in huge pages", "bytes", n)
	case errors.Is(err, hugepages.ErrSkipped):
		slog.Debug("heap not reserved in huge pages", "reason", err)
	default:
		slog.Warn("heap not reserved in huge pages", "reason", err)
	}
	return nil
}

// hugePagesSize is the reservation for a heap under limit (math.MaxInt64, or below one, when there is
// none) on a machine of machine bytes (0 when unknown): the limit, or a quarter of the machine without
// one, never more than half of it, in whole huge pages.
func hugePagesSize(limit, machine int64) int64 {
	const hugePage = 2 << 20
	if limit <= 0 || limit == math.MaxInt64 {
		limit = machine / 4
	}
	if machine > 0 && limit > machine/2 {
		limit = machine / 2
	}
	return limit &^ (hugePage - 1)
}

// applyMemoryLimit sets the Go runtime's soft memory limit for spec (see memoryLimitFlag). The GC target
// stays Go's (GOGC, 100 unless set): a higher one does not make the pipeline faster, and the larger heap
// it grows lengthens the latency tails; the limit, not the target, bounds a full control plane's heap.
func applyMemoryLimit(spec string) error {
	limit, err := memoryLimit(spec, os.Getenv("GOMEMLIMIT"), machineMemory())
	if err != nil {
		return err
	}
	switch {
	case limit > 0:
		debug.SetMemoryLimit(limit)
	case limit == 0:
		debug.SetMemoryLimit(math.MaxInt64)
	}
	return nil
}

// memoryLimit resolves spec: a size wins, "off" is 0 (no limit), "auto" is -1 (keep the runtime's) when
// GOMEMLIMIT is set, else the default capped at half of machine bytes (unknown when 0).
func memoryLimit(spec, gomemlimit string, machine int64) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(spec)) {
	case "off", "none", "0":
		return 0, nil
	case "auto", "":
		if gomemlimit != "" {
			return -1, nil
		}
		limit := int64(defaultMemoryLimit)
		if machine > 0 && machine/2 < limit {
			limit = machine / 2
		}
		return limit, nil
	}
	return parseBytes(spec)
}

// parseBytes reads a size as GOMEMLIMIT writes it (B, KiB, MiB, GiB, TiB) or as a Kubernetes quantity
// (Ki, Mi, Gi, Ti, k, M, G, T), or plain bytes.
func parseBytes(s string) (int64, error) {
	orig := s
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || v*float64(mult) >= math.MaxInt64 {
		return 0, fmt.Errorf("%w: %q (e.g. 3GiB, 512Mi, off)", errMemoryLimit, orig)
	}
	return int64(v * float64(mult)), nil
}

// machineMemory is the memory this process may use: the machine's, or its cgroup's limit when lower;
// 0 when unknown.
func machineMemory() int64 {
	var total int64
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				total = kb << 10
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 && (total == 0 || v < total) {
			total = v
		}
	}
	return total
}
