package loadtest

import (
	"os"
	"testing"
)

func TestTHPNote(t *testing.T) {
	for _, tt := range []struct {
		mode string
		huge int64
		want string
	}{
		{"", 0, "unknown"},
		{"madvise", 3 << 29, "madvise (1.50 GiB of the process in huge pages at the end)"},
		{"madvise", 0, "madvise (no huge pages: see docs/operations.md)"},
		{"always", 1 << 30, "always (1.00 GiB of the process in huge pages at the end)"},
		{"never", 0, "never"},
	} {
		if got := thpNote(tt.mode, tt.huge); got != tt.want {
			t.Errorf("thpNote(%q, %d) = %q, want %q", tt.mode, tt.huge, got, tt.want)
		}
	}
}

func TestParseGC(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", gcGreenTea},
		{"nogreenteagc", gcClassic},
		{"boringcrypto,nogreenteagc", gcClassic},
		{"boringcrypto, nogreenteagc", gcClassic},
		{"greenteagc", gcGreenTea},
		{"nogreenteagcx", gcGreenTea},
	}
	for _, tt := range tests {
		if got := parseGC(tt.in); got != tt.want {
			t.Errorf("parseGC(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestBuiltGC: the collector read from the build settings is the one GOEXPERIMENT chose, as `make`
// and `go test` pass it to both the build and the run.
func TestBuiltGC(t *testing.T) {
	if got, want := builtGC(), parseGC(os.Getenv("GOEXPERIMENT")); got != want {
		t.Errorf("builtGC() = %q, want %q (GOEXPERIMENT=%q)", got, want, os.Getenv("GOEXPERIMENT"))
	}
}

// TestBinaryGC: a binary's file tells the same collector as its own build settings.
func TestBinaryGC(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := binaryGC(self), builtGC(); got != want || got == "" {
		t.Errorf("binaryGC(%s) = %q, want %q", self, got, want)
	}
	if got := binaryGC(os.DevNull); got != "" {
		t.Errorf("binaryGC(%s) = %q, want \"\"", os.DevNull, got)
	}
}
