package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podbus/podbus/agent"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Volumes live under StateDir/pods/<uid>/volumes/<name>, as the kubelet's under its pods directory, and
// StateDir/pods/<uid>/volumes.json records where each is and how to mount it, for CreateContainer (bind
// mounts, read-only where the source must be) and for RemoveSandbox (tmpfs unmounted, everything
// removed). Kinds:
//
//	emptyDir               a directory (0777); medium Memory: a tmpfs of sizeLimit; on disk, usage over
//	                       sizeLimit evicts the pod
//	configMap, secret,     files written by the atomic writer (atomicwriter.go), brought up to date at
//	downwardAPI, projected every call, mounted read-only
//	hostPath               the host's path, only with Config.AllowHostPath

// volumeRecord is one set-up volume.
type volumeRecord struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"` // the source is always mounted read-only
	Memory   bool   `json:"memory,omitempty"`   // a tmpfs to unmount
}

func (r *Runtime) podDir(uid string) string     { return filepath.Join(r.cfg.StateDir, "pods", uid) }
func (r *Runtime) volumesDir(uid string) string { return filepath.Join(r.podDir(uid), "volumes") }
func (r *Runtime) volumesFile(uid string) string {
	return filepath.Join(r.podDir(uid), "volumes.json")
}

var _ agent.VolumeManager = (*Runtime)(nil)

// SetupVolumes implements agent.VolumeManager.
func (r *Runtime) SetupVolumes(ctx context.Context, pod *pb.Pod, objs agent.ObjectGetter) error {
	uid := pod.GetMetadata().GetUid()
	recs := map[string]volumeRecord{}
	var errs []error
	for _, v := range pod.GetSpec().GetVolumes() {
		src, err := volumeSource(v)
		if err != nil {
			return &agent.VolumeRefusedError{Reason: "InvalidVolume", Message: fmt.Sprintf("volume %q: %v", v.GetName(), err)}
		}
		rec, err := r.setupVolume(ctx, pod, v.GetName(), src, objs)
		var refused *agent.VolumeRefusedError
		var evict *agent.EvictionError
		switch {
		case errors.As(err, &refused) || errors.As(err, &evict):
			return err
		case err != nil:
			errs = append(errs, fmt.Errorf("volume %q: %w", v.GetName(), err))
			continue
		}
		recs[v.GetName()] = rec
	}
	if err := writeJSONFile(r.volumesFile(uid), recs); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// volumeSource is the volume's Kubernetes source (an emptyDir for a volume stored without one).
func volumeSource(v *pb.Volume) (corev1.VolumeSource, error) {
	var src corev1.VolumeSource
	if len(v.GetSource()) == 0 {
		src.EmptyDir = &corev1.EmptyDirVolumeSource{}
		return src, nil
	}
	err := json.Unmarshal(v.GetSource(), &src)
	return src, err
}

func (r *Runtime) setupVolume(ctx context.Context, pod *pb.Pod, name string, src corev1.VolumeSource, objs agent.ObjectGetter) (volumeRecord, error) {
	dir := filepath.Join(r.volumesDir(pod.GetMetadata().GetUid()), name)
	ns := pod.GetMetadata().GetNamespace()
	switch {
	case src.EmptyDir != nil:
		return r.setupEmptyDir(name, dir, src.EmptyDir)
	case src.HostPath != nil:
		return r.setupHostPath(name, src.HostPath)
	case src.ConfigMap != nil:
		files, err := configMapFiles(ctx, objs, ns, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, src.ConfigMap.DefaultMode)
		return writeFiles(dir, files, err)
	case src.Secret != nil:
		files, err := secretFiles(ctx, objs, ns, src.Secret.SecretName, src.Secret.Items, src.Secret.Optional, src.Secret.DefaultMode)
		return writeFiles(dir, files, err)
	case src.DownwardAPI != nil:
		files, err := downwardFiles(pod, src.DownwardAPI.Items, src.DownwardAPI.DefaultMode)
		return writeFiles(dir, files, err)
	case src.Projected != nil:
		files, err := projectedFiles(ctx, objs, pod, src.Projected)
		return writeFiles(dir, files, err)
	}
	return volumeRecord{}, &agent.VolumeRefusedError{Reason: "UnsupportedVolume",
		Message: fmt.Sprintf("volume %q: podbus mounts emptyDir, configMap, secret, hostPath, downwardAPI and projected volumes only", name)}
}

func writeFiles(dir string, files map[string]fileProjection, err error) (volumeRecord, error) {
	if err != nil {
		return volumeRecord{}, err
	}
	if _, err := writePayload(dir, files); err != nil {
		return volumeRecord{}, err
	}
	return volumeRecord{Path: dir, ReadOnly: true}, nil
}

// setupEmptyDir makes the directory (a tmpfs of sizeLimit for medium Memory) and checks a disk one
// against its sizeLimit, as the kubelet's eviction manager does.
func (r *Runtime) setupEmptyDir(name, dir string, ed *corev1.EmptyDirVolumeSource) (volumeRecord, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return volumeRecord{}, err
	}
	rec := volumeRecord{Path: dir, Memory: ed.Medium == corev1.StorageMediumMemory}
	if rec.Memory {
		mounted, err := isMountPoint(dir)
		if err != nil {
			return rec, err
		}
		if !mounted {
			opts := "mode=0777"
			if ed.SizeLimit != nil && ed.SizeLimit.Sign() > 0 {
				opts += fmt.Sprintf(",size=%d", ed.SizeLimit.Value())
			}
			if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
				return rec, fmt.Errorf("mount tmpfs: %w", err)
			}
		}
		return rec, nil
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return rec, err
	}
	if ed.SizeLimit != nil && ed.SizeLimit.Sign() > 0 {
		used, err := diskUsage(dir)
		if err != nil {
			return rec, err
		}
		if used > ed.SizeLimit.Value() {
			return rec, &agent.EvictionError{Message: fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q.", name, ed.SizeLimit.String())}
		}
	}
	return rec, nil
}

