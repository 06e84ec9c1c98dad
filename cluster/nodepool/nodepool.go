// Package nodepool describes a modelled cluster as pools of alike nodes, the small YAML that
// `podbus up --node-pools` and `podbus loadtest --node-pools` read:
//
//	pools:
//	- name: general
//	  count: 40
//	  capacity: {cpu: "8", memory: 32Gi, pods: "110", example.com/gpu: "0"}
//	  labels: {team: infra}
//	  zones: [zone-a, zone-b, zone-c]   # optional: the pool's nodes spread round-robin (topology.kubernetes.io/zone)
//	  taints: ["dedicated=gpu:NoSchedule"]
//
// A pool's nodes are named <pool>-<i> (i from 1). They run as simulated agents with that capacity,
// labels and taints, or are written straight into the nodes bucket as Ready nodes without agents
// (Register, kwok-style: what the scheduler benchmarks use to model thousands of nodes cheaply).
// It also parses the kubelet's --node-labels and --register-with-taints syntax.
package nodepool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Well-known labels.
const (
	LabelHostname = "kubernetes.io/hostname"
	LabelOS       = "kubernetes.io/os"
	LabelArch     = "kubernetes.io/arch"
	LabelZone     = "topology.kubernetes.io/zone"
	// LabelPool names the pool a node came from.
	LabelPool = "podbus.io/pool"
)

// Defaults for a pool that leaves a capacity out (those of `podbus up`'s simulated nodes).
var defaultCapacity = map[string]string{
	podutil.CPU: "8", podutil.Memory: "32Gi", podutil.Pods: "110", podutil.EphemeralStorage: "100Gi",
}

// ErrInvalid is returned (wrapped) for a pool description, label or taint that cannot be used.
var ErrInvalid = errors.New("invalid node pool")

