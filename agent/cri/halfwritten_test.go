package cri_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/netns"
	"github.com/google/uuid"

	"github.com/podbus/podbus/agent/cri"
)

// An agent of an older version (netns under /var/run/netns) killed inside the write of a sandbox record
// leaves a temp file naming a netns nobody else knows of. The next runtime on that state removes both;
// with the final record there, it leaves the netns to reconciliation (RemoveSandbox).
func TestHalfWrittenRecordRemoved(t *testing.T) {
	requireContainerd(t)
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "sandboxes"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, uid, path string) {
		rec := fmt.Sprintf(`{"id":%q,"podUID":%q,"namespace":"default","name":"half","netns":%q,"created":%q}`,
			uuid.NewString(), uid, path, time.Now().Format(time.RFC3339Nano))
		if err := os.WriteFile(filepath.Join(state, "sandboxes", name), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	orphan, err := netns.NewNetNS(cri.LegacyNetNSDir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orphan.Remove() }()
	write(".rec-1", uuid.NewString(), orphan.GetPath())

	recorded, err := netns.NewNetNS(cri.LegacyNetNSDir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = recorded.Remove() }()
	uid := uuid.NewString()
	write(uid+".json", uid, recorded.GetPath())
	write(".rec-2", uid, recorded.GetPath())
	if err := os.WriteFile(filepath.Join(state, "sandboxes", ".rec-3"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	r := newRuntime(t, testNode(), testCIDR(), testNamespace(), state)
	if _, err := os.Stat(orphan.GetPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns of the half-written record: %v, want it removed", err)
	}
	if _, err := os.Stat(recorded.GetPath()); err != nil {
		t.Errorf("netns of a recorded sandbox: %v, want it kept for reconciliation", err)
	}
	left, _ := filepath.Glob(filepath.Join(state, "sandboxes", ".rec-*"))
	if len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	sbs, err := r.ListSandboxes(t.Context())
	if err != nil || len(sbs) != 1 || sbs[0].PodUID != uid {
		t.Errorf("ListSandboxes = %+v, %v; want the recorded one", sbs, err)
	}
	if err := r.RemoveSandbox(t.Context(), sbs[0].Sandbox); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(recorded.GetPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns of the removed legacy sandbox: %v, want it removed", err)
	}
}

// An agent killed between creating a pod's netns and writing the record that names it (or inside that
// write, or between the mount point and the bind mount) leaves a netns in the node's dir that nothing
// refers to: New removes it. A netns a record names survives New.
func TestNewSweepsUnrecordedNetNS(t *testing.T) {
	requireContainerd(t)
	state := t.TempDir()
	dir := cri.NetNSDir(state)
	if err := os.MkdirAll(filepath.Join(state, "sandboxes"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, uid, path string) {
		rec := fmt.Sprintf(`{"id":%q,"podUID":%q,"namespace":"default","name":"swept","netns":%q,"created":%q}`,
			uuid.NewString(), uid, path, time.Now().Format(time.RFC3339Nano))
		if err := os.WriteFile(filepath.Join(state, "sandboxes", name), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	newNS := func() string {
		ns, err := netns.NewNetNS(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ns.Remove() })
		return ns.GetPath()
	}
	noRecord := newNS()
	halfWritten := newNS()
	write(".rec-1", uuid.NewString(), halfWritten)
	neverMounted := filepath.Join(dir, "cni-never-mounted")
	if err := os.WriteFile(neverMounted, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	recorded := newNS()
	uid := uuid.NewString()
	write(uid+".json", uid, recorded)

	r := newRuntime(t, testNode(), testCIDR(), testNamespace(), state)
	for _, gone := range []string{noRecord, halfWritten, neverMounted} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("unrecorded netns %s: %v, want it removed", gone, err)
		}
		if mounted(t, gone) {
			t.Errorf("unrecorded netns %s still mounted", gone)
		}
	}
	if _, err := os.Stat(recorded); err != nil || !mounted(t, recorded) {
		t.Errorf("netns of a recorded sandbox: %v (mounted: %v), want it kept for reconciliation", err, mounted(t, recorded))
	}
	sbs, err := r.ListSandboxes(t.Context())
	if err != nil || len(sbs) != 1 || sbs[0].PodUID != uid {
		t.Fatalf("ListSandboxes = %+v, %v; want the recorded one", sbs, err)
	}
	if err := r.RemoveSandbox(t.Context(), sbs[0].Sandbox); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("netns left in %s: %v", dir, left)
	}
}

// mounted says whether path is a mount point of this process's mount namespace.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
