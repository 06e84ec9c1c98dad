// Package archtest holds the layering rules of the module as a test: services meet only on the bus, and
// the transport and message packages import nothing above them.
package archtest

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/podbus/podbus"

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

// listPackages runs go list -deps -test over the whole module and keeps the module's own packages.
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Deps", "-tags", "compose", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

// service is the service a package belongs to ("services/binder" for services/binder/x), or "".
func service(path string) string {
	p := strings.Split(rel(path), "/")
	if len(p) >= 2 && p[0] == "services" {
		return p[0] + "/" + p[1]
	}
	return ""
}

func under(path string, roots ...string) bool {
	r := rel(path)
	for _, root := range roots {
		if r == root || strings.HasPrefix(r, root+"/") {
			return true
		}
	}
	return false
}

// violations checks one package's imports against the rules and returns one line per broken rule.
// Tests may compose a library with the services that use it, so for a test's own imports only the
// rule between services holds.
func violations(p pkg, imports []string, test bool) []string {
	var out []string
	self := rel(p.ImportPath)
	for _, imp := range imports {
		if !strings.HasPrefix(imp, module+"/") || imp == p.ImportPath {
			continue
		}
		r := rel(imp)
		switch {
		case service(p.ImportPath) != "" && service(imp) != "" && service(imp) != service(p.ImportPath):
			out = append(out, fmt.Sprintf("%s imports another service, %s: services meet only on the bus", self, r))
		case test:
		case under(p.ImportPath, "proto"):
			out = append(out, fmt.Sprintf("%s imports %s: proto imports nothing of the module", self, r))
		case under(p.ImportPath, "bus") && !under(imp, "bus", "proto", "internal/metrics", "internal/ctxtime"):
			out = append(out, fmt.Sprintf("%s imports %s: bus is transport and sits on proto and leaf helpers", self, r))
		case under(p.ImportPath, "sched", "internal", "agent", "bus", "proto", "audit") && under(imp, "services", "cluster", "cmd", "loadtest", "e2e"):
			out = append(out, fmt.Sprintf("%s imports %s: libraries sit below the services and the composition roots", self, r))
		case under(p.ImportPath, "sched") && under(imp, "agent"):
			out = append(out, fmt.Sprintf("%s imports %s: the scheduling library knows no agent", self, r))
		}
	}
	return out
}

func TestLayering(t *testing.T) {
	pkgs := listPackages(t)
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) || strings.HasSuffix(p.ImportPath, ".test") || strings.Contains(p.ImportPath, " [") {
			continue
		}
		for _, v := range violations(p, p.Deps, false) {
			t.Error(v)
		}
		for _, v := range violations(p, append(append([]string{}, p.TestImports...), p.XTestImports...), true) {
			t.Error(v)
		}
	}
}

// TestRulesCatchViolations proves the rules fire on the imports they forbid.
func TestRulesCatchViolations(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	tests := []struct {
		pkg, imp string
		test     bool
		bad      bool
	}{
		{"services/binder", "services/scheduler", false, true},
		{"services/binder/sub", "services/scheduler/x", false, true},
		{"services/binder", "sched/framework", false, false},
		{"services/scheduler", "services/scheduler/internal", false, false},
		{"bus", "internal/events", false, true},
		{"bus", "proto/podbusv1", false, false},
		{"bus", "internal/metrics", false, false},
		{"bus", "internal/ctxtime", false, false},
		{"proto/podbusv1", "bus", false, true},
		{"sched/cache", "services/scheduler", false, true},
		{"sched/cache", "agent", false, true},
		{"audit", "services/scheduler", false, true},
		{"audit", "sched/framework", false, false},
		{"internal/events", "cluster/up", false, true},
		{"cluster/up", "services/binder", false, false},
		{"cmd/podbus", "services/store", false, false},
		{"services/binder", "services/scheduler", true, true},
		{"agent", "services/status", true, false},
	}
	for _, tt := range tests {
		got := violations(pkg{ImportPath: m(tt.pkg)}, []string{m(tt.imp)}, tt.test)
		if bad := len(got) > 0; bad != tt.bad {
			t.Errorf("%s -> %s: violation %v, want %v (%v)", tt.pkg, tt.imp, bad, tt.bad, got)
		}
	}
}
