package cri

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/pkg/netns"
)

// removeHalfWritten removes what a runtime killed inside saveRecord left: the temp file (".rec-*") and,
// when no record of that pod made it to its final name, the netns the temp file names if it is in
// LegacyNetNSDir (an older runtime's; one in the node's NetNSDir is swept by sweepNetNS). With a final
// record, the netns is left to reconciliation, which tears the sandbox down with CNI DEL. Only New calls
// it: no record is being written then.
func removeHalfWritten(stateDir string, log *slog.Logger) error {
	dir := sandboxDir(stateDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("remove half-written sandbox records: %w", err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".rec-") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var rec sandboxRecord
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &rec) == nil && rec.PodUID != "" &&
			strings.HasPrefix(rec.NetNS, LegacyNetNSDir+"/") {
			if _, err := os.Stat(filepath.Join(dir, rec.PodUID+".json")); errors.Is(err, fs.ErrNotExist) {
				if err := netns.LoadNetNS(rec.NetNS).Remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("remove netns %s of a half-written sandbox record: %w", rec.NetNS, err)
				}
				log.Info("removed the netns of a half-written sandbox record", "pod", rec.PodUID, "netns", rec.NetNS)
			}
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove half-written sandbox record: %w", err)
		}
	}
	return nil
}
