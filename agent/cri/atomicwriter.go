package cri

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The kubelet's atomic writer, for configMap, secret, downwardAPI and projected volumes: the files of
// one version go into a fresh hidden directory ..<timestamp>; the symlink ..data points at it and is
// swapped with a rename, so a reader sees the old set or the new one, never a mix; every visible name
// is a symlink through ..data (key -> ..data/key). A payload equal to what is there writes nothing.

const dataLink = "..data"

// fileProjection is one file of a volume: its content and mode.
type fileProjection struct {
	Data []byte
	Mode os.FileMode
}

// writePayload makes dir hold exactly payload (relative path -> file). It reports whether it changed
// anything.
func writePayload(dir string, payload map[string]fileProjection) (bool, error) {
	for p := range payload {
		if err := checkPayloadPath(p); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	if old != "" && samePayload(filepath.Join(dir, old), payload) {
		return false, nil
	}
	tsDir, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return false, err
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return false, err
	}
	for p, f := range payload {
		full := filepath.Join(tsDir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(full, f.Data, f.Mode); err != nil {
			return false, err
		}
		if err := os.Chmod(full, f.Mode); err != nil { // WriteFile's mode is masked by the umask
			return false, err
		}
	}
	tmp := filepath.Join(dir, dataLink+"_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(tsDir), tmp); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return false, err
	}
	// Visible names: one symlink per top-level entry of the payload, stale ones removed.
	want := map[string]bool{}
	for p := range payload {
		want[strings.SplitN(p, "/", 2)[0]] = true
	}
	for top := range want {
		link := filepath.Join(dir, top)
		target := filepath.Join(dataLink, top)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		_ = os.RemoveAll(link)
		if err := os.Symlink(target, link); err != nil {
			return false, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == dataLink:
		case strings.HasPrefix(n, ".."):
			if n != filepath.Base(tsDir) {
				_ = os.RemoveAll(filepath.Join(dir, n))
			}
		case !want[n]:
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	return true, nil
}

// checkPayloadPath refuses a path that could leave the volume (validation refuses them too).
func checkPayloadPath(p string) error {
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "..") || slices.Contains(strings.Split(p, "/"), "..") {
		return fmt.Errorf("invalid volume file path %q", p)
	}
	return nil
}

// samePayload reports whether dir holds exactly payload, contents and modes.
func samePayload(dir string, payload map[string]fileProjection) bool {
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		f, ok := payload[filepath.ToSlash(rel)]
		if !ok {
			return errors.New("extra")
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm() != f.Mode.Perm() {
			return errors.New("mode")
		}
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(data, f.Data) {
			return errors.New("content")
		}
		n++
		return nil
	})
	return err == nil && n == len(payload)
}

// modeOf is an item's mode, else the volume's default, else 0644.
func modeOf(item, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case def != nil:
		return os.FileMode(*def)
	}
	return 0o644
}
