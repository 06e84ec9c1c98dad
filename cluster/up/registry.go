package up

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/podbus/podbus/internal/images"
)

// DefaultRegistryAddr is where `podbus up` serves the built-in images (examples/web.yaml names it).
const DefaultRegistryAddr = "127.0.0.1:5000"

// ServeImages starts an OCI registry on addr (DefaultRegistryAddr when empty) holding the built-in images
// (podbus/demo-web, podbus/busybox): those of the layout dataDir/images when `make images-oci` wrote one,
// else built now (which needs the go toolchain for demo-web and busybox-static). The registry stops with
// ctx. It returns the registry and the image references it serves.
func ServeImages(ctx context.Context, addr, dataDir string, log *slog.Logger) (*images.Registry, []string, error) {
	if addr == "" {
		addr = DefaultRegistryAddr
	}
	reg, err := images.StartRegistry(ctx, addr)
	if err != nil {
		return nil, nil, fmt.Errorf("image registry: %w", err)
	}
	var refs []string
	layout := filepath.Join(dataDir, "images")
	if _, serr := os.Stat(filepath.Join(layout, "index.json")); serr == nil {
		refs, err = images.PushLayout(ctx, layout, reg.Addr())
	} else {
		refs, err = images.PushBuiltins(ctx, reg.Addr(), images.Sources{})
	}
	if err != nil {
		reg.Close()
		return nil, nil, fmt.Errorf("image registry: %w", err)
	}
	if log != nil {
		log.Info("image registry serving", "addr", reg.Addr(), "images", refs)
	}
	return reg, refs, nil
}
