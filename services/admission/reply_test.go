package admission

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/metrics"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Each command names a reply subject of its own with an unguessable token: answers published on the
// subjects a client could guess (the sequence numbers used before, another request's) are dropped, and
// the request gets the store's answer.
func TestReplyOnlyOnTheRequestsOwnSubject(t *testing.T) {
	e := start(t, nil, true)
	cmds, err := e.conn.NC.SubscribeSync(bus.SubjPodCommands)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body string
		err  error
	}
	post := func(name string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			resp, err := http.Post(e.base+"/api/v1/namespaces/default/pods", "application/json", strings.NewReader(podJSON(name)))
			if err != nil {
				out <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			out <- answer{resp.StatusCode, string(data), err}
		}()
		return out
	}
	// The two requests' commands may be stored together, as one batch message (group commit).
	var queued []bus.Entry
	next := func() (*pb.PodCommand, string) {
		t.Helper()
		if len(queued) == 0 {
			m, err := cmds.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if queued, err = bus.Unbatch(m.Subject, m.Header, m.Data); err != nil {
				t.Fatal(err)
			}
		}
		e := queued[0]
		queued = queued[1:]
		cmd := &pb.PodCommand{}
		if err := proto.Unmarshal(e.Data, cmd); err != nil {
			t.Fatal(err)
		}
		return cmd, bus.MetaFrom(e.Header).Reply
	}
	first, second := post("web-1"), post("web-2")
	cmd1, reply1 := next()
	cmd2, reply2 := next()
	if !bus.IsReplySubject(reply1) || reply1 == reply2 || len(reply1) < len(bus.SubjReply("a1", ""))+26 {
		t.Fatalf("reply subjects %q and %q: want distinct ones with a long random token", reply1, reply2)
	}

	forged, err := proto.Marshal(&pb.CommandResult{Code: 409, Reason: "AlreadyExists", Message: "forged"})
	if err != nil {
		t.Fatal(err)
	}
	before := metrics.Counter("admission.reply.unexpected")
	const guesses = 20
	for n := range guesses {
		if err := e.conn.NC.Publish(bus.SubjReplyPrefix+"a1."+strconv.Itoa(n), forged); err != nil {
			t.Fatal(err)
		}
	}
	bustest.Eventually(t, 10*time.Second, func() bool {
		return metrics.Counter("admission.reply.unexpected")-before == guesses
	}, "forged answers dropped: %d", metrics.Counter("admission.reply.unexpected")-before)

	// The store answers each request; a second answer on a subject already answered is dropped too.
	for _, c := range []struct {
		cmd   *pb.PodCommand
		reply string
	}{{cmd1, reply1}, {cmd2, reply2}, {cmd1, reply1}} {
		data, err := proto.Marshal(&pb.CommandResult{Code: 201, Pod: c.cmd.GetPod(), Revision: 7})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.conn.NC.PublishMsg(&nats.Msg{Subject: c.reply, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	for name, ch := range map[string]<-chan answer{"web-1": first, "web-2": second} {
		select {
		case a := <-ch:
			if a.err != nil || a.code != 201 || !strings.Contains(a.body, `"name":"`+name+`"`) {
				t.Errorf("%s: got %d %s %v; want the store's answer", name, a.code, a.body, a.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer", name)
		}
	}
	bustest.Eventually(t, 10*time.Second, func() bool {
		return metrics.Counter("admission.reply.unexpected")-before == guesses+1
	}, "a second answer to a request dropped")
}

// A publish that failed without an answer, or on a copy still being stored, may have stored the
// command: the API waits for its answer. A refusal did not.
func TestMayBeStored(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "no answer", err: fmt.Errorf("publish: %w", nats.ErrTimeout), want: true},
		{name: "no stream answered", err: jetstream.ErrNoStreamResponse, want: true},
		{name: "a copy with the same id being stored", err: fmt.Errorf("nats: %w", &jetstream.APIError{Code: 409, ErrorCode: 10158}), want: true},
		{name: "a wrong last sequence", err: fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}), want: false},
		{name: "not allowed", err: nats.ErrPermissionViolation, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mayBeStored(tt.err); got != tt.want {
				t.Errorf("mayBeStored(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