// Pool is one group of alike nodes.
type Pool struct {
	Name     string            `json:"name"`
	Count    int               `json:"count"`
	Capacity map[string]string `json:"capacity,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Zones    []string          `json:"zones,omitempty"`
	Taints   []string          `json:"taints,omitempty"`
}

// Pools is a whole description.
type Pools struct {
	Pools []Pool `json:"pools"`
}

// Node is one node of a pool, expanded.
type Node struct {
	Name     string
	Pool     string
	Capacity map[string]string // cpu, memory, pods, ephemeral-storage and extended resources
	Labels   map[string]string // the pool's, its zone, the pool label and the well-known ones
	Taints   []*pb.Taint
}

// Parse reads and checks a description (unknown fields are errors).
func Parse(data []byte) (Pools, error) {
	var p Pools
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return Pools{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := p.Validate(); err != nil {
		return Pools{}, err
	}
	return p, nil
}

// Validate checks names, counts, quantities, labels and taints.
func (p Pools) Validate() error {
	var errs []error
	names := map[string]bool{}
	for i, pool := range p.Pools {
		at := fmt.Sprintf("pools[%d]", i)
		for _, msg := range validation.IsDNS1123Label(pool.Name) {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", at, pool.Name, msg))
		}
		if names[pool.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: duplicate pool", at, pool.Name))
		}
		names[pool.Name] = true
		if pool.Count < 0 {
			errs = append(errs, fmt.Errorf("%s.count: must be >= 0", at))
		}
		for k, v := range pool.Capacity {
			q, err := resource.ParseQuantity(v)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s.capacity.%s %q: %v", at, k, v, err))
			case q.Sign() < 0:
				errs = append(errs, fmt.Errorf("%s.capacity.%s: must be >= 0", at, k))
			}
			for _, msg := range validation.IsQualifiedName(k) {
				errs = append(errs, fmt.Errorf("%s.capacity.%s: %s", at, k, msg))
			}
		}
		for _, e := range metav1validation.ValidateLabels(pool.Labels, field.NewPath(at, "labels")) {
			errs = append(errs, e)
		}
		for _, z := range pool.Zones {
			for _, msg := range validation.IsValidLabelValue(z) {
				errs = append(errs, fmt.Errorf("%s.zones %q: %s", at, z, msg))
			}
		}
		if _, err := ParseTaints(strings.Join(pool.Taints, ",")); err != nil {
			errs = append(errs, fmt.Errorf("%s.taints: %w", at, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Total is the number of nodes of all pools.
func (p Pools) Total() int {
	n := 0
	for _, pool := range p.Pools {
		n += pool.Count
	}
	return n
}

// Nodes expands the pools into their nodes, pool by pool. Call it on a validated description.
func (p Pools) Nodes() []Node {
	var out []Node
	for _, pool := range p.Pools {
		taints, _ := ParseTaints(strings.Join(pool.Taints, ","))
		for i := range pool.Count {
			name := fmt.Sprintf("%s-%d", pool.Name, i+1)
			n := Node{Name: name, Pool: pool.Name, Capacity: map[string]string{}, Labels: map[string]string{}, Taints: taints}
			for k, v := range defaultCapacity {
				n.Capacity[k] = v
			}
			for k, v := range pool.Capacity {
				n.Capacity[k] = v
			}
			for k, v := range pool.Labels {
				n.Labels[k] = v
			}
			if len(pool.Zones) > 0 {
				n.Labels[LabelZone] = pool.Zones[i%len(pool.Zones)]
			}
			n.Labels[LabelPool] = pool.Name
			for k, v := range WellKnownLabels(name) {
				n.Labels[k] = v
			}
			out = append(out, n)
		}
	}
	return out
}

// WellKnownLabels are the labels every kubelet sets on its node.
func WellKnownLabels(node string) map[string]string {
	return map[string]string{LabelHostname: node, LabelOS: "linux", LabelArch: runtime.GOARCH}
}

// AgentConfig is the simulated agent of n: its capacity, labels and registered taints.
func (n Node) AgentConfig() agent.Config {
	cfg := agent.Config{Node: n.Name, Labels: n.Labels, Taints: n.Taints, Extended: map[string]string{}}
	for k, v := range n.Capacity {
		switch k {
		case podutil.CPU:
			cfg.CPU = v
		case podutil.Memory:
			cfg.Memory = v
		case podutil.EphemeralStorage:
			cfg.Storage = v
		case podutil.Pods:
			q := resource.MustParse(v)
			cfg.MaxPods = int(q.Value())
		default:
			cfg.Extended[k] = v
		}
	}
	return cfg
}

// PB is n as a Ready node registered without an agent (what Register stores): allocatable is the
// capacity, conditions as a healthy kubelet posts them at time now.
func (n Node) PB(now time.Time) *pb.Node {
	ts := timestamppb.New(now)
	cond := func(typ, status, reason, msg string) *pb.NodeCondition {
		return &pb.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: ts, LastTransitionTime: ts}
	}
	capacity := map[string]string{}
	for k, v := range n.Capacity {
		capacity[k] = v
	}
	labels := map[string]string{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	var taints []*pb.Taint
	for _, t := range n.Taints {
		taints = append(taints, &pb.Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: t.GetEffect()})
	}
	alloc := map[string]string{}
	for k, v := range capacity {
		alloc[k] = v
	}
	return &pb.Node{
		Metadata: &pb.ObjectMeta{Name: n.Name, Labels: labels, CreationTimestamp: ts},
		Spec:     &pb.NodeSpec{Taints: taints},
		Status: &pb.NodeStatus{
			Capacity: capacity, Allocatable: alloc, Phase: "Running",
			Conditions: []*pb.NodeCondition{
				cond("MemoryPressure", podutil.False, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond("DiskPressure", podutil.False, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond("PIDPressure", podutil.False, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(podutil.NodeReady, podutil.True, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []*pb.NodeAddress{{Type: "Hostname", Address: n.Name}},
			NodeInfo:  &pb.NodeSystemInfo{KubeletVersion: agent.KubeletVersion, OperatingSystem: "linux", Architecture: runtime.GOARCH, OsImage: "podbus (no agent)"},
		},
	}
}

// registerWorkers bounds the writes in flight while registering.
const registerWorkers = 32

// Register writes every node of pools into the nodes bucket as a Ready node without an agent
// (kwok-style). It is idempotent: a node that already exists is left as it is (create only, never
// overwritten). The status service never marks such nodes Unknown, as nothing heartbeats for them.
func Register(ctx context.Context, conn *bus.Conn, pools Pools) error {
	if err := pools.Validate(); err != nil {
		return err
	}
	kv, err := conn.JS.KeyValue(ctx, bus.BucketNodes)
	if err != nil {
		return fmt.Errorf("register nodes: open %s: %w", bus.BucketNodes, err)
	}
	now := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(registerWorkers)
	for _, n := range pools.Nodes() {
		g.Go(func() error {
			node := n.PB(now)
			node.Metadata.Uid = uuid.NewString()
			_, err := bus.Create(gctx, kv, bus.NodeKey(n.Name), node)
			if err != nil && !errors.Is(err, bus.ErrExists) {
				return fmt.Errorf("register node %s: %w", n.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// ParseLabels parses the kubelet's --node-labels: k=v,k=v (a missing "=v" is an empty value).
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	if errs := metav1validation.ValidateLabels(out, field.NewPath("node-labels")); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errs.ToAggregate())
	}
	return out, nil
}

// ParseTaints parses the kubelet's --register-with-taints: key=value:Effect or key:Effect, comma
// separated, as kubectl taint writes them.
func ParseTaints(s string) ([]*pb.Taint, error) {
	var out []*pb.Taint
	seen := map[string]bool{}
	for _, spec := range strings.Split(s, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return nil, fmt.Errorf("%w: taint %q: want key=value:Effect or key:Effect", ErrInvalid, spec)
		}
		switch effect {
		case "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			return nil, fmt.Errorf("%w: taint %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", ErrInvalid, spec)
		}
		k, v, _ := strings.Cut(kv, "=")
		if errs := metav1validation.ValidateLabelName(k, field.NewPath("key")); len(errs) > 0 {
			return nil, fmt.Errorf("%w: taint %q: %w", ErrInvalid, spec, errs.ToAggregate())
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return nil, fmt.Errorf("%w: taint %q: %s", ErrInvalid, spec, strings.Join(msgs, "; "))
		}
		if seen[k+":"+effect] {
			return nil, fmt.Errorf("%w: taint %q: duplicate key and effect", ErrInvalid, spec)
		}
		seen[k+":"+effect] = true
		out = append(out, &pb.Taint{Key: k, Value: v, Effect: effect})
	}
	return out, nil
}

// Load reads and parses a description file.
func Load(path string) (Pools, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Pools{}, fmt.Errorf("node pools: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return Pools{}, fmt.Errorf("node pools %s: %w", path, err)
	}
	return p, nil
}