// setupHostPath checks (or makes, for the *OrCreate types) the host's path; refused unless the agent
// allows hostPath volumes.
func (r *Runtime) setupHostPath(name string, hp *corev1.HostPathVolumeSource) (volumeRecord, error) {
	if !r.cfg.AllowHostPath {
		return volumeRecord{}, &agent.VolumeRefusedError{Reason: "HostPathNotAllowed",
			Message: fmt.Sprintf("volume %q: hostPath volumes are not allowed on node %s (the agent's --allow-host-path is off)", name, r.cfg.NodeName)}
	}
	typ := corev1.HostPathUnset
	if hp.Type != nil {
		typ = *hp.Type
	}
	rec := volumeRecord{Path: hp.Path}
	switch typ {
	case corev1.HostPathDirectoryOrCreate:
		return rec, os.MkdirAll(hp.Path, 0o755)
	case corev1.HostPathFileOrCreate:
		f, err := os.OpenFile(hp.Path, os.O_RDONLY|os.O_CREATE, 0o644)
		if err != nil {
			return rec, err
		}
		return rec, f.Close()
	case corev1.HostPathUnset:
		return rec, nil
	}
	fi, err := os.Stat(hp.Path)
	if err != nil {
		return rec, fmt.Errorf("hostPath type check failed: %w", err)
	}
	m := fi.Mode()
	ok := map[corev1.HostPathType]bool{
		corev1.HostPathDirectory: m.IsDir(),
		corev1.HostPathFile:      m.IsRegular(),
		corev1.HostPathSocket:    m&fs.ModeSocket != 0,
		corev1.HostPathCharDev:   m&fs.ModeCharDevice != 0,
		corev1.HostPathBlockDev:  m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0,
	}[typ]
	if !ok {
		return rec, fmt.Errorf("hostPath type check failed: %s is not a %s", hp.Path, typ)
	}
	return rec, nil
}

func configMapFiles(ctx context.Context, objs agent.ObjectGetter, ns, name string, items []corev1.KeyToPath, optional *bool, def *int32) (map[string]fileProjection, error) {
	cm, err := objs.ConfigMap(ctx, ns, name)
	if errors.Is(err, agent.ErrNotFound) && optional != nil && *optional {
		return map[string]fileProjection{}, nil
	}
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", data, items, optional, def)
}

