package cri_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
)

// A tty container runs (its output goes through the terminal to the log) and sees a terminal.
func TestTTYContainer(t *testing.T) {
	requireContainerd(t)
	_, busybox := startRegistry(t)
	r := newRuntime(t, testNode(), testCIDR(), testNamespace(), "")
	c := ctr("tty", busybox, "sh", "-c", "test -t 1 && echo on-a-tty; sleep 3600")
	c.Tty, c.Stdin = true, true
	_, ids := runPod(t, r, newPod("tty", c))
	eventually(t, 20*time.Second, "the tty container's output", func() error {
		var buf bytes.Buffer
		if err := r.ContainerLogs(context.Background(), ids[0], &buf, agent.LogOptions{}); err != nil {
			return err
		}
		if !strings.Contains(buf.String(), "on-a-tty") {
			return notYet("log %q", buf.String())
		}
		return nil
	})
}
