package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/cluster/up"
)

// A newcomer's first steps end Ready whether or not this machine runs a real node next to the simulated
// ones: examples/pod.yaml and a plain burst of pods that did not ask for real containers. With a real
// node, none of them lands there (it is reserved by up.RealNodeTaint) and the examples meant for it
// tolerate the taint.
func TestMixedClusterSurprisesNoPod(t *testing.T) {
	for _, tt := range []struct {
		name string
		real bool
	}{
		{"containerd absent", false},
		{"containerd present", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := up.Config{Nodes: 3, StartDelay: 5 * time.Millisecond, Runtime: up.RuntimeFake}
			if tt.real {
				needContainerd(t)
				n := newRealNode(t) // its cleanup, after the cluster's, removes the containerd namespace
				cfg.Runtime, cfg.ContainerdAddress, cfg.RealNode = up.RuntimeContainerd, containerdAddress(), n.name
				cfg.RealNodePodCIDR, cfg.ContainerdNamespace = n.cidr, n.ns
				cfg.RegistryAddr = "off"
			} else {
				needKubectl(t)
			}
			cl, conn := startCluster(t, cfg)
			k := kube{t: t, kubeconfig: cl.Kubeconfig}
			if tt.real {
				out := k.must("get", "node", cfg.RealNode, "-o", "jsonpath={.spec.taints}")
				if !strings.Contains(out, up.RealNodeTaintKey) || !strings.Contains(out, "NoSchedule") {
					t.Fatalf("%s is not reserved: taints %s", cfg.RealNode, out)
				}
			}
			k.must("apply", "-f", "../examples/pod.yaml")
			client := apiClient(cl, 30*time.Second)
			const burst = 30
			for i := range burst {
				if code, body := post(t, client, cl.APIURL, "default", podJSON("default", fmt.Sprintf("burst-%d", i), "10m", "16Mi")); code != http.StatusCreated {
					t.Fatalf("create pod %d: %d %s", i, code, body)
				}
			}
			all := waitAll(t, conn, burst+1, 60*time.Second, isReady)
			for key, p := range all {
				if n := p.GetSpec().GetNodeName(); n != "" && n == cfg.RealNode {
					t.Errorf("pod %s landed on the real node", key)
				}
			}
			k.must("wait", "--for=condition=Ready", "pod/web", "--timeout=30s")

			if tt.real {
				// The examples meant for the real node tolerate its taint and select it.
				for _, f := range []string{"../examples/web.yaml", "../examples/busybox.yaml"} {
					out := k.must("create", "--dry-run=server", "-f", f, "-o", "jsonpath={.spec.tolerations}")
					if !strings.Contains(out, up.RealNodeTaintKey) {
						t.Errorf("%s does not tolerate the real node's taint: %s", f, out)
					}
				}
			}
		})
	}
}
