package bus

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A publish whose answer the connection gave up to reconnect (ForceReconnect drops pending requests
// with ErrDisconnected) is sent again when it has a de-duplication id, and fails without one: it may
// have been stored.
func TestPublishResentAfterAForcedReconnect(t *testing.T) {
	srv, err := RunServer(ServerConfig{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	tests := []struct {
		name    string
		id      string
		wantErr error
	}{
		{"with an id", "cmd-1", nil},
		{"without", "", nats.ErrDisconnected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			responder, err := nats.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer responder.Close()
			var seen atomic.Int32
			first := make(chan struct{})
			// The stream's part: the first copy goes unanswered, later ones are acknowledged.
			if _, err := responder.Subscribe("cmd.x", func(m *nats.Msg) {
				if seen.Add(1) == 1 {
					close(first)
					return
				}
				_ = m.Respond([]byte(`{"stream":"CMD","seq":7}`))
			}); err != nil {
				t.Fatal(err)
			}
			if err := responder.Flush(); err != nil {
				t.Fatal(err)
			}
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			go func() {
				select {
				case <-first:
					_ = nc.ForceReconnect()
				case <-time.After(10 * time.Second):
				}
			}()
			m := nats.NewMsg("cmd.x")
			if tt.id != "" {
				m.Header.Set(HdrMsgID, tt.id)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ack, err := publishAckWithin(ctx, nc, m, 15*time.Second, 15*time.Second)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("publish = %v, %v; want %v", ack, err, tt.wantErr)
			}
			if err == nil && ack.Sequence != 7 {
				t.Errorf("ack %+v, want the second copy's (seq 7)", ack)
			}
		})
	}
}
