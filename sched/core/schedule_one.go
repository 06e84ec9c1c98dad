// Package core is the scheduling algorithm: one cycle of a pod over a node snapshot (schedule_one.go),
// run by the scheduler service on its cache's snapshots and by Simulator on snapshots a tool builds.
// It knows nothing of the bus; plugins come from a framework.Framework, usually built from a
// config.Profile.
package core

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/podbus/podbus/internal/fnv1a"
	"github.com/podbus/podbus/sched/framework"
)

// The scheduling cycle of one pod, as kube-scheduler's schedulePod: PreFilter, then Filter over nodes
// in an order seeded from the pod uid until enough feasible nodes are found, then Score, then pick the
// best node (ties broken with the same seeded generator); when no node fits, PostFilter (preemption).
// Given the same snapshot and uid it always returns the same node, so any decision can be replayed.

// Like Kubernetes, large clusters are not filtered exhaustively: the search stops once
// numFeasibleNodesToFind nodes fit — the profile's percentageOfNodesToScore of the cluster, or with 0
// the adaptive default (50% minus 1% per 125 nodes, at least 5%), and never fewer than 100 nodes.
// The nodes are visited from an offset drawn from the pod's uid-seeded generator, wrapping around
// (kube-scheduler instead resumes where the previous pod stopped, which no replay can reproduce).
const (
	minFeasibleNodesToFind           = 100
	minFeasibleNodesPercentageToFind = 5
)

func numFeasibleNodesToFind(percentage, numAllNodes int) int {
	if numAllNodes < minFeasibleNodesToFind {
		return numAllNodes
	}
	if percentage <= 0 {
		percentage = max(50-numAllNodes/125, minFeasibleNodesPercentageToFind)
	}
	return min(max(numAllNodes*min(percentage, 100)/100, minFeasibleNodesToFind), numAllNodes)
}

// Result is the outcome of a cycle.
type Result struct {
	Node      string // the chosen node ("" when the pod fits nowhere)
	Score     int64
	Evaluated int // nodes filtered
	Feasible  int // nodes that passed every filter
	// When the pod fits nowhere (err is a FitError): the node PostFilter (preemption) nominated and
	// the pods to evict there (nil: none); a nomination without victims means "keep waiting there".
	Post *framework.PostFilterResult
}

// Algorithm runs cycles over a framework. Cycles run concurrently (one per consumer worker); each
// takes its reusable buffers from a pool.
type Algorithm struct {
	fw *framework.Framework
	// percentage is percentageOfNodesToScore (0: adaptive).
	percentage int
	pool       sync.Pool
	fullScan   bool // filter every node even when a plugin names candidates (tests compare both)
}

func NewAlgorithm(fw *framework.Framework, percentageOfNodesToScore int) *Algorithm {
	a := &Algorithm{fw: fw, percentage: percentageOfNodesToScore}
	a.pool.New = func() any { return newCycle(fw) }
	return a
}

// Cycle is the per-cycle scratch space: state, seeded generator and buffers, reused between pods.
type Cycle struct {
	state     *framework.CycleState
	pcg       *rand.PCG
	rng       *rand.Rand
	skip      []bool
	skipOn    []bool // filters to skip on a plugin's candidate nodes
	skipScore []bool
	rejecters []bool // filters that rejected a node this cycle
	feasible  []*framework.NodeInfo
	rejected  []framework.NodeStatus // kept for PostFilter, only when the framework has one
	perPlugin [][]framework.NodeScore
	totals    []framework.NodeScore
}

func newCycle(fw *framework.Framework) *Cycle {
	pcg := rand.NewPCG(0, 0)
	return &Cycle{
		state:     framework.NewCycleState(),
		pcg:       pcg,
		rng:       rand.New(pcg),
		skip:      make([]bool, fw.NumFilters()),
		skipOn:    make([]bool, fw.NumFilters()),
		skipScore: make([]bool, fw.NumScores()),
		rejecters: make([]bool, fw.NumFilters()),
		perPlugin: make([][]framework.NodeScore, fw.NumScores()),
	}
}

// seed makes the cycle's randomness a function of the pod uid alone.
func (c *Cycle) seed(uid string) {
	s := fnv1a.AddString(fnv1a.Offset64, uid) // hash/fnv would allocate per pod
	c.pcg.Seed(s, s*0x9e3779b97f4a7c15+1)
}

