package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/secretbox"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// TestContainerdVolumes: a real pod reads (kubectl exec … cat) a ConfigMap, a Secret, an emptyDir (on disk, in memory, by
// subPath, read-only) and downwardAPI files; a ConfigMap change reaches its file within the sync period;
// a pod naming a missing ConfigMap stays ContainerCreating with FailedMount; filling an emptyDir past
// its sizeLimit evicts the pod. The Secret is sealed in its bucket and absent from AUDIT and events.
func TestContainerdVolumes(t *testing.T) {
	needContainerd(t)
	reg := builtinRegistry(t)
	n := newRealNode(t)
	dataDir := t.TempDir()
	cl, conn := startCluster(t, up.Config{Nodes: 0, DataDir: dataDir})
	box, err := secretbox.Load(filepath.Join(dataDir, up.EncryptionKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	// The API's encryption key, so the node opens the Secrets its pods mount.
	n.startAgent(t, cl.NATSURL, func(c *agent.Config) { c.SecretBox = box })
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	bustest.Eventually(t, 30*time.Second, func() bool {
		out, _ := k.run("get", "nodes")
		return strings.Contains(out, " Ready ")
	}, "real node Ready")

	k.must("create", "configmap", "cfg", "--from-literal=greeting=hello")
	k.must("create", "secret", "generic", "db", "--from-literal=password=hunter2")
	if out := k.must("get", "secret", "db", "-o", "yaml"); !strings.Contains(out, "password: aHVudGVyMg==") {
		t.Errorf("get secret -o yaml:\n%s", out)
	}
	if out := k.must("get", "secrets"); !strings.Contains(out, "TYPE") || !strings.Contains(out, "Opaque") {
		t.Errorf("get secrets:\n%s", out)
	}

	box1 := reg + "/podbus/busybox:latest"
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: vols, labels: {app: vols}}
spec:
%[1]s  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %[2]s
    resources: {limits: {cpu: 100m, memory: 32Mi}}
    command: ["sh", "-c", "echo x > /scratch/f; sleep 3600"]
    volumeMounts:
    - {name: cfg, mountPath: /etc/cfg}
    - {name: cfg, mountPath: /greeting.txt, subPath: greeting}
    - {name: sec, mountPath: /etc/sec}
    - {name: info, mountPath: /etc/info}
    - {name: scratch, mountPath: /scratch}
    - {name: scratch, mountPath: /ro, readOnly: true}
    - {name: mem, mountPath: /mem}
  volumes:
  - {name: cfg, configMap: {name: cfg}}
  - {name: sec, secret: {secretName: db}}
  - {name: scratch, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 1Mi}}
  - name: info
    downwardAPI:
      items:
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
---
apiVersion: v1
kind: Pod
metadata: {name: pending}
spec:
%[1]s  containers:
  - name: c
    image: %[2]s
    command: ["sleep", "3600"]
    volumeMounts: [{name: cfg, mountPath: /etc/cfg}]
  volumes: [{name: cfg, configMap: {name: nope}}]
---
apiVersion: v1
kind: Pod
metadata: {name: filler}
spec:
%[1]s  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %[2]s
    command: ["sh", "-c", "dd if=/dev/zero of=/scratch/big bs=1024 count=4096; sleep 3600"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  volumes: [{name: scratch, emptyDir: {sizeLimit: 1Mi}}]
`, pinned(n.name), box1)
	k.must("apply", "-f", writeFile(t, "vols.yaml", manifest))

	// execHas polls until the command run by kubectl exec in vols prints want.
	execHas := func(what string, cmd []string, want string, limit time.Duration) {
		t.Helper()
		var out string
		var err error
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			out, err = k.run(append([]string{"exec", "vols", "--"}, cmd...)...)
			if err == nil && strings.TrimSpace(out) == want {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Errorf("%s: kubectl exec vols -- %s: want %q after %s, got %v\n%q", what, strings.Join(cmd, " "), want, limit, err, out)
	}
	waitPod(t, conn, "vols", 60*time.Second, "Running", func(p *pb.Pod) bool { return p.GetStatus().GetPhase() == "Running" })
	for _, c := range []struct {
		what string
		cmd  []string
		want string
	}{
		{"emptyDir", []string{"cat", "/scratch/f"}, "x"},
		{"configMap", []string{"cat", "/etc/cfg/greeting"}, "hello"},
		{"configMap by subPath", []string{"cat", "/greeting.txt"}, "hello"},
		{"secret", []string{"cat", "/etc/sec/password"}, "hunter2"},
		{"downwardAPI name", []string{"cat", "/etc/info/name"}, "vols"},
		{"downwardAPI labels", []string{"cat", "/etc/info/labels"}, `app="vols"`},
		{"emptyDir in memory, sizeLimit", []string{"sh", "-c", "df -k /mem | tail -1 | awk '{print $2}'"}, "1024"},
		{"readOnly mount", []string{"sh", "-c", "touch /ro/x 2>/dev/null && echo RW || echo RO"}, "RO"},
	} {
		execHas(c.what, c.cmd, c.want, 30*time.Second)
	}

	// A ConfigMap change reaches the file within the sync period (10s), the subPath mount keeping its
	// first content as in kube.
	k.must("patch", "configmap", "cfg", "--type=merge", "-p", `{"data":{"greeting":"bonjour"}}`)
	execHas("updated configMap", []string{"cat", "/etc/cfg/greeting"}, "bonjour", 40*time.Second)
	execHas("configMap by subPath after the update", []string{"cat", "/greeting.txt"}, "hello", 5*time.Second)

	// A missing ConfigMap: ContainerCreating with FailedMount events, as kube.
	if out := k.must("get", "pod", "pending"); !strings.Contains(out, "ContainerCreating") {
		t.Errorf("pod naming a missing configmap:\n%s", out)
	}
	bustest.Eventually(t, 30*time.Second, func() bool {
		out, _ := k.run("get", "events", "--field-selector", "involvedObject.name=pending")
		return strings.Contains(out, "FailedMount")
	}, "FailedMount event")

	// Past its sizeLimit the emptyDir evicts its pod.
	p := waitPod(t, conn, "filler", 60*time.Second, "Evicted", func(p *pb.Pod) bool { return p.GetStatus().GetPhase() == "Failed" })
	if p.GetStatus().GetReason() != "Evicted" || !strings.Contains(p.GetStatus().GetMessage(), `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi"`) {
		t.Errorf("filler: reason %q message %q", p.GetStatus().GetReason(), p.GetStatus().GetMessage())
	}

	// At rest the Secret is sealed; AUDIT and events never hold its data.
	kv, err := conn.JS.KeyValue(context.Background(), bus.BucketSecrets)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), bus.ObjectKey("default", "db"))
	if err != nil || !secretbox.Sealed(e.Value()) || bytes.Contains(e.Value(), []byte("aHVudGVyMg")) {
		t.Errorf("stored secret: %v, sealed %v", err, err == nil && secretbox.Sealed(e.Value()))
	}
	for _, stream := range []string{bus.StreamAudit, bus.StreamEvents} {
		for _, m := range bustest.Messages(t, conn, stream, ">") {
			if bytes.Contains(m.Data, []byte("hunter2")) || bytes.Contains(m.Data, []byte("aHVudGVyMg")) {
				t.Errorf("%s holds the secret: %s %q", stream, m.Subject, m.Data)
			}
		}
	}
	k.must("delete", "pod", "vols", "pending", "filler", "--wait=false")
}
