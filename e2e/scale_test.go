package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/schedsim"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/binder"
	"github.com/podbus/podbus/services/store"
)

// The shape of the three-replica test: 50 nodes whose cpu holds 1,800 pods of 100m, 2,000 pods.
const (
	scaleNodes    = 50
	scalePods     = 2000
	scaleNodeCPU  = "3600m"
	scalePodCPU   = "100m"
	scaleZones    = 3
	scaleAntiSets = 10 // anti-affinity groups of 40 pods (with the full mix), each needing 40 distinct hosts
	scaleAckWait  = 10 * time.Second
	labelDisk     = "disktype"
	labelAnti     = "anti"
	labelSpread   = "spread"
	taintKey      = "dedicated"
)

// Pod kinds of the mix; each is enabled only when the scheduler has the plugin it needs, or as
// PODBUS_SCALE_MIX (comma separated) says.
const (
	kindPlain    = "plain"
	kindSelector = "selector"
	kindTolerate = "toleration"
	kindAnti     = "anti-affinity"
	kindSpread   = "spread"
)

func scaleMix(t *testing.T) []string {
	if env := os.Getenv("PODBUS_SCALE_MIX"); env != "" {
		return strings.Split(env, ",")
	}
	mix := []string{kindPlain, kindSelector, kindTolerate}
	if schedsim.HasPlugin("InterPodAffinity") {
		mix = append(mix, kindAnti)
	} else {
		t.Log("no InterPodAffinity plugin: anti-affinity pods left out of the mix")
	}
	if schedsim.HasPlugin("PodTopologySpread") {
		mix = append(mix, kindSpread)
	} else {
		t.Log("no PodTopologySpread plugin: spread pods left out of the mix")
	}
	return mix
}

// Three scheduler replicas, each its own `podbus scheduler` process over TCP, and two binders share
// 2,000 pods on 50 nodes that hold 1,800: every pod ends bound exactly once or Unschedulable with a
// reason, no node is over its allocatable, and the placement constraints hold. In the second round one
// scheduler process is SIGKILLed mid-run, holding the messages it pulled: the same outcome, and every
// pod decided within the consumer's ack wait plus a margin after the kill.
func TestThreeSchedulerReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 pods, builds the binary")
	}
	mix := scaleMix(t)
	bin := buildPodbus(t)
	for _, kill := range []bool{false, true} {
		name := "all-replicas-live"
		if kill {
			name = "one-replica-killed"
		}
		t.Run(name, func(t *testing.T) { scaleRound(t, bin, mix, kill) })
	}
}

func scaleRound(t *testing.T, bin string, mix []string, kill bool) {
	srv, conn := bustest.Start(t)
	url := srv.ClientURL()
	ctx := context.Background()
	b, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*pb.Node, scaleNodes)
	for i := range nodes {
		labels := map[string]string{schedsim.LabelZone: fmt.Sprintf("zone-%d", i%scaleZones)}
		if i%2 == 0 {
			labels[labelDisk] = "ssd"
		}
		var taints []*pb.Taint
		if i%10 == 9 {
			taints = append(taints, &pb.Taint{Key: taintKey, Value: "infra", Effect: "NoSchedule"})
		}
		nodes[i] = schedsim.Node(fmt.Sprintf("n%02d", i), scaleNodeCPU, "64Gi", 110, labels, taints...)
	}
	if err := schedsim.RegisterNodes(ctx, b.Nodes, nodes); err != nil {
		t.Fatal(err)
	}

	startProc(t, url, "store", func(c *bus.Conn) (interface{ Run(context.Context) error }, error) {
		return store.New(store.Config{ID: "store"}, c)
	})
	for i := range 2 {
		startProc(t, url, fmt.Sprintf("binder-%d", i), func(c *bus.Conn) (interface{ Run(context.Context) error }, error) {
			return binder.New(binder.Config{ID: fmt.Sprintf("binder-%d", i)}, c)
		})
	}
	scheds := make([]*schedProc, 3)
	for i := range scheds {
		scheds[i] = startScheduler(t, bin, url, fmt.Sprintf("sched-%d", i))
	}
	// Every replica has its node cache before the first pod: /readyz says so.
	for _, s := range scheds {
		s.waitReady(t)
	}

	pods := make([]*pb.Pod, scalePods)
	for i := range pods {
		pods[i] = scalePod(i, mix[i%len(mix)])
	}
	conflicts := metrics.Counter("binder.conflicts")
	start := time.Now()
	if err := schedsim.Submit(ctx, bus.NewPublisher(conn.JS, "e2e"), pods, 256); err != nil {
		t.Fatal(err)
	}
	deadline := 2 * time.Minute
	if kill {
		// Mid-run: once a quarter of the pods are bound, one replica dies holding pulled messages.
		bustest.Eventually(t, time.Minute, func() bool { return boundSoFar(t, conn) >= scalePods/4 },
			"a quarter of the pods bound")
		scheds[1].sigkill(t)
		killed := time.Now()
		t.Logf("SIGKILLed sched-1 after %s", killed.Sub(start).Round(time.Millisecond))
		deadline = scaleAckWait + 50*time.Second // the held messages come back after the ack wait
	}
	decided := func(p *pb.Pod) bool { return p.GetSpec().GetNodeName() != "" || isUnschedulable(p) }
	all := waitAll(t, conn, scalePods, time.Until(time.Now().Add(deadline)), decided)
	// Every reservation belongs to a pod bound to that node (none leaked by a refused decision). Every
	// pod decided is not yet a settled run: a pod judged Unschedulable is retried when room frees up,
	// and two replicas may hold the same pod at once (at-least-once delivery), so a binding can still
	// be under way between the reservation and the pod's compare-and-set. A leak is what outlasts that.
	leaks := reservationLeaks(t, b, nodes, all)
	for settle := time.Now().Add(30 * time.Second); len(leaks) > 0 && time.Now().Before(settle); {
		time.Sleep(200 * time.Millisecond)
		all = waitAll(t, conn, scalePods, time.Minute, decided)
		leaks = reservationLeaks(t, b, nodes, all)
	}
	for _, leak := range leaks {
		t.Error(leak)
	}
	var requeues, waits int64
	for _, s := range scheds {
		if s.cmd.ProcessState == nil { // the killed one took its counters with it
			c := s.counters(t)
			requeues, waits = requeues+c["scheduler.conflict_requeues"], waits+c["scheduler.cache_waits"]
		}
	}
	t.Logf("%d pods decided in %s: binder conflicts %d; live schedulers' conflict requeues %d, cache waits %d", scalePods,
		time.Since(start).Round(time.Millisecond), metrics.Counter("binder.conflicts")-conflicts, requeues, waits)
	checkScale(t, conn, b, nodes, all)
}

