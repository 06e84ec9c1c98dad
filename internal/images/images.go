// Package images builds the OCI images podbus ships for real containers, serves them from an OCI
// distribution registry on loopback, and keeps them as an OCI image layout on disk.
//
// There is no internet here, so podbus makes its images from static binaries: podbus/demo-web (the demo
// HTTP server of examples/demo-web, built with CGO_ENABLED=0) and podbus/busybox (Debian's busybox-static
// with symlinks for the common applets). Each image is one gzip layer made in memory, OCI media types,
// linux/GOARCH, and fixed timestamps so the same binaries give the same digests.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The repositories and tag of the built-in images, relative to a registry ("127.0.0.1:5000/" + DemoWeb).
const (
	DemoWeb = "podbus/demo-web:latest"
	Busybox = "podbus/busybox:latest"
)

// DefaultBusybox is where Debian's busybox-static installs its binary.
const DefaultBusybox = "/bin/busybox"

// DemoWebPackage is the Go package of the demo web server, built when Sources.DemoWeb is empty.
const DemoWebPackage = "github.com/podbus/podbus/examples/demo-web"

// BusyboxApplets are the applets linked into the busybox image as /bin/<name>.
var BusyboxApplets = []string{
	"sh", "sleep", "echo", "cat", "ls", "wget", "nc", "httpd", "true", "false", "env", "hostname", "ip",
	"ps", "kill", "grep", "head", "tail", "mkdir", "rm", "touch", "test", "[", "id", "date", "printf",
	"timeout", "ping", "nslookup", "wc", "sed", "seq",
}

var (
	// ErrNotStatic is returned for a binary that needs a dynamic loader (it would not run FROM scratch).
	ErrNotStatic = errors.New("binary is not statically linked")
	// ErrBusyboxMissing is returned when busybox-static is not installed.
	ErrBusyboxMissing = errors.New("busybox-static is not installed (apt-get install busybox-static)")
)

// Sources says where the binaries of the built-in images come from.
type Sources struct {
	// DemoWeb is the path of a static demo-web binary; empty: build it with `go build` (needs the go
	// toolchain and the podbus module in the working directory or above).
	DemoWeb string
	// Busybox is the path of a static busybox; empty: DefaultBusybox.
	Busybox string
}

// epoch is the modification time of every file and the creation time of every image: reproducible digests.
var epoch = time.Unix(0, 0).UTC()

// Builtins builds the built-in images, keyed by DemoWeb and Busybox.
func Builtins(ctx context.Context, src Sources) (map[string]v1.Image, error) {
	demo := src.DemoWeb
	if demo == "" {
		dir, err := os.MkdirTemp("", "podbus-demo-web-")
		if err != nil {
			return nil, fmt.Errorf("build demo-web: %w", err)
		}
		defer os.RemoveAll(dir)
		demo = filepath.Join(dir, "demo-web")
		if err := BuildDemoWeb(ctx, demo); err != nil {
			return nil, err
		}
	}
	bb := src.Busybox
	if bb == "" {
		bb = DefaultBusybox
	}
	web, err := DemoWebImage(demo)
	if err != nil {
		return nil, err
	}
	box, err := BusyboxImage(bb)
	if err != nil {
		return nil, err
	}
	return map[string]v1.Image{DemoWeb: web, Busybox: box}, nil
}

// BuildDemoWeb builds the demo web server as a static linux binary at out.
func BuildDemoWeb(ctx context.Context, out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("build demo-web: the go toolchain is needed (or pass a prebuilt binary): %w", err)
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, DemoWebPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build demo-web (go build %s): %w: %s", DemoWebPackage, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// DemoWebImage is the demo web server image: /demo-web, listening on 8080.
func DemoWebImage(binary string) (v1.Image, error) {
	bin, err := readStatic(binary)
	if err != nil {
		return nil, fmt.Errorf("demo-web image: %w", err)
	}
	files := []file{
		{name: "demo-web", mode: 0o755, data: bin},
		{name: "tmp/", mode: 0o1777},
	}
	cfg := v1.Config{
		Entrypoint:   []string{"/demo-web"},
		Env:          []string{"PATH=/", "PORT=8080"},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
	}
	return image(files, cfg)
}

// BusyboxImage is busybox with /bin/sh and BusyboxApplets linked to /bin/busybox; it runs `sh` by default.
func BusyboxImage(binary string) (v1.Image, error) {
	if _, err := os.Stat(binary); errors.Is(err, os.ErrNotExist) && binary == DefaultBusybox {
		return nil, ErrBusyboxMissing
	}
	bin, err := readStatic(binary)
	if err != nil {
		return nil, fmt.Errorf("busybox image: %w", err)
	}
	if err := checkApplets(binary, BusyboxApplets); err != nil {
		return nil, fmt.Errorf("busybox image: %w", err)
	}
	files := []file{
		{name: "bin/", mode: 0o755},
		{name: "bin/busybox", mode: 0o755, data: bin},
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
		{name: "var/www/", mode: 0o755},
	}
	for _, a := range BusyboxApplets {
		files = append(files, file{name: "bin/" + a, mode: 0o777, link: "busybox"})
	}
	cfg := v1.Config{
		Cmd:        []string{"sh"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir: "/",
	}
	return image(files, cfg)
}

// checkApplets asks the busybox binary which applets it has; it must have every one of want.
func checkApplets(busybox string, want []string) error {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", busybox, err)
	}
	have := map[string]bool{}
	for _, a := range strings.Fields(string(out)) {
		have[a] = true
	}
	var missing []string
	for _, a := range want {
		if !have[a] {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks the applets %s", busybox, strings.Join(missing, " "))
	}
	return nil
}

// readStatic reads an ELF binary for this architecture that has no program interpreter.
func readStatic(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := CheckStatic(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// CheckStatic returns ErrNotStatic for an ELF binary with a PT_INTERP program header (it needs ld.so,
// which a FROM-scratch image has not got), and an error for a non-ELF file or another architecture.
func CheckStatic(r io.ReaderAt) error {
	f, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	if want, ok := machines[runtime.GOARCH]; ok && f.Machine != want {
		return fmt.Errorf("built for %s, this machine is %s", f.Machine, runtime.GOARCH)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%w (it has a program interpreter; build with CGO_ENABLED=0)", ErrNotStatic)
		}
	}
	return nil
}

var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390,
}

// file is one entry of a layer: a directory (name ends in "/"), a symlink (link set) or a regular file.
type file struct {
	name string
	mode int64
	data []byte
	link string
}

// image makes a one-layer OCI image for linux/GOARCH.
func image(files []file, cfg v1.Config) (v1.Image, error) {
	layer, err := layerOf(files)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "podbus images", Comment: "static binaries",
	}})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// layerOf writes files into an uncompressed tar in memory; the layer gzips it (OCI layer media type).
func layerOf(files []file) (v1.Layer, error) {
	files = append([]file(nil), files...)
	sort.SliceStable(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: epoch}
		switch {
		case strings.HasSuffix(f.name, "/"):
			h.Typeflag = tar.TypeDir
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", f.name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, fmt.Errorf("layer: %s: %w", f.name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return layer, nil
}
