package cri_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/pkg/netns"
	"github.com/google/uuid"

	"github.com/podbus/podbus/agent/cri"
)

// An agent killed inside the write of a sandbox record leaves a temp file naming a netns nobody else
// knows of. The next runtime on that state removes both; with the final record there, it leaves the
// netns to reconciliation (RemoveSandbox).
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
	orphan, err := netns.NewNetNS(cri.NetNSDir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orphan.Remove() }()
	write(".rec-1", uuid.NewString(), orphan.GetPath())

	recorded, err := netns.NewNetNS(cri.NetNSDir)
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
	// newRuntime's cleanup removes it, with its netns.
}
