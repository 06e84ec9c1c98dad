package bus

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestCheckReplica(t *testing.T) {
	errConfig := errors.New("svc: invalid config")
	var js jetstream.JetStream
	js, _ = jetstream.New(&nats.Conn{})
	live := &Conn{NC: &nats.Conn{}, JS: js}
	tests := []struct {
		name string
		id   string
		conn *Conn
		ok   bool
	}{
		{"one token", "ctl-1", live, true},
		{"empty id", "", live, false},
		{"dotted id", "a.b", live, false},
		{"wildcard id", "a*", live, false},
		{"space in id", "a b", live, false},
		{"no conn", "ctl-1", nil, false},
		{"no jetstream", "ctl-1", &Conn{NC: &nats.Conn{}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckReplica(errConfig, tc.id, tc.conn)
			if tc.ok != (err == nil) {
				t.Fatalf("CheckReplica(%q) = %v, want ok %v", tc.id, err, tc.ok)
			}
			if err != nil && !errors.Is(err, errConfig) {
				t.Errorf("error %v does not wrap the service's sentinel", err)
			}
		})
	}
}
