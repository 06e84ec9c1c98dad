package images

import (
	"context"
	"fmt"
	"os"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// refAnnotation names an image in an OCI layout's index (the OCI image spec's annotation).
const refAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes the built-in images as an OCI image layout in dir (created if missing; an index
// already there is replaced). Each manifest is annotated with its repository:tag ("podbus/busybox:latest").
func WriteLayout(ctx context.Context, dir string, src Sources) error {
	imgs, err := Builtins(ctx, src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout %s: %w", dir, err)
	}
	names := make([]string, 0, len(imgs))
	for n := range imgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := p.AppendImage(imgs[n], layout.WithAnnotations(map[string]string{refAnnotation: n})); err != nil {
			return fmt.Errorf("write layout %s: %s: %w", dir, n, err)
		}
	}
	return nil
}

// ReadLayout reads the images of an OCI layout written by WriteLayout, keyed by repository:tag.
func ReadLayout(dir string) (map[string]v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("read layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("read layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read layout %s: %w", dir, err)
	}
	imgs := map[string]v1.Image{}
	for _, d := range m.Manifests {
		n := d.Annotations[refAnnotation]
		if n == "" || !d.MediaType.IsImage() {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("read layout %s: %s: %w", dir, n, err)
		}
		imgs[n] = img
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("read layout %s: no image annotated with %s", dir, refAnnotation)
	}
	return imgs, nil
}

// PushLayout pushes every named image of the layout in dir to registry and returns their references.
func PushLayout(ctx context.Context, dir, registry string) ([]string, error) {
	imgs, err := ReadLayout(dir)
	if err != nil {
		return nil, err
	}
	return push(ctx, registry, imgs)
}
