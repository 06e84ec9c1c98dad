package bus

import (
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/podbus/podbus/internal/syncbuf"
)

// The embedded server's log goes through slog, tagged as the server's.
func TestRunServerLogsThroughSlog(t *testing.T) {
	var buf syncbuf.Buffer
	s, err := RunServer(ServerConfig{Port: -1, StoreDir: t.TempDir(), Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	var ready bool
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		if rec["component"] != "nats-server" {
			t.Errorf("line without component=nats-server: %q", line)
		}
		if rec["msg"] == "Server is ready" {
			ready = true
		}
	}
	if !ready {
		t.Errorf("no \"Server is ready\" in the log:\n%s", buf.String())
	}
}

// A server that cannot start (its monitoring port is taken) fails RunServer with the server's reason,
// not with the "did not become ready" of a wait that could not succeed.
func TestRunServerFailsFastOnBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s, err := RunServer(ServerConfig{Port: -1, StoreDir: t.TempDir(), HTTPHost: "127.0.0.1", HTTPPort: port})
	if err == nil {
		s.Shutdown()
		t.Fatal("RunServer succeeded on a busy monitoring port")
	}
	if !strings.Contains(err.Error(), "monitoring") {
		t.Errorf("err = %v, want the server's reason", err)
	}
}
