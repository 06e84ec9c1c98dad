package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/podbus/podbus/internal/images"
)

// runImages builds podbus's built-in OCI images (demo-web and busybox) as an OCI layout on disk.
func runImages(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "build" {
		return errors.New("usage: podbus images build --out DIR [--demo-web BIN] [--busybox BIN]")
	}
	fs := flag.NewFlagSet("images build", flag.ExitOnError)
	out := fs.String("out", ".podbus/images", "write the OCI image layout here")
	src := sourceFlags(fs)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if err := images.WriteLayout(ctx, *out, *src); err != nil {
		return err
	}
	fmt.Printf("%s: %s, %s\n", *out, images.DemoWeb, images.Busybox)
	return nil
}

// runRegistry serves an OCI registry on loopback holding the images of a layout, or the built-in images.
func runRegistry(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("registry", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:5000", "listen address (plain HTTP: keep it on loopback)")
	layout := fs.String("layout", "", "push the images of this OCI layout (from `podbus images build`); empty: build the built-in images")
	src := sourceFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	reg, err := images.StartRegistry(ctx, *addr)
	if err != nil {
		return err
	}
	defer reg.Close()
	var refs []string
	if *layout != "" {
		refs, err = images.PushLayout(ctx, *layout, reg.Addr())
	} else {
		refs, err = images.PushBuiltins(ctx, reg.Addr(), *src)
	}
	if err != nil {
		return err
	}
	slog.Info("registry serving", "addr", reg.Addr(), "images", refs)
	<-ctx.Done()
	return nil
}

func sourceFlags(fs *flag.FlagSet) *images.Sources {
	var src images.Sources
	fs.StringVar(&src.DemoWeb, "demo-web", "", "a static demo-web binary; empty: go build "+images.DemoWebPackage)
	fs.StringVar(&src.Busybox, "busybox", images.DefaultBusybox, "a static busybox (Debian: busybox-static)")
	return &src
}
