package framework_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

func TestFitErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *framework.FitError
		want string
	}{
		{"reasons sorted as strings", &framework.FitError{NumAllNodes: 12, Reasons: map[string]int32{
			"node(s) didn't match Pod's node affinity/selector": 9,
			"Insufficient cpu": 3,
		}}, "0/12 nodes are available: 3 Insufficient cpu, 9 node(s) didn't match Pod's node affinity/selector."},
		// kube-scheduler sorts "<count> <reason>" strings, so "10 ..." comes before "2 ...".
		{"lexical, not numeric", &framework.FitError{NumAllNodes: 12, Reasons: map[string]int32{
			"Insufficient memory": 2,
			"Too many pods":       10,
		}}, "0/12 nodes are available: 10 Too many pods, 2 Insufficient memory."},
		{"one node, two reasons", &framework.FitError{NumAllNodes: 1, Reasons: map[string]int32{
			"Insufficient cpu": 1, "Insufficient memory": 1,
		}}, "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."},
		{"prefilter rejection", &framework.FitError{NumAllNodes: 5, PreFilterMsg: "pod has unbound immediate PersistentVolumeClaims",
			Reasons: map[string]int32{"ignored": 5}}, "0/5 nodes are available: pod has unbound immediate PersistentVolumeClaims."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	if got := framework.ErrNoNodesAvailable.Error(); got != "no nodes available to schedule pods" {
		t.Errorf("ErrNoNodesAvailable = %q", got)
	}
}

func TestDefaultNormalizeScore(t *testing.T) {
	tests := []struct {
		name    string
		reverse bool
		in      []int64
		want    []int64
	}{
		{"scaled to the max", false, []int64{0, 5, 10}, []int64{0, 50, 100}},
		{"reversed", true, []int64{0, 5, 10}, []int64{100, 50, 0}},
		{"all zero", false, []int64{0, 0}, []int64{0, 0}},
		{"all zero reversed", true, []int64{0, 0}, []int64{100, 100}},
		{"integer division", false, []int64{1, 3}, []int64{33, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scores := make([]framework.NodeScore, len(tt.in))
			for i, s := range tt.in {
				scores[i].Score = s
			}
			framework.DefaultNormalizeScore(framework.MaxNodeScore, tt.reverse, scores)
			got := make([]int64, len(scores))
			for i := range scores {
				got[i] = scores[i].Score
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// fakePlugin is a configurable plugin for the framework's own tests.
type fakePlugin struct {
	name      string
	preFilter *framework.Status
	filter    map[string]*framework.Status // by node
	score     map[string]int64
	filtered  int
}

func (f *fakePlugin) Name() string { return f.name }
func (f *fakePlugin) PreFilter(*framework.CycleState, *framework.PodInfo) *framework.Status {
	return f.preFilter
}
func (f *fakePlugin) Filter(_ *framework.CycleState, _ *framework.PodInfo, n *framework.NodeInfo) *framework.Status {
	f.filtered++
	return f.filter[n.Name()]
}
func (f *fakePlugin) Score(_ *framework.CycleState, _ *framework.PodInfo, n *framework.NodeInfo) (int64, *framework.Status) {
	return f.score[n.Name()], nil
}

var (
	_ framework.PreFilterPlugin = &fakePlugin{}
	_ framework.FilterPlugin    = &fakePlugin{}
	_ framework.ScorePlugin     = &fakePlugin{}
)

type nothing struct{}

func (nothing) Name() string { return "Nothing" }

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		regs []framework.Registration
	}{
		{"duplicate", []framework.Registration{{Plugin: &fakePlugin{name: "A"}}, {Plugin: &fakePlugin{name: "A"}}}},
		{"no extension point", []framework.Registration{{Plugin: nothing{}}}},
		{"nil", []framework.Registration{{}}},
		{"negative weight", []framework.Registration{{Plugin: &fakePlugin{name: "A"}, Weight: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := framework.New(tt.regs...); !errors.Is(err, framework.ErrConfig) {
				t.Errorf("err = %v, want ErrConfig", err)
			}
		})
	}
}

func TestRunPlugins(t *testing.T) {
	a := &fakePlugin{name: "A", preFilter: framework.NewStatus(framework.Skip),
		filter: map[string]*framework.Status{"n1": framework.NewStatus(framework.Unschedulable, "A says no")},
		score:  map[string]int64{"n1": 10, "n2": 20}}
	b := &fakePlugin{name: "B", filter: map[string]*framework.Status{"n2": framework.NewStatus(framework.Unschedulable, "B says no")},
		score: map[string]int64{"n1": 50, "n2": 0}}
	fw, err := framework.New(framework.Registration{Plugin: a, Weight: 2}, framework.Registration{Plugin: b})
	if err != nil {
		t.Fatal(err)
	}
	state, pod := framework.NewCycleState(), st.Pod("p", "u").Info()
	n1, n2 := st.Node("n1").Info(), st.Node("n2").Info()
	skip := make([]bool, fw.NumFilters())
	if s := fw.RunPreFilterPlugins(state, pod, skip); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	if diff := cmp.Diff([]bool{true, false}, skip); diff != "" {
		t.Errorf("skip (-want +got):\n%s", diff)
	}
	if s := fw.RunFilterPlugins(state, pod, n1, skip); !s.IsSuccess() {
		t.Errorf("n1: A is skipped, B passes; got %q", s.Message())
	}
	if s := fw.RunFilterPlugins(state, pod, n2, skip); s.Message() != "B says no" {
		t.Errorf("n2: got %q", s.Message())
	}
	if a.filtered != 0 {
		t.Errorf("skipped filter ran %d times", a.filtered)
	}
	totals := make([]framework.NodeScore, 2)
	_, s := fw.RunScorePlugins(state, pod, []*framework.NodeInfo{n1, n2}, nil, make([][]framework.NodeScore, fw.NumScores()), totals)
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	// weights: A×2, B×1
	if totals[0].Score != 70 || totals[1].Score != 40 {
		t.Errorf("totals = %d, %d; want 70, 40", totals[0].Score, totals[1].Score)
	}

	a.score["n1"] = 101
	if _, s := fw.RunScorePlugins(state, pod, []*framework.NodeInfo{n1, n2}, nil, make([][]framework.NodeScore, 2), totals); s.Code() != framework.Error {
		t.Errorf("score out of range: code %v", s.Code())
	}
}

type fakeScorer struct {
	name     string
	preScore *framework.Status
	score    int64
	reserve  *framework.Status
	log      *[]string
}

func (f *fakeScorer) Name() string { return f.name }
func (f *fakeScorer) PreScore(*framework.CycleState, *framework.PodInfo, []*framework.NodeInfo) *framework.Status {
	return f.preScore
}
func (f *fakeScorer) Score(*framework.CycleState, *framework.PodInfo, *framework.NodeInfo) (int64, *framework.Status) {
	return f.score, nil
}
func (f *fakeScorer) Reserve(_ *framework.CycleState, _ *framework.PodInfo, node string) *framework.Status {
	*f.log = append(*f.log, "reserve "+f.name+" "+node)
	return f.reserve
}
func (f *fakeScorer) Unreserve(_ *framework.CycleState, _ *framework.PodInfo, node string) {
	*f.log = append(*f.log, "unreserve "+f.name+" "+node)
}

var (
	_ framework.PreScorePlugin = &fakeScorer{}
	_ framework.ReservePlugin  = &fakeScorer{}
)

func TestPreScoreSkipAndReserve(t *testing.T) {
	var log []string
	a := &fakeScorer{name: "A", preScore: framework.NewStatus(framework.Skip), score: 50, log: &log}
	b := &fakeScorer{name: "B", score: 10, log: &log, reserve: framework.NewStatus(framework.Unschedulable, "B says no")}
	fw, err := framework.New(framework.Registration{Plugin: a}, framework.Registration{Plugin: b})
	if err != nil {
		t.Fatal(err)
	}
	state, pod, n1 := framework.NewCycleState(), st.Pod("p", "u").Info(), st.Node("n1").Info()
	skip := make([]bool, fw.NumScores())
	if s := fw.RunPreScorePlugins(state, pod, []*framework.NodeInfo{n1}, skip); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	totals := make([]framework.NodeScore, 1)
	if _, s := fw.RunScorePlugins(state, pod, []*framework.NodeInfo{n1}, skip, make([][]framework.NodeScore, 2), totals); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	if totals[0].Score != 10 {
		t.Errorf("total = %d, want 10 (A skipped)", totals[0].Score)
	}
	if s := fw.RunReservePlugins(state, pod, "n1"); s.Message() != "B says no" {
		t.Errorf("reserve = %q", s.Message())
	}
	want := []string{"reserve A n1", "reserve B n1", "unreserve B n1", "unreserve A n1"}
	if diff := cmp.Diff(want, log); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
