package chaos

import (
	"fmt"
	"os"
	"syscall"
)

// mountTmpfs mounts a tmpfs of size bytes on dir.
func mountTmpfs(dir string, size int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmount detaches dir's mount, even while something still has a file open there.
func unmount(dir string) error { return syscall.Unmount(dir, syscall.MNT_DETACH) }