// reservationLeaks lists the alloc records' reservations that do not belong to a pod of all bound to
// that node.
func reservationLeaks(t *testing.T, b bus.Buckets, nodes []*pb.Node, all map[string]*pb.Pod) []string {
	t.Helper()
	boundTo := map[string]string{}
	for _, p := range all {
		if n := p.GetSpec().GetNodeName(); n != "" {
			boundTo[p.GetMetadata().GetUid()] = n
		}
	}
	var leaks []string
	for _, n := range nodes {
		name := n.GetMetadata().GetName()
		a, _, err := binder.ReadAllocation(context.Background(), b.Alloc, name)
		if err != nil {
			t.Fatal(err)
		}
		for uid := range a.GetPods() {
			if boundTo[uid] != name {
				leaks = append(leaks, fmt.Sprintf("alloc/%s holds %s, which is bound to %q", name, uid, boundTo[uid]))
			}
		}
	}
	return leaks
}

// schedProc is a `podbus scheduler` process with its health address.
type schedProc struct {
	*process
	health string // http://host:port
}

func startScheduler(t *testing.T, bin, url, id string) *schedProc {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := spawn(t, bin, id, "scheduler", "--nats", url, "--id", id, "--health-addr", addr)
	return &schedProc{process: p, health: "http://" + addr}
}

var healthClient = &http.Client{Timeout: 5 * time.Second}

// waitReady waits for /readyz: the process is connected and its node cache holds the nodes and allocations.
func (s *schedProc) waitReady(t *testing.T) {
	t.Helper()
	waitReadyz(t, s.name, s.health)
}

