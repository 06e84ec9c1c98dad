package cri

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// dialInNetNS dials addr over TCP from the network namespace at nsPath. A socket belongs to the
// namespace it was created in, so only the dial runs on a thread switched into the pod's namespace.
func dialInNetNS(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := dialOnThread(ctx, nsPath, addr)
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

func dialOnThread(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open the thread's netns: %w", err)
	}
	defer func() { _ = orig.Close() }()
	target, err := os.Open(nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open netns: %w", err)
	}
	defer func() { _ = target.Close() }()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter netns %s: %w", nsPath, err)
	}
	var d net.Dialer
	c, dialErr := d.DialContext(ctx, "tcp", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays in the pod's namespace: leaving it locked makes the runtime end it with
		// this goroutine instead of reusing it.
		if c != nil {
			_ = c.Close()
		}
		return nil, fmt.Errorf("leave netns %s: %w", nsPath, err)
	}
	runtime.UnlockOSThread()
	return c, dialErr
}