// Schedule finds a node for pod in snap. Errors: framework.ErrNoNodesAvailable, *framework.FitError
// (unschedulable), or an internal error from a plugin.
func (a *Algorithm) Schedule(snap *framework.Snapshot, pod *framework.PodInfo) (Result, error) {
	c := a.Acquire()
	defer a.Release(c)
	return a.Run(c, snap, pod)
}

// Acquire takes a cycle from the pool; Release gives it back. A caller that runs Reserve keeps the
// cycle (its state) until the decision is published or undone.
func (a *Algorithm) Acquire() *Cycle { return a.pool.Get().(*Cycle) }
func (a *Algorithm) Release(c *Cycle) {
	c.state.Reset()
	clear(c.rejected) // drop the snapshot's nodes while the cycle sits in the pool
	c.rejected = c.rejected[:0]
	a.pool.Put(c)
}

// Reserve runs the Reserve plugins of a cycle that found node (after the cache assumed the pod there).
func (a *Algorithm) Reserve(c *Cycle, pod *framework.PodInfo, node string) error {
	if st := a.fw.RunReservePlugins(c.state, pod, node); !st.IsSuccess() {
		if err := st.AsError(); err != nil {
			return err
		}
		return fmt.Errorf("reserve on %s: %s", node, st.Message())
	}
	return nil
}

// Unreserve undoes Reserve when the decision is lost.
func (a *Algorithm) Unreserve(c *Cycle, pod *framework.PodInfo, node string) {
	a.fw.RunUnreservePlugins(c.state, pod, node)
}

// Run is one cycle on c. Errors: framework.ErrNoNodesAvailable, *framework.FitError (unschedulable),
// or an internal error from a plugin.
func (a *Algorithm) Run(c *Cycle, snap *framework.Snapshot, pod *framework.PodInfo) (Result, error) {
	n := snap.NumNodes()
	if n == 0 {
		return Result{}, framework.ErrNoNodesAvailable
	}
	c.state.Reset()
	c.state.SetSnapshot(snap)
	clear(c.skip)
	clear(c.skipScore)
	clear(c.rejecters)
	c.seed(pod.UID())

	if st, by := a.fw.PreFilter(c.state, pod, c.skip); !st.IsSuccess() {
		if err := st.AsError(); err != nil {
			return Result{}, err
		}
		msg := st.Message()
		return Result{}, &framework.FitError{NumAllNodes: n, PreFilterMsg: msg, Reasons: map[string]int32{msg: int32(n)}, Plugins: []string{by}}
	}

	feasible, evaluated, reasons, err := a.findNodesThatFit(c, snap, pod)
	if err != nil {
		return Result{}, err
	}
	if len(feasible) == 0 {
		fit := &framework.FitError{NumAllNodes: n, Reasons: reasons, Plugins: a.rejecters(c)}
		if !a.fw.HasPostFilterPlugins() {
			return Result{Evaluated: evaluated}, fit
		}
		res, st := a.fw.RunPostFilterPlugins(c.state, pod, snap, c.rejected, c.skip)
		if err := st.AsError(); err != nil {
			return Result{}, err
		}
		out := Result{Evaluated: evaluated, Post: res}
		if !st.IsSuccess() {
			fit.PostFilterMsg = st.Message()
		}
		return out, fit
	}

	totals, err := a.prioritizeNodes(c, pod, feasible)
	if err != nil {
		return Result{}, err
	}
	best := selectHost(c.rng, totals)
	return Result{Node: best.Node.Name(), Score: best.Score, Evaluated: evaluated, Feasible: len(feasible)}, nil
}

