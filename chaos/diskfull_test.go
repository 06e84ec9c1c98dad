package chaos

import (
	"os"
	"path/filepath"
	"testing"
)

// requireRoot skips (fails with CI=true) when the test cannot mount.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root to mount a tmpfs")
	}
	t.Skip("needs root to mount a tmpfs")
}

// The disk-full fault's store: a tmpfs that fill makes refuse any further write, and unfill frees.
func TestFillTmpfs(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "store")
	if err := mountTmpfs(dir, 4<<20); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unmount(dir); err != nil {
			t.Error(err)
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "data"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := fill(dir)
	if err != nil || n == 0 || n > 3<<20 {
		t.Fatalf("fill wrote %d bytes: %v", n, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "more"), make([]byte, 64<<10), 0o644); err == nil {
		t.Fatal("a write into a full store succeeded")
	}
	if err := unfill(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "more"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatalf("after unfill: %v", err)
	}
}
