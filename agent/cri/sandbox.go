package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/pkg/netns"

	"github.com/podbus/podbus/agent"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// sandboxRecord is what the runtime keeps of a sandbox in StateDir/sandboxes/<pod uid>.json. It is
// written before CNI ADD (without IP), so a crash in between leaves a record that reconciliation removes
// rather than a netns and an IP nobody knows of.
type sandboxRecord struct {
	ID           string        `json:"id"`
	PodUID       string        `json:"podUID"`
	Namespace    string        `json:"namespace"`
	Name         string        `json:"name"`
	NetNS        string        `json:"netns"`
	IPs          []string      `json:"ips,omitempty"`
	PortMappings []portMapping `json:"portMappings,omitempty"`
	Created      time.Time     `json:"created"`
	Spec         []byte        `json:"spec,omitempty"` // see podSettings
}

func (rec *sandboxRecord) sandbox() agent.Sandbox {
	sb := agent.Sandbox{ID: rec.ID, PodUID: rec.PodUID, Namespace: rec.Namespace, Name: rec.Name, IPs: rec.IPs, CreatedAt: rec.Created}
	if len(rec.IPs) > 0 {
		sb.IP = rec.IPs[0]
	}
	return sb
}

func sandboxDir(stateDir string) string { return filepath.Join(stateDir, "sandboxes") }

func (r *Runtime) recordPath(uid string) string {
	return filepath.Join(sandboxDir(r.cfg.StateDir), uid+".json")
}

func (r *Runtime) loadRecord(uid string) (*sandboxRecord, error) {
	b, err := os.ReadFile(r.recordPath(uid))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sandbox of pod %s: %w", uid, agent.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read sandbox record: %w", err)
	}
	var rec sandboxRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("sandbox record %s: %w", r.recordPath(uid), err)
	}
	return &rec, nil
}

// saveRecord writes the record atomically (temp file, fsync, rename).
func (r *Runtime) saveRecord(rec *sandboxRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	path := r.recordPath(rec.PodUID)
	f, err := os.CreateTemp(filepath.Dir(path), ".rec-*")
	if err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	return nil
}

