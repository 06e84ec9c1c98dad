package framework_test

import (
	"errors"
	"testing"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

// A registration's Disabled points are not run; a disabled Filter takes its PreFilter along, and a
// Filter cannot run without its PreFilter.
func TestDisabledExtensionPoints(t *testing.T) {
	no := map[string]*framework.Status{"n1": framework.NewStatus(framework.Unschedulable, "A says no")}
	tests := []struct {
		name       string
		disabled   framework.ExtensionPoint
		wantErr    bool
		wantFilter bool // the node is rejected
		wantScores int
	}{
		{"all on", 0, false, true, 1},
		{"score off", framework.ScorePoint, false, true, 0},
		{"filter off", framework.FilterPoint, false, false, 1},
		{"preFilter off alone", framework.PreFilterPoint, true, false, 0},
		{"not implemented", framework.ReservePoint, true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &fakePlugin{name: "A", filter: no, score: map[string]int64{"n1": 10}}
			fw, err := framework.New(framework.Registration{Plugin: a, Disabled: tt.disabled})
			if tt.wantErr {
				if !errors.Is(err, framework.ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pod, node := st.Pod("p", "u").Info(), st.Node("n1").Info()
			skip := make([]bool, fw.NumFilters())
			st := fw.RunFilterPlugins(framework.NewCycleState(), pod, node, skip)
			if got := !st.IsSuccess(); got != tt.wantFilter {
				t.Errorf("rejected = %v, want %v", got, tt.wantFilter)
			}
			if fw.NumScores() != tt.wantScores {
				t.Errorf("%d score plugins, want %d", fw.NumScores(), tt.wantScores)
			}
		})
	}
}

type registering struct {
	fakePlugin
	events []framework.ClusterEventWithHint
}

func (r *registering) EventsToRegister() []framework.ClusterEventWithHint { return r.events }

func TestRequeueFor(t *testing.T) {
	nodeLabel := framework.ClusterEvent{Resource: framework.Node, ActionType: framework.UpdateNodeLabel}
	podAdd := framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Add}
	labels := &registering{fakePlugin: fakePlugin{name: "Labels"}, events: []framework.ClusterEventWithHint{{Event: nodeLabel}}}
	hinted := &registering{fakePlugin: fakePlugin{name: "Hinted"}, events: []framework.ClusterEventWithHint{{Event: podAdd,
		QueueingHint: func(_ framework.ClusterEvent, reasons map[string]int32) bool { return reasons["waits"] > 0 }}}}
	silent := &fakePlugin{name: "Silent"}
	fw, err := framework.New(framework.Registration{Plugin: labels}, framework.Registration{Plugin: hinted}, framework.Registration{Plugin: silent})
	if err != nil {
		t.Fatal(err)
	}
	fit := func(reason string, plugins ...string) *framework.FitError {
		return &framework.FitError{Reasons: map[string]int32{reason: 1}, Plugins: plugins}
	}
	tests := []struct {
		name string
		fit  *framework.FitError
		ev   framework.ClusterEvent
		want bool
	}{
		{"registered", fit("x", "Labels"), framework.ClusterEvent{Resource: framework.Node, ActionType: framework.UpdateNodeLabel | framework.UpdateNodeTaint}, true},
		{"not registered", fit("x", "Labels"), podAdd, false},
		{"hint says yes", fit("waits", "Hinted"), podAdd, true},
		{"hint says no", fit("x", "Hinted"), podAdd, false},
		{"no registrations: every event", fit("x", "Silent"), podAdd, true},
		{"union of the rejecters", fit("x", "Labels", "Hinted"), nodeLabel, true},
		{"rejection unknown", nil, podAdd, true},
	}
	for _, tt := range tests {
		if got := fw.RequeueFor(tt.fit).Match(tt.ev); got != tt.want {
			t.Errorf("%s: Match(%v) = %v, want %v", tt.name, tt.ev, got, tt.want)
		}
	}
}
