package cri

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestStdinMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *pb.Container
		want string
	}{
		{"none", &pb.Container{}, ""},
		{"stdinOnce without stdin", &pb.Container{StdinOnce: true}, ""},
		{"stdin", &pb.Container{Stdin: true}, stdinOpen},
		{"stdinOnce", &pb.Container{Stdin: true, StdinOnce: true}, stdinOnce},
	} {
		if got := stdinMode(tc.c); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// fakeTask counts the times the shim's end of stdin is closed.
type fakeTask struct{ closed atomic.Int32 }

func (f *fakeTask) CloseIO(context.Context, ...containerd.IOCloserOpts) error {
	f.closed.Add(1)
	return nil
}

func TestAttachStdin(t *testing.T) {
	r := &Runtime{cfg: Config{StateDir: t.TempDir()}, log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	creator, err := r.stdinCreator("c1", stdinOnce, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	tio, err := creator("c1")
	if err != nil {
		t.Fatal(err)
	}
	if got := tio.Config().Stdin; got != r.stdinPath("c1") {
		t.Fatalf("task stdin %q, want %q", got, r.stdinPath("c1"))
	}
	task := &fakeTask{}

	// Nobody reads (the shim closed its end): a clear error, not a hang.
	if _, err := r.attachStdin(ctx, "c1", stdinOnce, task, strings.NewReader("x")); !errors.Is(err, ErrStdinClosed) {
		t.Fatalf("attach with no reader: %v, want ErrStdinClosed", err)
	}
	if _, err := r.attachStdin(ctx, "c1", "", task, strings.NewReader("x")); !errors.Is(err, ErrAttachStdin) {
		t.Fatalf("attach to a container without stdin: %v, want ErrAttachStdin", err)
	}

	// The shim's read end, opened by path as after an agent restart.
	shim, err := os.OpenFile(r.stdinPath("c1"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shim.Close() }()
	done, err := r.attachStdin(ctx, "c1", stdinOnce, task, strings.NewReader("hello\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 0, 16)
	buf := make([]byte, 16)
	deadline := time.Now().Add(10 * time.Second)
	for string(got) != "hello\n" && time.Now().Before(deadline) {
		_ = shim.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := shim.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	if string(got) != "hello\n" {
		t.Fatalf("the shim read %q", got)
	}
	done()
	done()
	if n := task.closed.Load(); n != 1 {
		t.Errorf("stdinOnce: the shim's end closed %d times, want 1", n)
	}

	r.removeStdin("c1")
	if _, err := os.Stat(r.stdinPath("c1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fifo after removeStdin: %v", err)
	}
}
