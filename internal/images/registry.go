package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an OCI distribution registry (go-containerregistry's pkg/registry, blobs in memory) served
// over plain HTTP. Meant for loopback: containerd and go-containerregistry speak plain HTTP to loopback
// registries without being told.
type Registry struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	once sync.Once
	err  error
}

// StartRegistry listens on addr ("127.0.0.1:0" for a random port) and serves until Close or ctx is done.
func StartRegistry(ctx context.Context, addr string) (*Registry, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("registry: listen on %s: %w", addr, err)
	}
	r := &Registry{
		srv: &http.Server{
			Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
			ReadHeaderTimeout: 10 * time.Second,
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.err = err
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = r.Close()
		case <-r.done:
		}
	}()
	return r, nil
}

// Addr is the registry's host:port, the prefix of its image references ("127.0.0.1:PORT").
func (r *Registry) Addr() string { return r.ln.Addr().String() }

// Close stops serving and waits for the server to end.
func (r *Registry) Close() error {
	r.once.Do(func() {
		_ = r.srv.Close()
		<-r.done
	})
	return r.err
}

// PushBuiltins builds the built-in images and pushes them to registry (host:port), returning their
// references, sorted: <registry>/podbus/busybox:latest and <registry>/podbus/demo-web:latest.
func PushBuiltins(ctx context.Context, registry string, src Sources) ([]string, error) {
	imgs, err := Builtins(ctx, src)
	if err != nil {
		return nil, err
	}
	return push(ctx, registry, imgs)
}

// push writes each image (keyed by repository:tag) to registry.
func push(ctx context.Context, registry string, imgs map[string]v1.Image) ([]string, error) {
	var refs []string
	for repoTag, img := range imgs {
		s := registry + "/" + repoTag
		ref, err := name.ParseReference(s)
		if err != nil {
			return nil, fmt.Errorf("push %s: %w", s, err)
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			return nil, fmt.Errorf("push %s: %w", s, err)
		}
		refs = append(refs, s)
	}
	sort.Strings(refs)
	return refs, nil
}
