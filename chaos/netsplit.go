package chaos

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// Partitions are made by routing every NATS route through a proxy of the harness, one per ordered pair
// of members (member i dials its proxy to j, which dials j's route listener), and cutting the proxies
// of a link. Why proxies rather than network namespaces and iptables: they need no privilege, they
// cannot outlive the run (they are sockets of the chaos process, where a rule left by a run killed -9
// would stay in the host's tables), and the routes are TLS, so a byte-level forwarder needs no key.
// The members advertise a route address that refuses every connection, so that no member learns
// another's real listener by gossip and routes around a cut.

// Link states.
const (
	linkUp        = iota
	linkReset     // every connection closed at once, new ones refused: both ends see the route drop
	linkBlackhole // bytes held in both directions, new connections accepted and held: a silent partition
)

var linkModes = map[int]string{linkUp: "up", linkReset: "reset", linkBlackhole: "blackhole"}

// link is the state of the connection between two members, shared by the proxies of both directions.
type link struct {
	mu      sync.Mutex
	state   int
	changed chan struct{} // closed at each state change
	conns   map[net.Conn]struct{}
}

func newLink() *link {
	return &link{changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
}

// set changes the state; a reset closes every connection of the link.
func (l *link) set(state int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = state
	close(l.changed)
	l.changed = make(chan struct{})
	if state == linkReset {
		for c := range l.conns {
			_ = c.Close()
		}
		clear(l.conns)
	}
}

// track registers the two ends of a proxied connection; false when the link is reset.
func (l *link) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == linkReset {
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *link) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		delete(l.conns, c)
	}
}

// pass waits while the link is a blackhole; false when it is reset or ctx ends.
func (l *link) pass(ctx context.Context) bool {
	for {
		l.mu.Lock()
		state, changed := l.state, l.changed
		l.mu.Unlock()
		switch state {
		case linkUp:
			return true
		case linkReset:
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// routeNet is the proxies between the members of a NATS cluster.
type routeNet struct {
	links map[[2]int]*link
	// proxies[i][j] is the address member i dials for its route to j ("" for i == j).
	proxies   [][]string
	advertise string // refuses every connection
	listeners []net.Listener
}

// newRouteNet listens for every proxy to the route listeners targets (one per member) and serves them
// until ctx ends.
func newRouteNet(ctx context.Context, targets []string) (*routeNet, error) {
	n := len(targets)
	rn := &routeNet{links: map[[2]int]*link{}, proxies: make([][]string, n)}
	listen := func() (net.Listener, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("route proxy: %w", err)
		}
		rn.listeners = append(rn.listeners, l)
		return l, nil
	}
	refuser, err := listen()
	if err != nil {
		return nil, err
	}
	rn.advertise = refuser.Addr().String()
	go refuse(refuser)
	for i := range n {
		rn.proxies[i] = make([]string, n)
		for j := range n {
			if i == j {
				continue
			}
			k := linkKey(i, j)
			if rn.links[k] == nil {
				rn.links[k] = newLink()
			}
			l, err := listen()
			if err != nil {
				rn.close()
				return nil, err
			}
			rn.proxies[i][j] = l.Addr().String()
			go serveProxy(ctx, l, targets[j], rn.links[k])
		}
	}
	go func() {
		<-ctx.Done()
		rn.close()
	}()
	return rn, nil
}

func linkKey(i, j int) [2]int { return [2]int{min(i, j), max(i, j)} }

// close stops the listeners and closes every proxied connection.
func (rn *routeNet) close() {
	for _, l := range rn.listeners {
		_ = l.Close()
	}
	for _, l := range rn.links {
		l.set(linkReset)
	}
}

// isolate sets every link of member i to state.
func (rn *routeNet) isolate(i, state int) {
	for k, l := range rn.links {
		if k[0] == i || k[1] == i {
			l.set(state)
		}
	}
}

// cut sets the link between members i and j to state.
func (rn *routeNet) cut(i, j, state int) { rn.links[linkKey(i, j)].set(state) }

// heal brings every link up.
func (rn *routeNet) heal() {
	for _, l := range rn.links {
		l.set(linkUp)
	}
}

func refuse(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

func serveProxy(ctx context.Context, l net.Listener, target string, lk *link) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			if !lk.pass(ctx) {
				return
			}
			var d net.Dialer
			out, err := d.DialContext(ctx, "tcp", target)
			if err != nil {
				return
			}
			defer out.Close()
			if !lk.track(in, out) {
				return
			}
			defer lk.untrack(in, out)
			done := make(chan struct{}, 2)
			go func() { forward(ctx, out, in, lk); done <- struct{}{} }()
			go func() { forward(ctx, in, out, lk); done <- struct{}{} }()
			select {
			case <-done:
			case <-ctx.Done():
			}
		}()
	}
}

// forward copies src to dst, holding each read while the link is a blackhole.
func forward(ctx context.Context, dst, src net.Conn, lk *link) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !lk.pass(ctx) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // the caller closes both ends
		}
	}
}
