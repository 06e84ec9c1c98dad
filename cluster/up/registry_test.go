package up

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/podbus/podbus/internal/images"
)

func TestServeImagesFromLayout(t *testing.T) {
	if _, err := os.Stat(images.DefaultBusybox); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(images.ErrBusyboxMissing)
		}
		t.Skip(images.ErrBusyboxMissing)
	}
	ctx := t.Context()
	data := t.TempDir()
	if err := images.WriteLayout(ctx, filepath.Join(data, "images"), images.Sources{}); err != nil {
		t.Fatal(err)
	}
	reg, refs, err := ServeImages(ctx, "127.0.0.1:0", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if len(refs) != 2 {
		t.Fatalf("refs %v, want 2", refs)
	}
	for _, r := range refs {
		ref, err := name.ParseReference(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Image(ref, remote.WithContext(ctx)); err != nil {
			t.Errorf("fetch %s: %v", r, err)
		}
	}
}
