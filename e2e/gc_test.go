package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
)

// owned is a ConfigMap and a pod owned by the ConfigMap owner (uid).
func owned(suffix, uid string) string {
	ref := `ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: ` + uid + `, blockOwnerDeletion: true}]`
	return `apiVersion: v1
kind: ConfigMap
metadata: {name: dep-` + suffix + `, ` + ref + `}
data: {k: v}
---
apiVersion: v1
kind: Pod
metadata: {name: pod-` + suffix + `, ` + ref + `}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: example.local/app:1, resources: {requests: {cpu: 10m}}}]
`
}

// kubectl delete of an owner with each propagation policy: background (the default) deletes the
// dependents after the owner, foreground before it (kubectl waits for the owner, which the
// foregroundDeletion finalizer holds until its blocking dependents are gone), orphan leaves them
// without the ownerReference.
func TestDeletePropagation(t *testing.T) {
	needKubectl(t)
	cl, _ := startCluster(t, up.Config{Nodes: 1, StartDelay: 20 * time.Millisecond})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	gone := func(kind, name string) bool {
		_, err := k.run("get", kind, name)
		return err != nil
	}
	for _, tc := range []struct{ name, cascade string }{
		{"background", ""}, {"foreground", "--cascade=foreground"}, {"orphan", "--cascade=orphan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := kube{t: t, kubeconfig: cl.Kubeconfig}
			k.must("create", "configmap", "owner", "--from-literal=a=b")
			uid := k.must("get", "configmap", "owner", "-o", "jsonpath={.metadata.uid}")
			k.must("apply", "-f", writeFile(t, "deps.yaml", owned(tc.name, uid)))
			k.must("wait", "--for=condition=Ready", "pod/pod-"+tc.name, "--timeout=60s")
			args := []string{"delete", "configmap", "owner", "--timeout=60s"}
			if tc.cascade != "" {
				args = append(args, tc.cascade)
			}
			k.must(args...)
			if tc.name == "foreground" && (!gone("configmap", "dep-"+tc.name) || !gone("pod", "pod-"+tc.name)) {
				t.Fatal("foreground: the owner went before its blocking dependents")
			}
			if tc.name == "orphan" {
				// The orphan finalizer held the owner until the references were gone.
				for _, obj := range []string{"configmap/dep-orphan", "pod/pod-orphan"} {
					refs := k.must("get", obj, "-o", "jsonpath={.metadata.ownerReferences}")
					if strings.TrimSpace(refs) != "" {
						t.Errorf("%s still owned: %s", obj, refs)
					}
				}
				k.must("delete", "configmap/dep-orphan", "pod/pod-orphan", "--grace-period=0", "--force")
				return
			}
			bustest.Eventually(t, 60*time.Second, func() bool { return gone("configmap", "dep-"+tc.name) && gone("pod", "pod-"+tc.name) },
				"%s: dependents left", tc.name)
		})
	}
}
