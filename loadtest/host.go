package loadtest

import (
	"debug/buildinfo"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/podbus/podbus/internal/hugepages"
)

// hostTHP is this host's transparent huge pages mode ("always", "madvise", "never"; "" when the kernel
// does not say). A control plane holding a few GiB runs measurably faster on huge pages
// (docs/operations.md), so results name the mode they were measured under.
func hostTHP() string { return hugepages.Host() }

// thpNote is the mode as results print it, with how much of the process was in huge pages at the end.
func thpNote(mode string, huge int64) string {
	switch {
	case mode == "":
		return "unknown"
	case huge > 0:
		return fmt.Sprintf("%s (%.2f GiB of the process in huge pages at the end)", mode, float64(huge)/(1<<30))
	case mode == hugepages.ModeNever:
		return mode
	}
	return mode + " (no huge pages: see docs/operations.md)"
}

// The garbage collectors a podbus binary can be built with (Go 1.26): Green Tea, Go's default, and
// the classic one (GOEXPERIMENT=nogreenteagc); results name theirs (docs/operations.md).
const (
	gcGreenTea = "greentea"
	gcClassic  = "classic"
)

// builtGC is the collector this binary was built with ("" when it records no build settings).
func builtGC() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return gcOf(bi)
}

// binaryGC is the collector the binary at path was built with ("" when it cannot be read): the
// envelope's processes may run another binary than the load test (--podbus).
func binaryGC(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return ""
	}
	return gcOf(bi)
}

// gcOf reads the collector from the GOEXPERIMENT a build recorded.
func gcOf(bi *debug.BuildInfo) string {
	var exp string
	for _, s := range bi.Settings {
		if s.Key == "GOEXPERIMENT" {
			exp = s.Value
		}
	}
	return parseGC(exp)
}

// parseGC reads the collector from a GOEXPERIMENT list such as "nogreenteagc,boringcrypto".
func parseGC(experiments string) string {
	for e := range strings.SplitSeq(experiments, ",") {
		if strings.TrimSpace(e) == "nogreenteagc" {
			return gcClassic
		}
	}
	return gcGreenTea
}

// gcNote is the collector as results print it.
func gcNote(kind string) string {
	switch kind {
	case gcClassic:
		return "classic (GOEXPERIMENT=nogreenteagc)"
	case gcGreenTea:
		return "Green Tea (Go's default)"
	}
	return "unknown"
}
