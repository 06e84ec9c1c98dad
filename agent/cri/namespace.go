package cri

import (
	"context"
	"errors"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
)

// RemoveNamespace deletes the containerd namespace ns with all it holds: containers and their tasks,
// leases, images, and so the blobs and snapshots they kept. A namespace that does not exist is fine.
func RemoveNamespace(ctx context.Context, c *containerd.Client, ns string) error {
	var errs []error
	nctx := namespaces.WithNamespace(ctx, ns)
	cs, err := c.Containers(nctx)
	errs = append(errs, err)
	for _, ct := range cs {
		if task, err := ct.Task(nctx, nil); err == nil {
			_, _ = task.Delete(nctx, containerd.WithProcessKill)
		}
		if err := ct.Delete(nctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	// A pull cut short leaves its lease (24 hours by default), which keeps the pull's blobs and
	// snapshots from the collector, and containerd refuses to delete a namespace that still holds any.
	if ls, err := c.LeasesService().List(nctx); err == nil {
		for _, l := range ls {
			_ = c.LeasesService().Delete(nctx, l, leases.SynchronousDelete)
		}
	}
	if imgs, err := c.ListImages(nctx); err == nil {
		for _, im := range imgs {
			_ = c.ImageService().Delete(nctx, im.Name(), images.SynchronousDelete())
		}
	}
	if err := c.NamespaceService().Delete(ctx, ns); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