// findNodesThatFit filters nodes starting at a seeded offset, wrapping around, and stops once enough
// nodes fit. Rejections are counted per reason (a node rejected for two resources counts for both).
func (a *Algorithm) findNodesThatFit(c *Cycle, snap *framework.Snapshot, pod *framework.PodInfo) ([]*framework.NodeInfo, int, map[string]int32, error) {
	n := snap.NumNodes()
	want := numFeasibleNodesToFind(a.percentage, n)
	start := c.rng.IntN(n)
	feasible := c.feasible[:0]
	clear(c.rejected)
	c.rejected = c.rejected[:0]
	if cand, ok := a.fw.RunCandidatePlugins(c.state, pod, c.skip, c.skipOn); ok && !a.fullScan {
		feasible, evaluated, err := a.filterCandidates(c, snap, pod, cand, start, want)
		if err != nil || len(feasible) > 0 {
			return feasible, evaluated, nil, err
		}
		// No candidate fits: the full scan below says why, node by node, and feeds preemption.
	}
	keepRejected := a.fw.HasPostFilterPlugins()
	var reasons map[string]int32
	evaluated := 0
	for node := range snap.NodesFrom(start) {
		if len(feasible) >= want {
			break
		}
		evaluated++
		// Room held for nominated pods of equal or higher priority is not this pod's to take.
		st, by := a.fw.Filter(c.state, pod, node.WithNominated(pod), c.skip)
		if st.IsSuccess() {
			feasible = append(feasible, node)
			continue
		}
		if err := st.AsError(); err != nil {
			return nil, evaluated, nil, err
		}
		c.rejecters[by] = true
		if keepRejected {
			c.rejected = append(c.rejected, framework.NodeStatus{Node: node, Status: st})
		}
		if reasons == nil {
			reasons = make(map[string]int32, 4)
		}
		for _, r := range st.Reasons() {
			reasons[r]++
		}
	}
	c.feasible = feasible
	return feasible, evaluated, reasons, nil
}

// rejecters names the filters that rejected a node in c's cycle.
func (a *Algorithm) rejecters(c *Cycle) []string {
	var out []string
	for i, r := range c.rejecters {
		if r {
			out = append(out, a.fw.FilterName(i))
		}
	}
	return out
}

// filterCandidates is findNodesThatFit over the candidate positions only (ascending; every other node
// fails a filter): in the same wrapped order from start, so it finds the nodes a full scan finds, and
// it reports as evaluated the nodes a full scan would have visited.
func (a *Algorithm) filterCandidates(c *Cycle, snap *framework.Snapshot, pod *framework.PodInfo, cand []int32, start, want int) ([]*framework.NodeInfo, int, error) {
	n := snap.NumNodes()
	feasible := c.feasible[:0]
	defer func() { c.feasible = feasible }()
	first, _ := slices.BinarySearch(cand, int32(start))
	for k := range cand {
		i := int(cand[(first+k)%len(cand)])
		node := snap.NodeAt(i)
		st := a.fw.RunFilterPlugins(c.state, pod, node.WithNominated(pod), c.skipOn)
		if st.IsSuccess() {
			feasible = append(feasible, node)
			if len(feasible) >= want {
				return feasible, (i-start+n)%n + 1, nil
			}
			continue
		}
		if err := st.AsError(); err != nil {
			return nil, 0, err
		}
	}
	return feasible, n, nil
}

// prioritizeNodes returns the weighted total score of every feasible node.
func (a *Algorithm) prioritizeNodes(c *Cycle, pod *framework.PodInfo, feasible []*framework.NodeInfo) ([]framework.NodeScore, error) {
	totals := c.totals[:0]
	for range feasible {
		totals = append(totals, framework.NodeScore{})
	}
	c.totals = totals
	if st := a.fw.RunPreScorePlugins(c.state, pod, feasible, c.skipScore); !st.IsSuccess() {
		return nil, st.AsError()
	}
	perPlugin, st := a.fw.RunScorePlugins(c.state, pod, feasible, c.skipScore, c.perPlugin, totals)
	c.perPlugin = perPlugin
	if err := st.AsError(); err != nil {
		return nil, err
	}
	return totals, nil
}

// selectHost picks uniformly among the best-scoring nodes (reservoir sampling, as kube-scheduler does,
// but with the pod's seeded generator so the choice is reproducible).
func selectHost(rng *rand.Rand, totals []framework.NodeScore) framework.NodeScore {
	best := totals[0]
	ties := 1
	for _, ns := range totals[1:] {
		switch {
		case ns.Score > best.Score:
			best, ties = ns, 1
		case ns.Score == best.Score:
			ties++
			if rng.IntN(ties) == 0 {
				best = ns
			}
		}
	}
	return best
}

// RequeueFor returns the cluster events that may make a pod this algorithm rejected with fit
// schedulable (see framework.Framework.RequeueFor).
func (a *Algorithm) RequeueFor(fit *framework.FitError) framework.Requeue {
	return a.fw.RequeueFor(fit)
}
