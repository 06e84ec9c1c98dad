package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/podbus/podbus/sched/config"
)

// --profile and --config name the same file, which may be either format.
func TestProfileFlag(t *testing.T) {
	dir := t.TempDir()
	kube := filepath.Join(dir, "kube.yaml")
	podbus := filepath.Join(dir, "podbus.yaml")
	if err := os.WriteFile(kube, []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: a\n- schedulerName: b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podbus, []byte("scoring: MostAllocated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args      []string
		wantNames []string
	}{
		{[]string{"--config", kube}, []string{"a", "b"}},
		{[]string{"--profile", kube}, []string{"a", "b"}},
		{[]string{"--config", podbus}, []string{config.DefaultSchedulerName}},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		p := profileFlag(fs, "")
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		ps, err := config.LoadProfiles(*p)
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		var names []string
		for _, pr := range ps {
			names = append(names, pr.Name())
		}
		if len(names) != len(tt.wantNames) || names[0] != tt.wantNames[0] {
			t.Errorf("%v: profiles %v, want %v", tt.args, names, tt.wantNames)
		}
	}
}