func secretFiles(ctx context.Context, objs agent.ObjectGetter, ns, name string, items []corev1.KeyToPath, optional *bool, def *int32) (map[string]fileProjection, error) {
	s, err := objs.Secret(ctx, ns, name)
	if errors.Is(err, agent.ErrNotFound) && optional != nil && *optional {
		return map[string]fileProjection{}, nil
	}
	if err != nil {
		return nil, err
	}
	return keyFiles("secret", s.Data, items, optional, def)
}

// keyFiles are the files of a ConfigMap's or Secret's keys: every key, or the items alone.
func keyFiles(kind string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, def *int32) (map[string]fileProjection, error) {
	out := map[string]fileProjection{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = fileProjection{Data: v, Mode: modeOf(nil, def)}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return nil, fmt.Errorf("%s references non-existent %s key: %s", kind, kind, it.Key)
		}
		out[it.Path] = fileProjection{Data: v, Mode: modeOf(it.Mode, def)}
	}
	return out, nil
}

// downwardFiles are the pod's fields and containers' resources a downwardAPI volume names.
func downwardFiles(pod *pb.Pod, items []corev1.DownwardAPIVolumeFile, def *int32) (map[string]fileProjection, error) {
	out := map[string]fileProjection{}
	md := pod.GetMetadata()
	for _, it := range items {
		var v string
		switch {
		case it.FieldRef != nil:
			fp := it.FieldRef.FieldPath
			switch fp {
			case "metadata.name":
				v = md.GetName()
			case "metadata.namespace":
				v = md.GetNamespace()
			case "metadata.uid":
				v = md.GetUid()
			case "metadata.labels":
				v = formatMap(md.GetLabels())
			case "metadata.annotations":
				v = formatMap(md.GetAnnotations())
			default:
				m, key, ok := subscript(fp)
				if !ok {
					return nil, fmt.Errorf("unsupported fieldPath %q", fp)
				}
				if m == "metadata.labels" {
					v = md.GetLabels()[key]
				} else {
					v = md.GetAnnotations()[key]
				}
			}
		case it.ResourceFieldRef != nil:
			var err error
			if v, err = resourceValue(pod, it.ResourceFieldRef); err != nil {
				return nil, err
			}
		}
		out[it.Path] = fileProjection{Data: []byte(v), Mode: modeOf(it.Mode, def)}
	}
	return out, nil
}

// subscript splits metadata.labels['key'].
func subscript(fp string) (string, string, bool) {
	base, rest, ok := strings.Cut(fp, "['")
	if !ok || !strings.HasSuffix(rest, "']") || (base != "metadata.labels" && base != "metadata.annotations") {
		return "", "", false
	}
	return base, strings.TrimSuffix(rest, "']"), true
}

// formatMap is the kubelet's: key="value" lines in key order.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%v=%q", k, m[k])
	}
	return b.String()
}

// resourceValue is a container's request or limit in units of the divisor, rounded up; a limit not set
// is the node's capacity, as the kubelet reports it.
func resourceValue(pod *pb.Pod, ref *corev1.ResourceFieldSelector) (string, error) {
	cs := pod.GetSpec().GetContainers()
	var c *pb.Container
	for _, x := range append(slices.Clone(cs), pod.GetSpec().GetInitContainers()...) {
		if x.GetName() == ref.ContainerName || (ref.ContainerName == "" && c == nil) {
			c = x
		}
	}
	if c == nil {
		return "", fmt.Errorf("container %q not found", ref.ContainerName)
	}
	kind, res, _ := strings.Cut(ref.Resource, ".")
	values := c.GetResources().GetLimits()
	if kind == "requests" {
		values = c.GetResources().GetRequests()
	}
	q := resource.Quantity{}
	if s, ok := values[res]; ok {
		var err error
		if q, err = resource.ParseQuantity(s); err != nil {
			return "", err
		}
	} else if kind == "limits" {
		cpu, mem, err := MachineCapacity()
		if err != nil {
			return "", err
		}
		node := map[string]string{"cpu": cpu, "memory": mem}[res]
		if node != "" {
			q = resource.MustParse(node)
		}
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	if res == "cpu" {
		return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / float64(div.MilliValue())))), nil
	}
	return fmt.Sprint(int64(math.Ceil(float64(q.Value()) / float64(div.Value())))), nil
}

