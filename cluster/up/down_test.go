package up

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Without real nodes, Down deletes the data directory (KeepData keeps it). A real node whose pods
// cannot be removed (here: no containerd at the address) keeps the directory, so that its records are
// not lost, unless Force.
func TestDown(t *testing.T) {
	tests := []struct {
		name     string
		realNode bool
		cfg      DownConfig
		wantErr  error
		wantKept bool
	}{
		{name: "simulated only", wantKept: false},
		{name: "keep data", cfg: DownConfig{KeepData: true}, wantKept: true},
		{name: "real node not reachable", realNode: true, wantErr: ErrNodeTeardown, wantKept: true},
		{name: "forced", realNode: true, cfg: DownConfig{Force: true}, wantErr: ErrNodeTeardown, wantKept: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			if err := os.MkdirAll(filepath.Join(data, "nats"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.realNode {
				if err := os.MkdirAll(filepath.Join(data, "agent", DefaultRealNode, "sandboxes"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			cfg := tt.cfg
			cfg.DataDir = data
			cfg.ContainerdAddress = filepath.Join(t.TempDir(), "no-containerd.sock")
			err := Down(context.Background(), cfg)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Down = %v, want %v", err, tt.wantErr)
			}
			_, serr := os.Stat(data)
			if kept := serr == nil; kept != tt.wantKept {
				t.Errorf("data dir kept = %v (%v), want %v", kept, serr, tt.wantKept)
			}
			if !tt.wantKept && !errors.Is(serr, fs.ErrNotExist) {
				t.Errorf("stat data dir: %v", serr)
			}
		})
	}
}
