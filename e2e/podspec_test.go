package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Container details on a real node: a container over its memory limit ends OOMKilled; a failing init
// container blocks the app container and shows Init:Error (restartPolicy Never) or Init:CrashLoopBackOff;
// /etc/hosts has the pod's IP, name and hostAliases; runAsUser and runAsGroup apply; a read-only root
// filesystem is read-only; runAsNonRoot refuses busybox's root user with CreateContainerConfigError.
func TestContainerdPodSpec(t *testing.T) {
	needContainerd(t)
	reg := builtinRegistry(t)
	n := newRealNode(t)
	cl, conn := startCluster(t, up.Config{Nodes: 0})
	n.startAgent(t, cl.NATSURL)
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	bustest.Eventually(t, 30*time.Second, func() bool {
		out, _ := k.run("get", "nodes")
		return strings.Contains(out, " Ready ")
	}, "the real node Ready")

	box := reg + "/podbus/busybox:latest"
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: oom}
spec:
%[1]s  restartPolicy: Never
  containers:
  - name: hog
    image: %[2]s
    command: ["sh", "-c", "x=a; while :; do x=$x$x; done"]
    resources: {limits: {memory: 20Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: init-never}
spec:
%[1]s  restartPolicy: Never
  initContainers:
  - {name: ok, image: %[2]s, command: ["true"]}
  - {name: fails, image: %[2]s, command: ["sh", "-c", "exit 2"]}
  containers:
  - {name: app, image: %[2]s, command: ["sleep", "3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: init-loop}
spec:
%[1]s  initContainers:
  - {name: fails, image: %[2]s, command: ["sh", "-c", "exit 1"]}
  containers:
  - {name: app, image: %[2]s, command: ["sleep", "3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: etc}
spec:
%[1]s  terminationGracePeriodSeconds: 1
  hostAliases: [{ip: 10.1.2.3, hostnames: [alias.example]}]
  securityContext: {runAsUser: 1234, runAsGroup: 5678}
  containers:
  - name: show
    image: %[2]s
    command: ["sh", "-c", "cat /etc/hosts /etc/resolv.conf; echo uid=$(id -u) gid=$(id -g) host=$(hostname); sleep 3600"]
  - name: ro
    image: %[2]s
    command: ["sh", "-c", "touch /x 2>/dev/null && echo writable || echo read-only root; sleep 3600"]
    securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Pod
metadata: {name: nonroot}
spec:
%[1]s  securityContext: {runAsNonRoot: true}
  containers:
  - {name: app, image: %[2]s, command: ["sleep", "3600"]}
`, pinned(n.name), box)
	k.must("apply", "-f", writeFile(t, "podspec.yaml", manifest))

	// The STATUS column kubectl prints, polled until it shows want.
	status := func(pod, want string) {
		t.Helper()
		bustest.Eventually(t, 60*time.Second, func() bool {
			out, _ := k.run("get", "pod", pod, "--no-headers")
			return strings.Contains(out, " "+want+" ")
		}, pod+" shown as "+want)
	}

	oom := waitPod(t, conn, "oom", 60*time.Second, "terminated", func(p *pb.Pod) bool {
		return firstStatus(p).GetState().GetTerminated() != nil
	})
	if term := firstStatus(oom).GetState().GetTerminated(); term.GetReason() != "OOMKilled" || term.GetExitCode() != 137 {
		t.Errorf("oom: terminated %v, want OOMKilled with exit code 137", term)
	}
	status("oom", "OOMKilled")

	status("init-never", "Init:Error")
	never := storedPod(t, conn, "default", "init-never")
	if ph := never.GetStatus().GetPhase(); ph != "Failed" {
		t.Errorf("init-never: phase %s, want Failed", ph)
	}
	if w := firstStatus(never).GetState().GetWaiting(); w.GetReason() != "PodInitializing" {
		t.Errorf("init-never: app container %v, want waiting PodInitializing (never started)", firstStatus(never).GetState())
	}
	status("init-loop", "Init:CrashLoopBackOff")
	if loop := storedPod(t, conn, "default", "init-loop"); firstStatus(loop).GetState().GetRunning() != nil {
		t.Errorf("init-loop: the app container runs although init failed")
	}

	status("nonroot", "CreateContainerConfigError")
	nonroot := storedPod(t, conn, "default", "nonroot")
	if msg := firstStatus(nonroot).GetState().GetWaiting().GetMessage(); !strings.Contains(msg, "container has runAsNonRoot and image will run as root") {
		t.Errorf("nonroot: waiting message %q", msg)
	}

	etc := waitPod(t, conn, "etc", 60*time.Second, "Running", func(p *pb.Pod) bool { return p.GetStatus().GetPhase() == "Running" })
	ip := etc.GetStatus().GetPodIp()
	var out string
	bustest.Eventually(t, 20*time.Second, func() bool {
		out, _ = k.run("logs", "etc", "-c", "show")
		return strings.Contains(out, "uid=")
	}, "etc's output")
	for _, want := range []string{ip + "\tetc\n", "10.1.2.3\talias.example", "127.0.0.1\tlocalhost", "search default.svc.cluster.local",
		"options ndots:5", "uid=1234 gid=5678 host=etc"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs etc -c show: no %q in\n%s", want, out)
		}
	}
	bustest.Eventually(t, 20*time.Second, func() bool {
		out, _ = k.run("logs", "etc", "-c", "ro")
		return strings.Contains(out, "read-only root")
	}, "ro's output saying its root is read-only")
}
