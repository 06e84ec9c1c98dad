package config

import (
	"errors"
	"testing"

	"github.com/podbus/podbus/sched/plugins/mostallocated"
	"github.com/podbus/podbus/sched/plugins/noderesources"
)

func TestParseProfile(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr bool
		score   string // the resource score plugin
		weight  int64  // its weight
	}{
		{"empty is the default", "", false, noderesources.LeastAllocatedName, 1},
		{"most allocated", "scoring: MostAllocated\n", false, mostallocated.Name, 1},
		{"weights", "scoring: MostAllocated\nweights:\n  NodeResourcesMostAllocated: 5\n  TaintToleration: 1\n", false, mostallocated.Name, 5},
		{"drop the resource score", "weights:\n  NodeResourcesLeastAllocated: 0\n", false, "", 0},
		{"unknown scoring", "scoring: Random\n", true, "", 0},
		{"unknown field", "scorng: MostAllocated\n", true, "", 0},
		{"unknown plugin", "weights:\n  Nope: 1\n", true, "", 0},
		{"filter plugin weight", "weights:\n  NodeName: 2\n", true, "", 0},
		{"NodeResourcesFit names the resource score", "weights:\n  NodeResourcesFit: 4\n", false, noderesources.LeastAllocatedName, 4},
		{"NodeResourcesFit with MostAllocated", "scoring: MostAllocated\nweights:\n  NodeResourcesFit: 3\n", false, mostallocated.Name, 3},
		{"list form", "profiles:\n- schedulerName: default-scheduler\n  scoring: MostAllocated\n", false, mostallocated.Name, 1},
		{"list form and inline scoring", "scoring: MostAllocated\nprofiles:\n- schedulerName: a\n", true, "", 0},
		{"duplicate scheduler names", "profiles:\n- schedulerName: a\n- schedulerName: a\n", true, "", 0},
		{"default name twice", "profiles:\n- {}\n- schedulerName: default-scheduler\n", true, "", 0},
		{"percentage out of range", "percentageOfNodesToScore: 101\n", true, "", 0},
		{"negative weight", "weights:\n  TaintToleration: -1\n", true, "", 0},
		{"zero weight on a filter", "weights:\n  TaintToleration: 0\n", true, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseProfile([]byte(tt.yaml))
			if tt.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			regs, err := p.Plugins()
			if err != nil {
				t.Fatal(err)
			}
			var got string
			var w int64
			for _, r := range regs {
				if n := r.Plugin.Name(); n == noderesources.LeastAllocatedName || n == mostallocated.Name {
					got, w = n, r.Weight
				}
			}
			if got != tt.score || w != tt.weight {
				t.Errorf("resource score = %q weight %d, want %q weight %d", got, w, tt.score, tt.weight)
			}
		})
	}
}
