package podstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/podbus/podbus/bus/bustest"
)

// echoHandler is a hand-written agent: exec echoes stdin upper-cased to stdout and the command to
// stderr, exits with len(command); port-forward echoes what it reads.
type echoHandler struct{ refuse bool }

func (h echoHandler) Check(o Open) error {
	if h.refuse {
		return &RefusedError{Code: http.StatusNotFound, Message: "pod " + o.Name + " not here"}
	}
	return nil
}

func (echoHandler) Exec(_ context.Context, o Open, s Streams) (Exit, error) {
	if s.Stdin != nil {
		b, err := io.ReadAll(s.Stdin)
		if err != nil {
			return Exit{}, err
		}
		if _, err := s.Stdout.Write(bytes.ToUpper(b)); err != nil {
			return Exit{}, err
		}
	}
	if s.Stderr != nil {
		_, _ = io.WriteString(s.Stderr, strings.Join(o.Command, " "))
	}
	return Exit{Code: len(o.Command)}, nil
}

func (echoHandler) PortForward(_ context.Context, _ Open, conn io.ReadWriter) error {
	_, err := io.Copy(conn, conn)
	return err
}

func TestExecAndPortForward(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := t.Context()
	sub, err := Serve(ctx, c.NC, "node-a", echoHandler{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	client := Client{NC: c.NC}

	big := bytes.Repeat([]byte("abcdefgh"), 3*window/8) // more than the window: flow control must pace it
	var out, errOut bytes.Buffer
	exit, err := client.Exec(ctx, "node-a", Open{Kind: KindExec, Name: "p", Command: []string{"sh", "-c", "x"}},
		Streams{Stdin: bytes.NewReader(big), Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 3 || !bytes.Equal(out.Bytes(), bytes.ToUpper(big)) || errOut.String() != "sh -c x" {
		t.Fatalf("exit %+v, stdout %d bytes (want %d), stderr %q", exit, out.Len(), len(big), errOut.String())
	}

	var got bytes.Buffer
	conn := rw{strings.NewReader("hello"), &got}
	if err := client.PortForward(ctx, "node-a", Open{Name: "p", Port: 80}, conn); err != nil {
		t.Fatal(err)
	}
	if got.String() != "hello" {
		t.Fatalf("port-forward echoed %q", got.String())
	}
}

func TestRefusals(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := t.Context()
	client := Client{NC: c.NC}
	if _, err := client.Exec(ctx, "nobody", Open{Kind: KindExec}, Streams{}); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("exec on a node without agent: %v, want ErrNoAgent", err)
	}
	sub, err := Serve(ctx, c.NC, "node-b", echoHandler{refuse: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_, err = client.Exec(ctx, "node-b", Open{Kind: KindExec, Name: "p"}, Streams{})
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != http.StatusNotFound {
		t.Fatalf("refused exec: %v, want a 404 RefusedError", err)
	}
}

// A lost frame ends the session instead of corrupting its stream.
func TestGapEndsSession(t *testing.T) {
	_, c := bustest.Start(t)
	m, err := newMux(t.Context(), c.NC, "test.in", "test.out")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	frame := func(seq byte, data string) []byte { return append([]byte{tData, ChanStdout, 0, 0, 0, seq}, data...) }
	for _, f := range [][]byte{frame(1, "a"), frame(3, "c")} { // frame 2 lost
		if err := c.NC.Publish("test.in", f); err != nil {
			t.Fatal(err)
		}
	}
	got, err := io.ReadAll(reader{m, ChanStdout})
	if !errors.Is(err, ErrGap) || string(got) != "a" {
		t.Fatalf("read %q, %v; want \"a\" then ErrGap", got, err)
	}
}

// BenchmarkExecThroughput sends 8 MiB to an echoing agent and reads them back: NATS on loopback, both
// sides in this process.
func BenchmarkExecThroughput(b *testing.B) {
	_, c := bustest.Start(b)
	sub, err := Serve(b.Context(), c.NC, "node-a", echoHandler{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	data := bytes.Repeat([]byte("x"), 8<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var out bytes.Buffer
		if _, err := (Client{NC: c.NC}).Exec(b.Context(), "node-a", Open{Kind: KindExec}, Streams{Stdin: bytes.NewReader(data), Stdout: &out}); err != nil || out.Len() != len(data) {
			b.Fatalf("%d bytes back, %v", out.Len(), err)
		}
	}
}
