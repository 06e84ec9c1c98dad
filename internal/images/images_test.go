package images

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// demoWeb is the demo-web binary built once for every test of the package.
var demoWeb string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "images-test-")
	if err != nil {
		panic(err)
	}
	demoWeb = filepath.Join(dir, "demo-web")
	if err := BuildDemoWeb(context.Background(), demoWeb); err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needBusybox skips without busybox-static on a laptop; in CI its absence is a failure.
func needBusybox(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(DefaultBusybox); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v", ErrBusyboxMissing)
		}
		t.Skipf("skipped: %v", ErrBusyboxMissing)
	}
}

func sources() Sources { return Sources{DemoWeb: demoWeb} }

func TestPushBuiltins(t *testing.T) {
	needBusybox(t)
	ctx := t.Context()
	reg, err := StartRegistry(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	refs, err := PushBuiltins(ctx, reg.Addr(), sources())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{reg.Addr() + "/podbus/busybox:latest", reg.Addr() + "/podbus/demo-web:latest"}
	if diff := cmp.Diff(want, refs); diff != "" {
		t.Fatalf("refs (-want +got):\n%s", diff)
	}
	checkImages(t, func(repoTag string) v1.Image {
		ref, err := name.ParseReference(reg.Addr() + "/" + repoTag)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref, remote.WithContext(ctx)) // plain HTTP: the registry is on loopback
		if err != nil {
			t.Fatalf("fetch %s: %v", ref, err)
		}
		return img
	})
}

func TestLayoutRoundTrip(t *testing.T) {
	needBusybox(t)
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "images")
	if err := WriteLayout(ctx, dir, sources()); err != nil {
		t.Fatal(err)
	}
	// Written twice: the index is replaced, not appended to.
	if err := WriteLayout(ctx, dir, sources()); err != nil {
		t.Fatal(err)
	}
	imgs, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 2 {
		t.Fatalf("layout holds %d images, want 2", len(imgs))
	}
	checkImages(t, func(repoTag string) v1.Image { return imgs[repoTag] })

	reg, err := StartRegistry(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	refs, err := PushLayout(ctx, dir, reg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 {
		t.Fatalf("pushed %v, want 2 images", refs)
	}
	for repoTag, img := range imgs {
		ref, _ := name.ParseReference(reg.Addr() + "/" + repoTag)
		got, err := remote.Image(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("fetch %s: %v", ref, err)
		}
		wd, _ := img.Digest()
		gd, _ := got.Digest()
		if wd != gd {
			t.Errorf("%s: registry digest %s, layout digest %s", repoTag, gd, wd)
		}
	}
}

// checkImages checks manifest, config and layer of both built-in images as get returns them.
func checkImages(t *testing.T, get func(repoTag string) v1.Image) {
	t.Helper()
	tests := []struct {
		repoTag    string
		entrypoint []string
		cmd        []string
		files      []string // must be in the layer
		ports      []string
	}{
		{DemoWeb, []string{"/demo-web"}, nil, []string{"demo-web"}, []string{"8080/tcp"}},
		{Busybox, nil, []string{"sh"}, []string{"bin/busybox", "bin/sh", "bin/sleep", "bin/wget", "bin/nc", "bin/ip"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.repoTag, func(t *testing.T) {
			img := get(tt.repoTag)
			if img == nil {
				t.Fatalf("no image %s", tt.repoTag)
			}
			mt, err := img.MediaType()
			if err != nil || mt != types.OCIManifestSchema1 {
				t.Errorf("manifest media type %q (%v), want %q", mt, err, types.OCIManifestSchema1)
			}
			m, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if m.Config.MediaType != types.OCIConfigJSON {
				t.Errorf("config media type %q", m.Config.MediaType)
			}
			if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
				t.Fatalf("layers %+v, want one %s", m.Layers, types.OCILayer)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
				t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
			}
			if diff := cmp.Diff(tt.entrypoint, cf.Config.Entrypoint); diff != "" {
				t.Errorf("entrypoint (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.cmd, cf.Config.Cmd); diff != "" {
				t.Errorf("cmd (-want +got):\n%s", diff)
			}
			for _, p := range tt.ports {
				if _, ok := cf.Config.ExposedPorts[p]; !ok {
					t.Errorf("port %s not exposed: %v", p, cf.Config.ExposedPorts)
				}
			}
			names := layerFiles(t, img)
			for _, f := range tt.files {
				if !names[f] {
					t.Errorf("layer lacks %s", f)
				}
			}
		})
	}
}

func TestCheckStatic(t *testing.T) {
	if err := CheckStatic(bytes.NewReader(mustRead(t, demoWeb))); err != nil {
		t.Errorf("demo-web: %v", err)
	}
	if err := CheckStatic(strings.NewReader("#!/bin/sh\n")); err == nil {
		t.Error("a script passed as a static binary")
	}
	// Debian's /bin/sh (dash) needs the dynamic loader.
	if _, err := DemoWebImage("/bin/sh"); !errors.Is(err, ErrNotStatic) {
		t.Errorf("DemoWebImage(/bin/sh): err %v, want ErrNotStatic", err)
	}
}

func TestReproducible(t *testing.T) {
	a, err := DemoWebImage(demoWeb)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DemoWebImage(demoWeb)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("same binary, digests %s and %s", da, db)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