func projectedFiles(ctx context.Context, objs agent.ObjectGetter, pod *pb.Pod, p *corev1.ProjectedVolumeSource) (map[string]fileProjection, error) {
	out := map[string]fileProjection{}
	ns := pod.GetMetadata().GetNamespace()
	for _, src := range p.Sources {
		var files map[string]fileProjection
		var err error
		switch {
		case src.ConfigMap != nil:
			files, err = configMapFiles(ctx, objs, ns, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, p.DefaultMode)
		case src.Secret != nil:
			files, err = secretFiles(ctx, objs, ns, src.Secret.Name, src.Secret.Items, src.Secret.Optional, p.DefaultMode)
		case src.DownwardAPI != nil:
			files, err = downwardFiles(pod, src.DownwardAPI.Items, p.DefaultMode)
		default:
			return nil, &agent.VolumeRefusedError{Reason: "UnsupportedVolume",
				Message: "projected volumes of podbus take configMap, secret and downwardAPI sources only"}
		}
		if err != nil {
			return nil, err
		}
		for k, f := range files {
			out[k] = f
		}
	}
	return out, nil
}

// volumeMounts are container c's mounts of its pod's volumes (set up by SetupVolumes).
func (r *Runtime) volumeMounts(uid string, c *pb.Container) ([]specs.Mount, error) {
	if len(c.GetVolumeMounts()) == 0 {
		return nil, nil
	}
	recs := map[string]volumeRecord{}
	if err := readJSONFile(r.volumesFile(uid), &recs); err != nil {
		return nil, fmt.Errorf("volumes of pod %s: %w", uid, err)
	}
	var out []specs.Mount
	for _, m := range c.GetVolumeMounts() {
		rec, ok := recs[m.GetName()]
		if !ok {
			return nil, fmt.Errorf("volume %q is not set up", m.GetName())
		}
		src := rec.Path
		if sp := m.GetSubPath(); sp != "" {
			var err error
			if src, err = subPathSource(rec.Path, sp); err != nil {
				return nil, fmt.Errorf("volume %q: %w", m.GetName(), err)
			}
		}
		mode := "rw"
		if m.GetReadOnly() || rec.ReadOnly {
			mode = "ro"
		}
		out = append(out, specs.Mount{Destination: m.GetMountPath(), Type: "bind", Source: src,
			Options: []string{"rbind", "rprivate", mode}})
	}
	return out, nil
}

// subPathSource is sub inside the volume at base, made as a directory when absent (as the kubelet
// does), refused when its symlinks lead out of the volume.
func subPathSource(base, sub string) (string, error) {
	if err := checkPayloadPath(sub); err != nil {
		return "", err
	}
	p := filepath.Join(base, sub)
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(p, 0o777); err != nil {
			return "", err
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return "", err
	}
	if real != realBase && !strings.HasPrefix(real, realBase+string(filepath.Separator)) {
		return "", fmt.Errorf("subPath %q leads out of the volume", sub)
	}
	return real, nil
}

// removeVolumes unmounts the pod's tmpfs volumes and removes its volumes directory.
func (r *Runtime) removeVolumes(uid string) error {
	recs := map[string]volumeRecord{}
	if err := readJSONFile(r.volumesFile(uid), &recs); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("volumes record unreadable", "pod", uid, "err", err)
	}
	for name, rec := range recs {
		if !rec.Memory {
			continue
		}
		if err := unix.Unmount(rec.Path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("unmount volume %q of pod %s: %w", name, uid, err)
		}
	}
	if err := os.RemoveAll(r.volumesDir(uid)); err != nil {
		return fmt.Errorf("remove volumes of pod %s: %w", uid, err)
	}
	if err := os.Remove(r.volumesFile(uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_ = os.Remove(r.podDir(uid)) // only when empty: other per-pod files may live there
	return nil
}

// isMountPoint reports whether dir is on another device than its parent.
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// diskUsage is the space dir's files take (du), in bytes.
func diskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed while walking
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	return total, err
}

func writeJSONFile(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSONFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}
