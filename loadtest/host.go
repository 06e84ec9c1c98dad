package loadtest

import (
	"os"
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
