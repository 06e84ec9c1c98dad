package cri

import (
	"context"
	"fmt"
	"net"
	"slices"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"

	"github.com/podbus/podbus/agent"
)

// normalizeImage turns a pod spec's image into the full reference containerd stores, as the kubelet
// does: "busybox" is docker.io/library/busybox:latest.
func normalizeImage(image string) (string, error) {
	named, err := reference.ParseDockerRef(image)
	if err != nil {
		return "", fmt.Errorf("%w: invalid image name %q: %v", agent.ErrImagePull, image, err)
	}
	return named.String(), nil
}

// PullImage implements agent.ImageManager.
func (r *Runtime) PullImage(ctx context.Context, image, policy string) (bool, error) {
	ref, err := normalizeImage(image)
	if err != nil {
		return false, err
	}
	if policy != "Always" {
		_, err := r.client.GetImage(ctx, ref)
		switch {
		case err == nil:
			return false, nil
		case !errdefs.IsNotFound(err):
			return false, fmt.Errorf("%w: look up image %q: %v", agent.ErrImagePull, image, err)
		case policy == "Never":
			return false, fmt.Errorf("image %q: %w", image, agent.ErrImageNeverPull)
		}
	}
	// Pods starting together pull a shared image once.
	_, err, _ = r.pulls.Do(ref, func() (any, error) {
		_, err := r.client.Pull(ctx, ref, containerd.WithPullUnpack, containerd.WithResolver(r.resolver()))
		return nil, err
	})
	if err != nil {
		return false, fmt.Errorf("%w: %v", agent.ErrImagePull, err)
	}
	return true, nil
}

// resolver talks HTTPS to registries, plain HTTP to loopback ones and those in Config.PlainHTTP.
func (r *Runtime) resolver() remotes.Resolver {
	plain := func(host string) (bool, error) {
		if slices.Contains(r.cfg.PlainHTTP, host) {
			return true, nil
		}
		h, _, err := net.SplitHostPort(host)
		if err != nil {
			h = host
		}
		if h == "localhost" {
			return true, nil
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback(), nil
	}
	return docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(plain)),
	})
}
