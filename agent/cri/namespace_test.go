package cri_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/podbus/podbus/agent/cri"
)

// A namespace goes even when a pull cut short left its lease, and the lease keeps a blob: containerd
// refuses to delete a namespace that still holds one.
func TestRemoveNamespaceWithALease(t *testing.T) {
	requireContainerd(t)
	c, err := containerd.New(address())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := testNamespace()
	ctx := namespaces.WithNamespace(context.Background(), ns)
	defer func() { _ = cri.RemoveNamespace(context.Background(), c, ns) }()

	l, err := c.LeasesService().Create(ctx, leases.WithRandomID())
	if err != nil {
		t.Fatal(err)
	}
	blob := []byte("a layer a killed pull left behind")
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(blob), Size: int64(len(blob))}
	if err := content.WriteBlob(leases.WithLease(ctx, l.ID), c.ContentStore(), "test-"+desc.Digest.Encoded(), bytes.NewReader(blob), desc); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ContentStore().Info(ctx, desc.Digest); err != nil {
		t.Fatalf("the blob is not stored: %v", err)
	}

	if err := cri.RemoveNamespace(context.Background(), c, ns); err != nil {
		t.Fatal(err)
	}
	all, err := c.NamespaceService().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(all, ns) {
		t.Fatalf("namespace %s is still there", ns)
	}
	if err := cri.RemoveNamespace(context.Background(), c, ns); err != nil {
		t.Errorf("removing a namespace that is gone: %v", err)
	}
}
