package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podbus/podbus/agent"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func readVolFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestWritePayloadSwapsAtomically: files are symlinks through ..data; an update swaps ..data to a new
// directory, removes the old one and stale names; an equal payload writes nothing.
func TestWritePayloadSwapsAtomically(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	changed, err := writePayload(dir, map[string]fileProjection{
		"a":     {Data: []byte("1"), Mode: 0o644},
		"sub/b": {Data: []byte("2"), Mode: 0o600},
	})
	if err != nil || !changed {
		t.Fatalf("first write: %v, %v", changed, err)
	}
	first, _ := os.Readlink(filepath.Join(dir, dataLink))
	if link, _ := os.Readlink(filepath.Join(dir, "a")); link != "..data/a" {
		t.Errorf("a -> %q, want ..data/a", link)
	}
	if got := readVolFile(t, filepath.Join(dir, "sub", "b")); got != "2" {
		t.Errorf("sub/b = %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub", "b")); fi.Mode().Perm() != 0o600 {
		t.Errorf("sub/b mode %v", fi.Mode().Perm())
	}
	if changed, err := writePayload(dir, map[string]fileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o600}}); err != nil || changed {
		t.Errorf("same payload: changed %v, %v", changed, err)
	}
	if _, err := writePayload(dir, map[string]fileProjection{"a": {Data: []byte("new"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	second, _ := os.Readlink(filepath.Join(dir, dataLink))
	if second == first {
		t.Fatal("..data not swapped")
	}
	if got := readVolFile(t, filepath.Join(dir, "a")); got != "new" {
		t.Errorf("a = %q after the update", got)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := fmt.Sprint([]string{second, dataLink, "a"}); fmt.Sprint(names) != want {
		t.Errorf("entries %v, want %v (old version and stale names removed)", names, want)
	}
	for _, bad := range []string{"../x", "/etc/x", "a/../../x"} {
		if _, err := writePayload(dir, map[string]fileProjection{bad: {}}); err == nil {
			t.Errorf("path %q written", bad)
		}
	}
}

// fakeObjects serves ConfigMaps and Secrets from maps.
type fakeObjects struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (f fakeObjects) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if c, ok := f.cms[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("configmap %q: %w", name, agent.ErrNotFound)
}

func (f fakeObjects) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	if s, ok := f.secrets[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("secret %q: %w", name, agent.ErrNotFound)
}

func podWithVolumes(t *testing.T, vols map[string]corev1.VolumeSource) *pb.Pod {
	t.Helper()
	p := &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1", Labels: map[string]string{"app": "web", "tier": "a"}},
		Spec: &pb.PodSpec{Containers: []*pb.Container{{Name: "c", Resources: &pb.ResourceRequirements{
			Limits: map[string]string{"memory": "64Mi", "cpu": "250m"}}}}},
	}
	for name, src := range vols {
		data, err := json.Marshal(src)
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Volumes = append(p.Spec.Volumes, &pb.Volume{Name: name, Source: data})
	}
	return p
}

// TestSetupVolumes: every kind's files, items, modes and optional sources; the errors that keep a pod
// ContainerCreating (missing ConfigMap), fail it (hostPath off) or evict it (emptyDir over its limit).
func TestSetupVolumes(t *testing.T) {
	r := &Runtime{cfg: Config{StateDir: t.TempDir(), NodeName: "n1"}}
	yes := true
	mode := int32(0o400)
	objs := fakeObjects{
		cms:     map[string]*corev1.ConfigMap{"cfg": {Data: map[string]string{"greeting": "hello", "other": "x"}}},
		secrets: map[string]*corev1.Secret{"db": {Data: map[string][]byte{"password": []byte("hunter2")}}},
	}
	limit := resource.MustParse("1Mi")
	pod := podWithVolumes(t, map[string]corev1.VolumeSource{
		"cfg": {ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items: []corev1.KeyToPath{{Key: "greeting", Path: "conf/greeting.txt"}}}},
		"sec":     {Secret: &corev1.SecretVolumeSource{SecretName: "db", DefaultMode: &mode}},
		"opt":     {Secret: &corev1.SecretVolumeSource{SecretName: "absent", Optional: &yes}},
		"scratch": {EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}},
		"info": {DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			{Path: "app", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}},
			{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
			{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
		}}},
		"all": {Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "ns", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}},
	})
	ctx := context.Background()
	if err := r.SetupVolumes(ctx, pod, objs); err != nil {
		t.Fatal(err)
	}
	vols := r.volumesDir("u1")
	for path, want := range map[string]string{
		"cfg/conf/greeting.txt": "hello",
		"sec/password":          "hunter2",
		"info/labels":           "app=\"web\"\ntier=\"a\"",
		"info/name":             "web",
		"info/app":              "web",
		"info/mem":              "64",
		"info/cpu":              "250",
		"all/greeting":          "hello",
		"all/password":          "hunter2",
		"all/ns":                "default",
	} {
		if got := readVolFile(t, filepath.Join(vols, path)); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(vols, "cfg", "other")); !os.IsNotExist(err) {
		t.Error("a key outside items was written")
	}
	if fi, _ := os.Stat(filepath.Join(vols, "sec", "password")); fi.Mode().Perm() != 0o400 {
		t.Errorf("secret file mode %v, want defaultMode 0400", fi.Mode().Perm())
	}

	// Mounts: configMap read-only whatever the pod says; subPath resolved inside the volume.
	c := &pb.Container{Name: "c", VolumeMounts: []*pb.VolumeMount{
		{Name: "cfg", MountPath: "/etc/cfg"},
		{Name: "scratch", MountPath: "/scratch", SubPath: "logs"},
	}}
	mounts, err := r.volumeMounts("u1", c)
	if err != nil {
		t.Fatal(err)
	}
	if got := mounts[0].Options[2]; got != "ro" {
		t.Errorf("configMap mount %v, want ro", mounts[0].Options)
	}
	if got := mounts[1].Source; got != filepath.Join(vols, "scratch", "logs") || mounts[1].Options[2] != "rw" {
		t.Errorf("subPath mount %+v", mounts[1])
	}
	if err := os.Symlink("/etc", filepath.Join(vols, "scratch", "escape")); err != nil {
		t.Fatal(err)
	}
	c.VolumeMounts[1].SubPath = "escape"
	if _, err := r.volumeMounts("u1", c); err == nil || !strings.Contains(err.Error(), "leads out") {
		t.Errorf("subPath through a symlink out of the volume: %v", err)
	}

	// A ConfigMap change reaches the files at the next set-up.
	objs.cms["cfg"] = &corev1.ConfigMap{Data: map[string]string{"greeting": "bonjour"}}
	if err := r.SetupVolumes(ctx, pod, objs); err != nil {
		t.Fatal(err)
	}
	if got := readVolFile(t, filepath.Join(vols, "cfg/conf/greeting.txt")); got != "bonjour" {
		t.Errorf("after the change: %q", got)
	}

	// Over the emptyDir's limit: evicted with the kubelet's message.
	if err := os.WriteFile(filepath.Join(vols, "scratch", "big"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var evict *agent.EvictionError
	if err := r.SetupVolumes(ctx, pod, objs); !errors.As(err, &evict) || !strings.Contains(evict.Message, `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi".`) {
		t.Errorf("over the limit: %v", err)
	}

	// A missing ConfigMap is an error to retry; hostPath is refused unless allowed.
	missing := podWithVolumes(t, map[string]corev1.VolumeSource{"m": {ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}}}})
	var refused *agent.VolumeRefusedError
	if err := r.SetupVolumes(ctx, missing, objs); !errors.Is(err, agent.ErrNotFound) || errors.As(err, &refused) {
		t.Errorf("missing configmap: %v", err)
	}
	host := podWithVolumes(t, map[string]corev1.VolumeSource{"h": {HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}}})
	if err := r.SetupVolumes(ctx, host, objs); !errors.As(err, &refused) || refused.Reason != "HostPathNotAllowed" {
		t.Errorf("hostPath without the opt-in: %v", err)
	}
	r.cfg.AllowHostPath = true
	if err := r.SetupVolumes(ctx, host, objs); err != nil {
		t.Errorf("hostPath allowed: %v", err)
	}

	if err := r.removeVolumes("u1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.podDir("u1")); !os.IsNotExist(err) {
		t.Errorf("pod dir left: %v", err)
	}
}
