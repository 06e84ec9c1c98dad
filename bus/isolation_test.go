package bus

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

// A connection moves only after probeConfirm lone answers in a row from the same server, never twice
// within the hold-off, and a failed probe or a server naming peers resets the count.
func TestIsolationWatchObserve(t *testing.T) {
	alone := []string{"nats://a:4222"}
	peers := []string{"nats://a:4222", "nats://b:4222"}
	errProbe := errors.New("dial refused")
	type probe struct {
		addr string
		urls []string
		err  error
		at   time.Duration // since the start
	}
	tests := []struct {
		name   string
		probes []probe
		want   []bool
	}{
		{"peers: never", []probe{{"a", peers, nil, 0}, {"a", peers, nil, 1}, {"a", peers, nil, 2}}, []bool{false, false, false}},
		{"alone twice: move", []probe{{"a", alone, nil, 0}, {"a", alone, nil, 1}}, []bool{false, true}},
		{"a failed probe in between", []probe{{"a", alone, nil, 0}, {"a", nil, errProbe, 1}, {"a", alone, nil, 2}, {"a", alone, nil, 3}}, []bool{false, false, false, true}},
		{"peers in between", []probe{{"a", alone, nil, 0}, {"a", peers, nil, 1}, {"a", alone, nil, 2}}, []bool{false, false, false}},
		{"no list says nothing", []probe{{"a", nil, nil, 0}, {"a", nil, nil, 1}}, []bool{false, false}},
		{"another server starts over", []probe{{"a", alone, nil, 0}, {"b", alone, nil, 1}, {"b", alone, nil, 2}}, []bool{false, false, true}},
		{"held off after a move", []probe{{"a", alone, nil, 0}, {"a", alone, nil, 1}, {"b", alone, nil, 2}, {"b", alone, nil, 3}, {"b", alone, nil, 40}}, []bool{false, true, false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := 0
			w := &isolationWatch{confirm: 2, holdOff: 30 * time.Second, probe: func(_ context.Context, addr string) ([]string, error) {
				p := tt.probes[i]
				if addr != p.addr {
					t.Fatalf("probe %d of %s, want %s", i, addr, p.addr)
				}
				return p.urls, p.err
			}}
			start := time.Now()
			var got []bool
			for i = range tt.probes {
				got = append(got, w.observe(context.Background(), tt.probes[i].addr, start.Add(tt.probes[i].at*time.Second)))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("moves %v, want %v", got, tt.want)
			}
		})
	}
}

// The probe reads the connect_urls of a server's first line, and says when there is no INFO line.
func TestReadConnectURLs(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    []string
		wantErr bool
	}{
		{"cluster", `INFO {"server_id":"x","connect_urls":["10.0.0.1:4222","10.0.0.2:4222"]}` + "\r\n", []string{"10.0.0.1:4222", "10.0.0.2:4222"}, false},
		{"alone", `INFO {"connect_urls":["10.0.0.1:4222"]}` + "\r\n", []string{"10.0.0.1:4222"}, false},
		{"no cluster", `INFO {"server_id":"x"}` + "\r\n", nil, false},
		{"not NATS", "HTTP/1.1 400 Bad Request\r\n", nil, true},
		{"no line", "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(tt.line))
				c.Close()
			}()
			got, err := readConnectURLs(context.Background(), ln.Addr().String())
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Errorf("readConnectURLs = %v, %v; want %v (an error: %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestServerCount(t *testing.T) {
	for in, want := range map[string]int{"": 0, "nats://a:4222": 1, "nats://a:4222,nats://b:4222, nats://c:4222": 3, "nats://a:4222,": 1} {
		if got := serverCount(in); got != want {
			t.Errorf("serverCount(%q) = %d, want %d", in, got, want)
		}
	}
}