// counters reads the process's bus counters from /debug/vars.
func (s *schedProc) counters(t *testing.T) map[string]int64 {
	t.Helper()
	resp, err := healthClient.Get(s.health + "/debug/vars")
	if err != nil {
		t.Errorf("%s counters: %v", s.name, err)
		return nil
	}
	defer resp.Body.Close()
	var vars struct {
		Podbus map[string]json.RawMessage `json:"podbus"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&vars); err != nil {
		t.Errorf("%s counters: %v", s.name, err)
		return nil
	}
	out := map[string]int64{}
	for k, v := range vars.Podbus {
		var n int64
		if json.Unmarshal(v, &n) == nil {
			out[k] = n
		}
	}
	return out
}

// boundSoFar counts the pod.bound messages in the pods stream: pods the binder has committed.
func boundSoFar(t *testing.T, conn *bus.Conn) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := conn.JS.Stream(ctx, bus.StreamPods)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(bus.SubjPodBoundAll))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}

// scalePod is pod i of a kind; each kind has its own labels so the constraints can be checked.
func scalePod(i int, kind string) *pb.Pod {
	labels := map[string]string{"kind": kind}
	p := schedsim.Pod("scale", fmt.Sprintf("p-%04d", i), scalePodCPU, "64Mi", labels)
	switch kind {
	case kindSelector:
		p.Spec.NodeSelector = map[string]string{labelDisk: "ssd"}
	case kindTolerate:
		p.Spec.Tolerations = []*pb.Toleration{{Key: taintKey, Operator: "Equal", Value: "infra", Effect: "NoSchedule"}}
	case kindAnti:
		// By i/5, not i: with the five kinds of the full mix, i%5 is the same for every pod of a kind.
		g := fmt.Sprintf("g%d", i/5%scaleAntiSets)
		labels[labelAnti] = g
		p.Spec.Affinity = &pb.Affinity{PodAntiAffinity: &pb.PodAffinity{Required: []*pb.PodAffinityTerm{{
			LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{labelAnti: g}},
			TopologyKey:   schedsim.LabelHostname,
		}}}}
	case kindSpread:
		labels[labelSpread] = "s"
		p.Spec.TopologySpreadConstraints = []*pb.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: schedsim.LabelZone, WhenUnsatisfiable: "DoNotSchedule",
			LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{labelSpread: "s"}},
		}}
	}
	return p
}

// checkScale asserts the outcome of a round over the store.
func checkScale(t *testing.T, conn *bus.Conn, b bus.Buckets, nodes []*pb.Node, all map[string]*pb.Pod) {
	t.Helper()
	checkInvariants(t, conn) // no pod on two nodes, pods and alloc records agree, no overcommit
	byName := map[string]*pb.Node{}
	for _, n := range nodes {
		byName[n.GetMetadata().GetName()] = n
	}
	bound, unsched := 0, 0
	antiOn := map[string]map[string]bool{} // group -> nodes used
	spreadIn := map[string]int{}           // zone -> spread pods
	for key, p := range all {
		node := p.GetSpec().GetNodeName()
		if node == "" {
			if !isUnschedulable(p) {
				t.Errorf("pod %s is neither bound nor Unschedulable: %v", key, p.GetStatus().GetConditions())
			}
			unsched++
			continue
		}
		bound++
		n := byName[node]
		labels := n.GetMetadata().GetLabels()
		for k, v := range p.GetSpec().GetNodeSelector() {
			if labels[k] != v {
				t.Errorf("pod %s on %s, which lacks %s=%s", key, node, k, v)
			}
		}
		for _, taint := range n.GetSpec().GetTaints() {
			if !slices.ContainsFunc(p.GetSpec().GetTolerations(), func(tol *pb.Toleration) bool {
				return tol.GetKey() == taint.GetKey() && tol.GetValue() == taint.GetValue() && tol.GetEffect() == taint.GetEffect()
			}) {
				t.Errorf("pod %s on %s without tolerating %s", key, node, taint.GetKey())
			}
		}
		if g := p.GetMetadata().GetLabels()[labelAnti]; g != "" {
			if antiOn[g] == nil {
				antiOn[g] = map[string]bool{}
			}
			if antiOn[g][node] {
				t.Errorf("anti-affinity group %s has two pods on %s (e.g. %s)", g, node, key)
			}
			antiOn[g][node] = true
		}
		if p.GetMetadata().GetLabels()[labelSpread] != "" {
			spreadIn[labels[schedsim.LabelZone]]++
		}
	}
	if len(antiOn) == 1 {
		t.Errorf("every bound anti-affinity pod is in one group %v: the constraint is checked on one group only", slices.Collect(maps.Keys(antiOn)))
	}
	if len(spreadIn) > 0 {
		lo, hi := scalePods, 0
		for z := range scaleZones {
			c := spreadIn[fmt.Sprintf("zone-%d", z)]
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Errorf("spread pods per zone %v: skew %d > maxSkew 1", spreadIn, hi-lo)
		}
	}
	// Capacity is 1,800 pods; taints and selectors may leave some of it unusable, but a scheduler
	// that gave up on pods that fit would show here.
	t.Logf("%d bound, %d unschedulable", bound, unsched)
	if bound > 1800 || bound < 1500 {
		t.Errorf("%d pods bound, want between 1500 and the 1800 that fit", bound)
	}
	var free int64
	for name, n := range byName {
		a, _, err := binder.ReadAllocation(context.Background(), b.Alloc, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(n.GetSpec().GetTaints()) == 0 {
			free += podutil.NodeAllocatable(n).GetMilliCpu() - a.GetTotal().GetMilliCpu()
		}
	}
	t.Logf("cpu left on untainted nodes: %dm", free)
}
