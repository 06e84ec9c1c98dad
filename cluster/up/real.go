package up

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Runtimes for Config.Runtime.
const (
	RuntimeFake       = "fake"       // simulated nodes only (the default)
	RuntimeContainerd = "containerd" // plus one real node; Start fails if this machine cannot run one
	RuntimeAuto       = "auto"       // plus one real node when cri.Check passes
)

// DefaultRealNode names the real node.
const DefaultRealNode = "node-real"

// The taint that reserves the real node when it runs next to simulated ones (RealNodeTaint). A pod that
// did not ask for real containers then never lands there by chance and fails to pull an image that only
// the simulated nodes pretend to have; one that asks tolerates it (examples/web.yaml).
const (
	RealNodeTaintKey   = "podbus.io/node"
	RealNodeTaintValue = "real"
)

// RealNodeTaint is the taint the real node registers with in a mixed cluster: RealNodeTaintKey=
// RealNodeTaintValue:NoSchedule.
func RealNodeTaint() *pb.Taint {
	return &pb.Taint{Key: RealNodeTaintKey, Value: RealNodeTaintValue, Effect: "NoSchedule"}
}

// RealPodCIDR is the real node's default pod range: apart from the simulated nodes' 10.42.0.0/15 and up, and
// from docker's 172.17.0.0/16.
const RealPodCIDR = "10.244.1.0/24"

// wantReal decides whether to run a real node; when it cannot, the error says why.
func (c *Config) wantReal(ctx context.Context) (bool, error) {
	switch c.Runtime {
	case "", RuntimeFake:
		return false, nil
	case RuntimeContainerd, RuntimeAuto:
		if err := cri.Check(ctx, c.ContainerdAddress, nil); err != nil {
			return false, err
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown runtime %q (fake, containerd or auto)", c.Runtime)
	}
}

// realAgent is a node agent on the containerd runtime that closes the runtime when it stops.
type realAgent struct {
	*agent.Agent
	rt *cri.Runtime
}

func (a realAgent) Run(ctx context.Context) error {
	defer a.rt.Close()
	return a.Agent.Run(ctx)
}

// newRealAgent makes the real node's agent: the machine's capacity, state in DataDir/agent/<node>;
// reserved (RealNodeTaint) when it is not the only node.
func newRealAgent(ctx context.Context, cfg Config, conn *bus.Conn, mixed bool) (runner, error) {
	cpu, mem, err := cri.MachineCapacity()
	if err != nil {
		return nil, err
	}
	rt, err := cri.New(ctx, cri.Config{
		NodeName:  cfg.RealNode,
		Address:   cfg.ContainerdAddress,
		Namespace: cfg.ContainerdNamespace,
		PodCIDR:   cfg.RealNodePodCIDR,
		StateDir:  filepath.Join(cfg.DataDir, "agent", cfg.RealNode),
		PlainHTTP: cfg.PlainHTTPRegistries,
		Logger:    cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	box, err := secretBox(cfg)
	if err != nil {
		rt.Close()
		return nil, err
	}
	var taints []*pb.Taint
	if mixed {
		taints = append(taints, RealNodeTaint())
	}
	a, err := agent.New(agent.Config{
		Node:              cfg.RealNode,
		Taints:            taints,
		PodCIDR:           cfg.RealNodePodCIDR,
		CPU:               cpu,
		Memory:            mem,
		MaxPods:           110,
		HeartbeatInterval: cfg.HeartbeatInterval,
		EvictionHard:      cfg.RealNodeEvictionHard,
		UsageInterval:     cfg.UsageInterval,
		Logger:            cfg.Logger,
		SecretBox:         box,
	}, conn, rt)
	if err != nil {
		rt.Close()
		return nil, err
	}
	return realAgent{Agent: a, rt: rt}, nil
}
