package admission

import (
	"strings"
	"testing"
)

// TestKubectlConfigMapsNamespaces drives ConfigMaps and Namespaces, two kinds on the generic handlers,
// with the real kubectl.
func TestKubectlConfigMapsNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real kubectl")
	}
	e := start(t, nil, false)
	k := newKubectl(t, e.base)

	mustContain(t, k.run(false, "create", "configmap", "app", "--from-literal=mode=prod", "--from-literal=level=debug"), "configmap/app created")
	cmYAML := k.file("cm.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: files
data:
  a.conf: "x=1"
`)
	mustContain(t, k.run(false, "create", "-f", cmYAML), "configmap/files created")
	mustContain(t, k.run(true, "create", "-f", cmYAML), "AlreadyExists")
	out := k.run(false, "get", "cm")
	mustContain(t, out, "NAME", "DATA", "AGE", "app", "files")
	if f := fieldsOf(out, "app"); len(f) < 2 || f[1] != "2" {
		t.Errorf("get cm: app row %v, want 2 data entries:\n%s", f, out)
	}
	mustContain(t, k.run(false, "describe", "cm", "app"), "Name:", "app", "Namespace:", "default", "Data", "mode:", "prod")
	badYAML := k.file("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad}\ndata: {a/b: x}\n")
	mustContain(t, k.run(true, "create", "-f", badYAML), "is invalid", "a valid config key must consist of alphanumeric characters")

	// edit: PUT through the editor, then a patch.
	editor := k.file("editor.sh", "#!/bin/sh\nsed -i 's/mode: prod/mode: staging/' \"$1\"\n")
	k.env = append(k.env, "KUBE_EDITOR=sh "+editor)
	mustContain(t, k.run(false, "edit", "cm", "app"), "configmap/app edited")
	mustContain(t, k.run(false, "get", "cm", "app", "-o", "jsonpath={.data.mode}"), "staging")
	mustContain(t, k.run(false, "patch", "cm", "app", "-p", `{"data":{"level":"info"}}`), "configmap/app patched")
	mustContain(t, k.run(false, "patch", "cm", "app", "--type=merge", "-p", `{"immutable":true}`), "configmap/app patched")
	mustContain(t, k.run(true, "patch", "cm", "app", "-p", `{"data":{"level":"warn"}}`), "field is immutable when `immutable` is set")
	mustContain(t, k.run(false, "delete", "cm", "app", "files"), `configmap "app" deleted`, `configmap "files" deleted`)
	mustContain(t, k.run(false, "get", "cm"), "No resources found")

	// Namespaces: create, list, create into it, and the refusals.
	mustContain(t, k.run(false, "create", "namespace", "team-a"), "namespace/team-a created")
	out = k.run(false, "get", "ns")
	mustContain(t, out, "NAME", "STATUS", "AGE", "team-a", "Active", "kube-node-lease")
	mustContain(t, k.run(false, "describe", "ns", "team-a"), "Name:", "team-a", "Status:", "Active")
	mustContain(t, k.run(false, "create", "configmap", "c", "-n", "team-a", "--from-literal=k=v"), "configmap/c created")
	mustContain(t, k.run(true, "create", "configmap", "c", "-n", "nowhere", "--from-literal=k=v"), `namespaces "nowhere" not found`)
	mustContain(t, k.run(true, "delete", "namespace", "default"), "this namespace may not be deleted")
	mustContain(t, k.run(false, "get", "ns", "team-a", "-o", "jsonpath={.spec.finalizers}"), "kubernetes")
	// Without a namespace controller the namespace stays Terminating; kubectl does not wait.
	mustContain(t, k.run(false, "delete", "namespace", "team-a", "--wait=false"), `namespace "team-a" deleted`)
	mustContain(t, k.run(false, "get", "ns", "team-a"), "Terminating")
	mustContain(t, k.run(true, "create", "configmap", "d", "-n", "team-a", "--from-literal=k=v"),
		"unable to create new content in namespace team-a because it is being terminated")
}

// fieldsOf returns the whitespace-separated fields of the line of out starting with name.
func fieldsOf(out, name string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}
