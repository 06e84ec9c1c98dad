package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
	rn, srvs := routedCluster(ctx, t)
	peers, meshed := routeCounts(srvs)
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

// routedCluster starts three embedded members whose routes go through a routeNet's proxies.
func routedCluster(ctx context.Context, t *testing.T) (*routeNet, []*server.Server) {
	t.Helper()
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
		t.Cleanup(s.Shutdown)
	}
	return rn, srvs
}

// routeCounts gives the number of distinct peers a member has a route to, and a condition that each
// member i has want[i] of them. Route pooling makes several connections per pair.
func routeCounts(srvs []*server.Server) (peers func(int) int, meshed func(want ...int) func() bool) {
	peers = func(i int) int {
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
	meshed = func(want ...int) func() bool {
		return func() bool {
			for i, w := range want {
				if peers(i) != w {
					return false
				}
			}
			return true
		}
	}
	return peers, meshed
}

// clusterClient is a routed cluster that has meshed, and a service's connection to it, made to member 0
// first.
type clusterClient struct {
	rn     *routeNet
	peers  func(int) int
	meshed func(want ...int) func() bool
	c      *bus.Conn
	first  string // member 0's client address
}

func newClusterClient(ctx context.Context, t *testing.T) *clusterClient {
	t.Helper()
	rn, srvs := routedCluster(ctx, t)
	peers, meshed := routeCounts(srvs)
	bustest.Eventually(t, time.Minute, meshed(2, 2, 2), "the cluster never meshed")
	urls := make([]string, len(srvs))
	for i, s := range srvs {
		urls[i] = s.ClientURL()
	}
	c, err := bus.Connect(ctx, strings.Join(urls, ","), t.Name(), nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cc := &clusterClient{rn: rn, peers: peers, meshed: meshed, c: c, first: srvs[0].Addr().String()}
	if got := c.NC.ConnectedAddr(); got != cc.first {
		t.Fatalf("connected to %s, want the first of the list, %s", got, cc.first)
	}
	return cc
}

// left says whether the connection is on another member than the first.
func (cc *clusterClient) left() bool {
	got := cc.c.NC.ConnectedAddr()
	return cc.c.NC.IsConnected() && got != "" && got != cc.first
}

// A service's connection stays on a server that lost a single route: that server still reaches a
// quorum.
func TestConnectionStaysOnServerWithARoute(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc := newClusterClient(ctx, t)
	cc.rn.cut(0, 1, linkReset)
	bustest.Eventually(t, time.Minute, cc.meshed(1, 1, 2), "link 0-1 cut: routes %d %d %d", cc.peers(0), cc.peers(1), cc.peers(2))
	// Several probes' worth: a move would come within two.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if cc.left() {
			t.Fatalf("moved to %s while its server still had a route", cc.c.NC.ConnectedAddr())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A service's connection leaves a server cut off from the rest of its cluster for another of its
// pool, whether the partition resets the routes or holds their bytes silently: then the member's
// routes' pings go unanswered and it drops them.
func TestConnectionLeavesIsolatedServer(t *testing.T) {
	tests := []struct {
		name   string
		mode   int
		within time.Duration
	}{
		{"routes reset", linkReset, 30 * time.Second},
		// Two unanswered pings and two lone answers to the connection's probes; nats-server's own
		// route pings would take a minute before the first step.
		{"silent partition", linkBlackhole, 4*bus.DefaultRoutePingInterval + 10*time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cc := newClusterClient(ctx, t)
			cc.rn.isolate(0, tt.mode)
			bustest.Eventually(t, tt.within, cc.left, "the connection stayed on the isolated server %s", cc.first)
			if n := cc.peers(0); n != 0 {
				t.Errorf("the isolated member still has routes to %d peers", n)
			}
			cc.rn.heal()
			bustest.Eventually(t, time.Minute, cc.meshed(2, 2, 2), "healed: routes %d %d %d", cc.peers(0), cc.peers(1), cc.peers(2))
		})
	}
}
