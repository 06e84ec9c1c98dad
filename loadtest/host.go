package loadtest

import (
	"debug/buildinfo"
	"os"
	"runtime/debug"
	"strings"
)

// thpEnabled is where Linux shows its transparent huge pages mode, the current one in brackets.
const thpEnabled = "/sys/kernel/mm/transparent_hugepage/enabled"

// hostTHP is this host's transparent huge pages mode ("always", "madvise", "never"; "" when the kernel
// does not say). Go's heap gets huge pages only under "always": the runtime does not madvise its heap.
// A control plane holding a few GiB runs measurably faster with them (docs/operations.md), so results
// name the mode they were measured under.
func hostTHP() string {
	b, _ := os.ReadFile(thpEnabled) // unreadable: parseTHP finds no mode
	return parseTHP(string(b))
}

// parseTHP reads the bracketed mode of a line such as "always [madvise] never".
func parseTHP(s string) string {
	i := strings.IndexByte(s, '[')
	j := strings.IndexByte(s, ']')
	if i < 0 || j <= i+1 {
		return ""
	}
	return s[i+1 : j]
}

// thpNote is the mode as results print it.
func thpNote(mode string) string {
	switch mode {
	case "":
		return "unknown"
	case "always":
		return "always"
	}
	return mode + " (Go's heap gets no huge pages: see docs/operations.md)"
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
