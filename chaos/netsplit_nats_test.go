package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/freeport"
)

// A NATS cluster whose routes go through the proxies: isolating a member leaves it without a route,
// the other two keep theirs, and after a heal no member has learned a way around the proxies (gossip
// of a real route address), so that the next cut isolates it again.
func TestPartitionNATS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const members = 3
	targets := make([]string, members)
	for i := range targets {
		p, err := freeport.Pick()
		if err != nil {
			t.Fatal(err)
		}
		targets[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	rn, err := newRouteNet(ctx, targets)
	if err != nil {
		t.Fatal(err)
	}
	srvs := make([]*server.Server, members)
	for i := range members {
		var routes []string
		for j := range members {
			if j != i {
				routes = append(routes, "nats://"+rn.proxies[i][j])
			}
		}
		s, err := bus.RunServer(bus.ServerConfig{Port: -1, StoreDir: filepath.Join(t.TempDir(), "js"), Name: fmt.Sprint("m", i),
			ClusterName: "t", ClusterListen: targets[i], Routes: routes, ClusterAdvertise: rn.advertise})
		if err != nil {
			t.Fatal(err)
		}
		srvs[i] = s
		defer s.Shutdown()
	}
	// Route pooling makes several connections per pair: count distinct peers.
	peers := func(i int) int {
		rz, err := srvs[i].Routez(nil)
		if err != nil {
			return -1
		}
		seen := map[string]bool{}
		for _, r := range rz.Routes {
			seen[r.RemoteID] = true
		}
		return len(seen)
	}
	meshed := func(want ...int) func() bool {
		return func() bool {
			for i, w := range want {
				if peers(i) != w {
					return false
				}
			}
			return true
		}
	}
	bustest.Eventually(t, time.Minute, meshed(2, 2, 2), "the cluster never meshed")
	for range 3 {
		rn.isolate(0, linkReset)
		bustest.Eventually(t, time.Minute, meshed(0, 1, 1), "member 0 isolated: routes %d %d %d", peers(0), peers(1), peers(2))
		rn.heal()
		bustest.Eventually(t, time.Minute, meshed(2, 2, 2), "healed: routes %d %d %d", peers(0), peers(1), peers(2))
		rn.cut(1, 2, linkReset)
		bustest.Eventually(t, time.Minute, meshed(2, 1, 1), "link 1-2 cut: routes %d %d %d", peers(0), peers(1), peers(2))
		rn.heal()
		bustest.Eventually(t, time.Minute, meshed(2, 2, 2), "healed: routes %d %d %d", peers(0), peers(1), peers(2))
	}
}