// RunSandbox implements agent.SandboxManager: netns, record, CNI ADD, record with the IP.
func (r *Runtime) RunSandbox(ctx context.Context, pod *pb.Pod) (_ agent.Sandbox, retErr error) {
	md := pod.GetMetadata()
	uid := md.GetUid()
	if uid == "" {
		return agent.Sandbox{}, errors.New("run sandbox: pod without uid")
	}
	unlock := r.lock(uid)
	defer unlock()
	if rec, err := r.loadRecord(uid); err == nil && len(rec.IPs) > 0 {
		return rec.sandbox(), nil
	} else if err == nil {
		// A start that crashed before its IP was recorded: start over.
		if err := r.removeSandbox(ctx, rec); err != nil {
			return agent.Sandbox{}, err
		}
	}

	// Created before the record that names it: a crash in between leaves a netns of the node that no
	// record names, which New sweeps (see NetNSDir).
	ns, err := netns.NewNetNS(NetNSDir(r.cfg.StateDir))
	if err != nil {
		return agent.Sandbox{}, fmt.Errorf("create netns for pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	defer func() {
		if retErr != nil {
			if err := ns.Remove(); err != nil {
				r.log.Warn("undo netns", "path", ns.GetPath(), "err", err)
			}
		}
	}()
	rec := &sandboxRecord{
		ID: newID(), PodUID: uid, Namespace: md.GetNamespace(), Name: md.GetName(),
		NetNS: ns.GetPath(), PortMappings: hostPorts(pod), Created: time.Now(), Spec: podSettings(pod),
	}
	if err := r.saveRecord(rec); err != nil {
		return agent.Sandbox{}, err
	}
	defer func() {
		if retErr != nil {
			if err := os.Remove(r.recordPath(uid)); err != nil {
				r.log.Warn("undo sandbox record", "pod", uid, "err", err)
			}
		}
	}()
	ips, err := r.setupNetwork(ctx, rec)
	if err != nil {
		return agent.Sandbox{}, fmt.Errorf("setup network for pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	defer func() {
		if retErr != nil {
			dctx, cancel := cleanupContext(ctx)
			defer cancel()
			if err := r.teardownNetwork(dctx, rec); err != nil {
				r.log.Warn("undo network", "sandbox", rec.ID, "err", err)
			}
		}
	}()
	rec.IPs = ips
	defer func() {
		if retErr != nil {
			_ = r.removeEtcFiles(uid)
		}
	}()
	if err := r.writeEtcFiles(rec); err != nil {
		return agent.Sandbox{}, fmt.Errorf("run sandbox for pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	if err := r.saveRecord(rec); err != nil {
		return agent.Sandbox{}, err
	}
	return rec.sandbox(), nil
}

// hostPorts are the pod's hostPort mappings for the portmap plugin.
func hostPorts(pod *pb.Pod) []portMapping {
	var out []portMapping
	for _, c := range pod.GetSpec().GetContainers() {
		for _, p := range c.GetPorts() {
			if p.GetHostPort() <= 0 {
				continue
			}
			proto := strings.ToLower(p.GetProtocol())
			if proto == "" {
				proto = "tcp"
			}
			out = append(out, portMapping{HostPort: p.GetHostPort(), ContainerPort: p.GetContainerPort(), Protocol: proto, HostIP: p.GetHostIp()})
		}
	}
	return out
}

// startedRecord is sb's record, if sb is the pod's current sandbox and its start completed.
func (r *Runtime) startedRecord(sb agent.Sandbox) (*sandboxRecord, error) {
	rec, err := r.loadRecord(sb.PodUID)
	if err != nil {
		return nil, err
	}
	if rec.ID != sb.ID {
		return nil, fmt.Errorf("sandbox %s of pod %s: %w", sb.ID, sb.PodUID, agent.ErrNotFound)
	}
	if len(rec.IPs) == 0 {
		return nil, fmt.Errorf("sandbox %s has no IP: its start did not complete", sb.ID)
	}
	return rec, nil
}

// CheckSandbox implements agent.SandboxManager (CNI CHECK).
func (r *Runtime) CheckSandbox(ctx context.Context, sb agent.Sandbox) error {
	rec, err := r.startedRecord(sb)
	if err != nil {
		return err
	}
	return r.checkNetwork(ctx, rec)
}

// RemoveSandbox implements agent.SandboxManager: containers (with their tasks and snapshots), CNI DEL,
// netns, logs, record. Each step tolerates what an earlier, interrupted removal already did.
func (r *Runtime) RemoveSandbox(ctx context.Context, sb agent.Sandbox) error {
	unlock := r.lock(sb.PodUID)
	defer unlock()
	rec, err := r.loadRecord(sb.PodUID)
	if errors.Is(err, agent.ErrNotFound) {
		// No record; containers may still exist (a crash between removing the record and them cannot
		// happen, but a container without a record costs nothing to look for).
		return r.removePodContainers(ctx, sb.PodUID)
	}
	if err != nil {
		return err
	}
	return r.removeSandbox(ctx, rec)
}

func (r *Runtime) removeSandbox(ctx context.Context, rec *sandboxRecord) error {
	if err := r.removePodContainers(ctx, rec.PodUID); err != nil {
		return err
	}
	if err := r.teardownNetwork(ctx, rec); err != nil {
		return fmt.Errorf("remove sandbox %s of pod %s/%s: %w", rec.ID, rec.Namespace, rec.Name, err)
	}
	if err := netns.LoadNetNS(rec.NetNS).Remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", rec.NetNS, err)
	}
	if err := os.RemoveAll(filepath.Join(r.cfg.StateDir, "logs", rec.PodUID)); err != nil {
		return fmt.Errorf("remove logs of pod %s: %w", rec.PodUID, err)
	}
	if err := r.removeVolumes(rec.PodUID); err != nil {
		return err
	}
	if err := r.removeEtcFiles(rec.PodUID); err != nil {
		return err
	}
	if err := os.Remove(r.recordPath(rec.PodUID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove sandbox record: %w", err)
	}
	return nil
}

// ListSandboxes implements agent.SandboxManager from the records and the containers' labels.
func (r *Runtime) ListSandboxes(ctx context.Context) ([]agent.SandboxInfo, error) {
	// Containers first, then records: a pod's record is written before its first container and
	// removed after its last, so a container listed here has its record found below unless the pod
	// was removed meanwhile. The other order would take a container created between the two reads,
	// while the agent starts pods, for one without a record, and remove it.
	byUID, err := r.podContainers(ctx, "")
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(sandboxDir(r.cfg.StateDir))
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []agent.SandboxInfo
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		rec, err := r.loadRecord(uid)
		if err != nil {
			r.log.Warn("unreadable sandbox record", "file", e.Name(), "err", err)
			continue
		}
		info := agent.SandboxInfo{Sandbox: rec.sandbox()}
		for _, c := range byUID[uid] {
			st, err := r.status(ctx, c)
			if err != nil {
				return nil, err
			}
			info.Containers = append(info.Containers, st)
		}
		out = append(out, info)
		delete(byUID, uid)
	}
	// Containers whose sandbox record is gone cannot be adopted: remove them.
	for uid := range byUID {
		r.log.Info("removing containers without a sandbox", "pod", uid)
		if err := r.removePodContainers(ctx, uid); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cleanupContext is for undoing: the caller's context may be cancelled already.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}
