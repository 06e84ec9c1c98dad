package bus

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// A NATS server whose routes to every other member of its cluster are down keeps its clients (it
// answers their pings), but JetStream does not answer through it until the partition heals. Such a
// server says so in the INFO it sends a new connection: its connect_urls name only itself. A server
// that lost one peer of three still names the other, so an election after a kill or a stop does not
// look like this. A connection given several servers probes the one it is on and moves to another of
// its pool when that server says it is alone.
const (
	probeEvery   = time.Second
	probeTimeout = time.Second
	// probeConfirm lone probes in a row make a move: one could catch a route being re-established.
	probeConfirm = 2
	// moveHoldOff is the least time between two moves of a connection, so that a cluster of which
	// only one member is up does not have its clients cycle through the pool.
	moveHoldOff = 30 * time.Second
)

var errNoInfo = errors.New("no INFO line")

// readConnectURLs dials addr and reads the connect_urls of the INFO line a NATS server sends first,
// then hangs up before any handshake. A server that does not advertise its cluster's URLs sends none.
// To a server that wants TLS next it first writes a line that is not TLS: nats-server logs a handshake
// that fails that way at debug, as a load balancer's probe, where one that ends on EOF is an error.
func readConnectURLs(ctx context.Context, addr string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	line, err := bufio.NewReaderSize(c, 4096).ReadString('\n')
	if err != nil {
		return nil, err
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok {
		return nil, errNoInfo
	}
	var info struct {
		ConnectURLs []string `json:"connect_urls"`
		TLSRequired bool     `json:"tls_required"`
	}
	if err := json.Unmarshal([]byte(rest), &info); err != nil {
		return nil, err
	}
	if info.TLSRequired {
		_, _ = c.Write([]byte("PING\r\n"))
	}
	return info.ConnectURLs, nil
}

// isolationWatch decides, probe by probe, when a connection moves.
type isolationWatch struct {
	probe   func(ctx context.Context, addr string) ([]string, error)
	confirm int
	holdOff time.Duration

	lone     int       // lone probes in a row
	lastMove time.Time // zero: never moved
	lastAddr string
}

// observe takes one probe of the server at addr, made at now, and reports whether to move off it.
// A failed probe says nothing about the server's cluster: the connection's own pings judge its reach.
func (w *isolationWatch) observe(ctx context.Context, addr string, now time.Time) bool {
	if addr != w.lastAddr {
		w.lastAddr, w.lone = addr, 0
	}
	urls, err := w.probe(ctx, addr)
	if err != nil || len(urls) != 1 {
		w.lone = 0
		return false
	}
	w.lone++
	if w.lone < w.confirm || (!w.lastMove.IsZero() && now.Sub(w.lastMove) < w.holdOff) {
		return false
	}
	w.lone, w.lastMove = 0, now
	return true
}

// watchIsolation probes the server nc is on every probeEvery and moves nc to another server of its
// pool (nats.Conn.ForceReconnect puts the current one last) when the server has said it is alone
// probeConfirm times in a row. It returns when ctx ends or nc is closed.
func watchIsolation(ctx context.Context, nc *nats.Conn, name string) {
	w := &isolationWatch{probe: readConnectURLs, confirm: probeConfirm, holdOff: moveHoldOff}
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if nc.IsClosed() {
				return
			}
			addr := nc.ConnectedAddr()
			if !nc.IsConnected() || addr == "" {
				continue
			}
			if !w.observe(ctx, addr, now) {
				continue
			}
			slog.Warn("nats server cut off from its cluster: moving to another", "connection", name, "server", addr)
			if err := nc.ForceReconnect(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				slog.Warn("nats: move", "connection", name, "err", err)
			}
		}
	}
}

// serverCount is the number of servers in a NATS URL list (comma separated).
func serverCount(urls string) int {
	n := 0
	for _, u := range strings.Split(urls, ",") {
		if strings.TrimSpace(u) != "" {
			n++
		}
	}
	return n
}
