package bus

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// The embedded server's log goes through slog, tagged as the server's.
func TestRunServerLogsThroughSlog(t *testing.T) {
	var buf syncBuffer
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

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
