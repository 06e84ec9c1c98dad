package nodestats

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

const fixture = "testdata/node"

func TestReadFixtures(t *testing.T) {
	mem, err := ReadMemory(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Memory{Total: 8023424 * 1024, Available: 2048000 * 1024}); mem != want {
		t.Errorf("memory = %+v, want %+v", mem, want)
	}
	cpu, err := ReadCPUNanos(fixture)
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+irq+softirq+steal = 1385 ticks of 10 ms; idle and iowait left out.
	if want := uint64(1385) * 10_000_000; cpu != want {
		t.Errorf("cpu = %d ns, want %d", cpu, want)
	}
	pids, err := ReadPIDs(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if want := (PIDs{Running: 731, Max: 4194304}); pids != want {
		t.Errorf("pids = %+v, want %+v", pids, want)
	}
	if got := KernelVersion(fixture); got != "6.1.0-28-amd64" {
		t.Errorf("kernel = %q", got)
	}
	if got := OSImage(fixture); got != "Debian GNU/Linux 12 (bookworm)" {
		t.Errorf("os image = %q", got)
	}
	if got := OSImage(t.TempDir()); got != "Linux" {
		t.Errorf("os image without os-release = %q, want Linux", got)
	}
	// Two default routes: the lower metric wins.
	if got, err := DefaultRouteInterface(fixture); err != nil || got != "eth0" {
		t.Errorf("default route interface = %q, %v; want eth0", got, err)
	}
}

func TestMalformed(t *testing.T) {
	tests := []struct {
		name, file, content string
		read                func(root string) error
	}{
		{"meminfo without MemAvailable", "proc/meminfo", "MemTotal: 1024 kB\n",
			func(r string) error { _, err := ReadMemory(r); return err }},
		{"meminfo with a word", "proc/meminfo", "MemTotal: lots kB\nMemAvailable: 1 kB\n",
			func(r string) error { _, err := ReadMemory(r); return err }},
		{"stat without cpu", "proc/stat", "intr 1 2 3\n",
			func(r string) error { _, err := ReadCPUNanos(r); return err }},
		{"loadavg short", "proc/loadavg", "0.1 0.2\n",
			func(r string) error { _, err := ReadPIDs(r); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, tt.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := tt.read(root); !errors.Is(err, ErrFormat) {
				t.Errorf("err = %v, want ErrFormat", err)
			}
		})
	}
}

func TestReadFS(t *testing.T) {
	fs, err := ReadFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if fs.Bytes == 0 || fs.AvailableBytes > fs.Bytes {
		t.Errorf("fs = %+v", fs)
	}
}
