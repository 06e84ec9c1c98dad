package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/cluster/up"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// 500 pods onto 10 nodes that hold only part of them: every pod ends Ready or Unschedulable with a
// reason, none is bound twice, no node is over capacity.
func TestPipelineFillsLimitedNodes(t *testing.T) {
	cl, conn := startCluster(t, up.Config{Nodes: 10, NodeCPU: "4", NodeMemory: "8Gi", MaxPods: 45, StartDelay: 5 * time.Millisecond})
	client := apiClient(cl, 30*time.Second)

	// Requests cycle through 100m..400m cpu: 10 nodes x 4 cpu hold about 160 of them by cpu, and the pod
	// count limit (45 per node) bounds the small ones.
	cpus := []string{"100m", "200m", "300m", "400m"}
	const n = 500
	var wg sync.WaitGroup
	codes := make([]int, n)
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			name := fmt.Sprintf("p-%03d.v1", i) // dots in names must be safe
			codes[i], _ = post(t, client, cl.APIURL, "default", podJSON("default", name, cpus[i%len(cpus)], "64Mi"))
		}(i)
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusCreated {
			t.Fatalf("pod %d: HTTP %d", i, c)
		}
	}
	all := waitAll(t, conn, n, 2*time.Minute, func(p *pb.Pod) bool { return isReady(p) || isUnschedulable(p) })
	ready, unsched := 0, 0
	for _, p := range all {
		switch {
		case isReady(p):
			ready++
			if p.GetStatus().GetPodIp() == "" {
				t.Errorf("ready pod %s has no IP", p.GetMetadata().GetName())
			}
		case isUnschedulable(p):
			unsched++
		}
	}
	t.Logf("%d ready, %d unschedulable", ready, unsched)
	if ready == 0 || unsched == 0 {
		t.Errorf("expected both ready and unschedulable pods, got %d and %d", ready, unsched)
	}
	checkInvariants(t, conn)
}
