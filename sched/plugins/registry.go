// Package plugins is the in-tree plugin registry, as kube-scheduler's: every plugin by name with the
// factory that builds it from its args, in the order the framework runs them (cheap checks that no
// change of other pods can cure first, as kube-scheduler orders its filters), and the default profile.
//
// Adding a plugin: write its package under sched/plugins/<name> (a type implementing some
// framework extension points, a Name constant, and EventsToRegister if it rejects pods), then add one
// line to inTree below. A profile (sched/config) can then enable, disable, weigh and configure it.
package plugins

import (
	"encoding/json"
	"slices"

	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/balancedallocation"
	"github.com/podbus/podbus/sched/plugins/defaultpreemption"
	"github.com/podbus/podbus/sched/plugins/imagelocality"
	"github.com/podbus/podbus/sched/plugins/interpodaffinity"
	"github.com/podbus/podbus/sched/plugins/mostallocated"
	"github.com/podbus/podbus/sched/plugins/nodeaffinity"
	"github.com/podbus/podbus/sched/plugins/nodename"
	"github.com/podbus/podbus/sched/plugins/nodeready"
	"github.com/podbus/podbus/sched/plugins/noderesources"
	"github.com/podbus/podbus/sched/plugins/nodeunschedulable"
	"github.com/podbus/podbus/sched/plugins/podtopologyspread"
	"github.com/podbus/podbus/sched/plugins/resourcestrategy"
	"github.com/podbus/podbus/sched/plugins/tainttoleration"
)

// Entry is one registered plugin.
type Entry struct {
	Name string
	New  framework.PluginFactory
	// Default: enabled in the default profile, with Weight (score plugins; 0 means 1).
	Default bool
	Weight  int64
	// Implicit: stands for something Kubernetes does outside the scheduler, so a profile's disabled
	// "*" keeps it; only naming it disables it.
	Implicit bool
}

// inTree is every plugin, in run order.
var inTree = []Entry{
	{Name: nodeready.Name, New: framework.NoArgs(nodeready.Name, nodeready.New), Default: true, Implicit: true},
	{Name: nodeunschedulable.Name, New: framework.NoArgs(nodeunschedulable.Name, nodeunschedulable.New), Default: true},
	{Name: nodename.Name, New: framework.NoArgs(nodename.Name, nodename.New), Default: true},
	{Name: tainttoleration.Name, New: framework.NoArgs(tainttoleration.Name, tainttoleration.New), Default: true, Weight: 3},
	{Name: nodeaffinity.Name, New: framework.NoArgs(nodeaffinity.Name, nodeaffinity.New), Default: true, Weight: 2},
	{Name: noderesources.FitName, New: fitFilter, Default: true},
	{Name: podtopologyspread.Name, New: framework.NoArgs(podtopologyspread.Name, podtopologyspread.New), Default: true, Weight: 2},
	{Name: interpodaffinity.Name, New: framework.NoArgs(interpodaffinity.Name, interpodaffinity.New), Default: true, Weight: 2},
	{Name: noderesources.LeastAllocatedName, New: resourcestrategy.Factory(resourcestrategy.LeastAllocated), Default: true, Weight: 1},
	{Name: mostallocated.Name, New: resourcestrategy.Factory(resourcestrategy.MostAllocated), Weight: 1},
	{Name: resourcestrategy.RequestedToCapacityRatioName, New: resourcestrategy.Factory(resourcestrategy.RequestedToCapacityRatio), Weight: 1},
	{Name: balancedallocation.Name, New: framework.NoArgs(balancedallocation.Name, balancedallocation.New), Default: true, Weight: 1},
	{Name: imagelocality.Name, New: framework.NoArgs(imagelocality.Name, imagelocality.New), Default: true, Weight: 1},
	{Name: defaultpreemption.Name, New: framework.NoArgs(defaultpreemption.Name, defaultpreemption.New), Default: true},
}

// fitFilter is NodeResourcesFit's filter; its args (NodeResourcesFitArgs) are checked here and choose
// the score plugin (see resourcestrategy).
func fitFilter(args json.RawMessage) (framework.Plugin, error) {
	if _, err := resourcestrategy.ParseFitArgs(args); err != nil {
		return nil, err
	}
	return noderesources.NewFit(), nil
}

// InTree returns every registered plugin, in run order.
func InTree() []Entry { return slices.Clone(inTree) }

// Lookup returns the entry of the plugin called name.
func Lookup(name string) (Entry, bool) {
	i := slices.IndexFunc(inTree, func(e Entry) bool { return e.Name == name })
	if i < 0 {
		return Entry{}, false
	}
	return inTree[i], true
}

// Registry returns the registry as kube-scheduler's: name -> factory.
func Registry() map[string]framework.PluginFactory {
	r := make(map[string]framework.PluginFactory, len(inTree))
	for _, e := range inTree {
		r[e.Name] = e.New
	}
	return r
}

// DefaultPlugins is the default profile's plugin set, in run order, with kube-scheduler's default
// score weights.
func DefaultPlugins() []framework.Registration {
	var regs []framework.Registration
	for _, e := range inTree {
		if !e.Default {
			continue
		}
		p, err := e.New(nil)
		if err != nil {
			panic("plugins: default plugin " + e.Name + ": " + err.Error()) // no args: cannot fail
		}
		regs = append(regs, framework.Registration{Plugin: p, Weight: e.Weight})
	}
	return regs
}
