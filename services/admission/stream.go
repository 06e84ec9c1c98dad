package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"

	"github.com/podbus/podbus/internal/podstream"
)

// kubectl exec, attach and port-forward: the API speaks kubectl's protocols (WebSocket v5/v4 and SPDY
// v4 for exec and attach; SPDY, or SPDY tunnelled in a WebSocket, for port-forward) and carries the
// streams to the pod's node agent over NATS (internal/podstream). RBAC asks for create on the
// subresource whatever the method: a WebSocket upgrade is a GET, and get on pods/exec must not run
// commands.

// streamSubresources are the pods' subresources served here.
var streamSubresources = map[string]podstream.Kind{
	"exec":        podstream.KindExec,
	"attach":      podstream.KindAttach,
	"portforward": podstream.KindPortForward,
}

const (
	// streamIdleTimeout is the kubelet's default --streaming-connection-idle-timeout.
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

var (
	// remotecommandSPDY are the SPDY protocols of exec and attach; WebSocket adds v5 (stdin close).
	remotecommandSPDY = []string{remotecommand.StreamProtocolV4Name, remotecommand.StreamProtocolV3Name,
		remotecommand.StreamProtocolV2Name, remotecommand.StreamProtocolV1Name}
	remotecommandWS = []string{remotecommand.StreamProtocolV5Name, remotecommand.StreamProtocolV4Name}
)

func (s *Service) podExec(w http.ResponseWriter, r *http.Request, req request) {
	s.podStream(w, r, req, podstream.KindExec)
}

func (s *Service) podAttach(w http.ResponseWriter, r *http.Request, req request) {
	s.podStream(w, r, req, podstream.KindAttach)
}

func (s *Service) podPortForward(w http.ResponseWriter, r *http.Request, req request) {
	s.podStream(w, r, req, podstream.KindPortForward)
}

func (s *Service) podStream(w http.ResponseWriter, r *http.Request, req request, kind podstream.Kind) {
	s.quietStreamLibraries()
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeStatus(w, apierrors.NewMethodNotSupported(grPods, r.Method))
		return
	}
	o, _, err := s.getEntry(r.Context(), podKind, req.ns, req.name)
	if err != nil {
		writeStatus(w, err)
		return
	}
	pod := o.(*corev1.Pod)
	if pod.Spec.NodeName == "" {
		writeStatus(w, badRequest("pod %s does not have a host assigned", req.name))
		return
	}
	if p := pod.Status.Phase; p == corev1.PodSucceeded || p == corev1.PodFailed {
		writeStatus(w, badRequest("cannot %s a container in a completed pod; current phase is %s", kind, p))
		return
	}
	open := podstream.Open{Kind: kind, Namespace: req.ns, Name: req.name, UID: string(pod.UID)}
	b := &streamBackend{client: podstream.Client{NC: s.conn.NC}, node: pod.Spec.NodeName, open: open}
	// A deadline an earlier request left on the keep-alive connection must not end the stream; the
	// library's upgraders hijack the connection: they need the server's own writer.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	w = unwrapWriter(w)
	if kind == podstream.KindPortForward {
		s.servePortForward(w, r, b, pod)
		return
	}
	container, err := streamContainer(pod, req.q.Get("container"))
	if err != nil {
		writeStatus(w, err)
		return
	}
	b.open.Container = container
	opts, err := streamOptions(req.q)
	if err != nil {
		writeStatus(w, err)
		return
	}
	b.open.Stdin, b.open.Stdout, b.open.Stderr, b.open.TTY = opts.Stdin, opts.Stdout, opts.Stderr, opts.TTY
	if kind == podstream.KindExec {
		b.open.Command = req.q["command"]
		if len(b.open.Command) == 0 {
			writeStatus(w, badRequest("you must specify at least one command for the container"))
			return
		}
	}
	// Opened before the upgrade, so that a pod or container the agent does not have is an HTTP error
	// kubectl shows as such; the command's output waits in the session's window meanwhile.
	sess, err := b.client.Open(r.Context(), b.node, b.open)
	if err != nil {
		writeStatus(w, sessionError(err, req.name))
		return
	}
	defer sess.Close()
	b.sess = sess
	switch {
	case wsstream.IsWebSocketRequest(r):
		serveRemotecommandWS(w, r, b, opts)
	case kind == podstream.KindExec:
		remotecommand.ServeExec(w, r, b, req.name, string(pod.UID), container, b.open.Command, opts,
			streamIdleTimeout, streamCreationTimeout, remotecommandSPDY)
	default:
		remotecommand.ServeAttach(w, r, b, req.name, string(pod.UID), container, opts,
			streamIdleTimeout, streamCreationTimeout, remotecommandSPDY)
	}
}

// streamRequest reports whether r asks for a pod's exec, attach or portforward: long-running, it takes
// no request slot and keeps no deadline (limits.go).
func streamRequest(r *http.Request) bool {
	seg := strings.Split(strings.TrimSuffix(r.URL.Path, "/"), "/")
	return len(seg) == 8 && seg[1] == "api" && seg[3] == "namespaces" && seg[5] == "pods" && streamSubresources[seg[7]] != ""
}

// streamOptions are the streams a request asks for, from PodExecOptions or PodAttachOptions (the
// library's own parser reads the kubelet's parameter names).
func streamOptions(q url.Values) (*remotecommand.Options, error) {
	var o remotecommand.Options
	for name, dst := range map[string]*bool{"stdin": &o.Stdin, "stdout": &o.Stdout, "stderr": &o.Stderr, "tty": &o.TTY} {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, badRequest("invalid %s %q", name, v)
			}
			*dst = b
		}
	}
	o.Stderr = o.Stderr && !o.TTY // a terminal merges them
	if !o.Stdin && !o.Stdout && !o.Stderr {
		return nil, badRequest("you must specify at least 1 of stdin, stdout, stderr")
	}
	return &o, nil
}

// streamContainer is the container a request names, or the pod's only one (kubectl names it anyway).
func streamContainer(pod *corev1.Pod, name string) (string, error) {
	if name == "" {
		if len(pod.Spec.Containers) != 1 {
			names := make([]string, len(pod.Spec.Containers))
			for i, c := range pod.Spec.Containers {
				names[i] = c.Name
			}
			return "", badRequest("a container name must be specified for pod %s, choose one of: %v", pod.Name, names)
		}
		return pod.Spec.Containers[0].Name, nil
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		if slices.ContainsFunc(cs, func(c corev1.Container) bool { return c.Name == name }) {
			return name, nil
		}
	}
	return "", badRequest("container %s is not valid for pod %s", name, pod.Name)
}

// sessionError is the HTTP error of a session the agent refused or could not be asked for.
func sessionError(err error, name string) error {
	var re *podstream.RefusedError
	switch {
	case errors.As(err, &re):
		return apierrors.NewGenericServerResponse(re.Code, "create", grPods, name, re.Message, 0, false)
	case errors.Is(err, podstream.ErrNoAgent):
		return apierrors.NewServiceUnavailable(err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewTimeoutError(err.Error(), 0)
	}
	return apierrors.NewServiceUnavailable(err.Error())
}

// unwrapWriter is the writer under the API's wrappers (which keep Unwrap for http.ResponseController).
func unwrapWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// streamBackend is the kubelet side of the streaming library: it runs the session on the pod's agent.
type streamBackend struct {
	client podstream.Client
	node   string
	open   podstream.Open
	sess   *podstream.Session // exec and attach: opened before the upgrade
}

var (
	_ remotecommand.Executor    = (*streamBackend)(nil)
	_ remotecommand.Attacher    = (*streamBackend)(nil)
	_ portforward.PortForwarder = (*streamBackend)(nil)
)

// ExecInContainer implements remotecommand.Executor.
func (b *streamBackend) ExecInContainer(_ context.Context, _, _, _ string, _ []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	exit, err := b.sess.Exec(podstream.Streams{Stdin: in, Stdout: nilWriter(out), Stderr: nilWriter(errOut), TTY: tty, Resize: termSizes(resize)})
	return exitError(exit, err)
}

// AttachContainer implements remotecommand.Attacher.
func (b *streamBackend) AttachContainer(_ context.Context, _, _, _ string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	exit, err := b.sess.Exec(podstream.Streams{Stdin: in, Stdout: nilWriter(out), Stderr: nilWriter(errOut), TTY: tty, Resize: termSizes(resize)})
	return exitError(exit, err)
}

// PortForward implements portforward.PortForwarder: one session per forwarded connection.
func (b *streamBackend) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("invalid port %d", port)
	}
	o := b.open
	o.Port = port
	return b.client.PortForward(ctx, b.node, o, stream)
}

// nilWriter keeps an absent stream absent: a nil io.WriteCloser as a nil io.Writer.
func nilWriter(w io.WriteCloser) io.Writer {
	if w == nil {
		return nil
	}
	return w
}

func termSizes(in <-chan remotecommand.TerminalSize) <-chan podstream.TermSize {
	if in == nil {
		return nil
	}
	out := make(chan podstream.TermSize)
	go func() {
		defer close(out)
		for s := range in {
			out <- podstream.TermSize{Width: s.Width, Height: s.Height}
		}
	}()
	return out
}

// exitError is how the library wants an exit: nil, a utilexec.ExitError with the code, or an error.
func exitError(exit podstream.Exit, err error) error {
	switch {
	case err != nil:
		return err
	case exit.Error != "":
		return errors.New(exit.Error)
	case exit.Code != 0:
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", exit.Code), Code: exit.Code}
	}
	return nil
}

// serveRemotecommandWS serves exec and attach over WebSocket, protocol v5 (stdin close) or v4: the
// streaming library's WebSocket side stops at v4, where kubectl could not close the command's stdin.
func serveRemotecommandWS(w http.ResponseWriter, r *http.Request, b *streamBackend, opts *remotecommand.Options) {
	ch := func(use bool, t wsstream.ChannelType) wsstream.ChannelType {
		if use {
			return t
		}
		return wsstream.IgnoreChannel
	}
	channels := []wsstream.ChannelType{
		ch(opts.Stdin, wsstream.ReadChannel),
		ch(opts.Stdout, wsstream.WriteChannel),
		ch(opts.Stderr, wsstream.WriteChannel),
		wsstream.WriteChannel, // the exit status
		ch(opts.TTY, wsstream.ReadChannel),
	}
	protocols := map[string]wsstream.ChannelProtocolConfig{}
	for _, p := range remotecommandWS {
		protocols[p] = wsstream.ChannelProtocolConfig{Binary: true, Channels: channels}
	}
	conn := wsstream.NewConn(protocols)
	conn.SetIdleTimeout(streamIdleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return // the handshake answered the client
	}
	defer func() { _ = conn.Close() }()
	// An empty message on the first writable channel tells the client the streams are ready.
	first := remotecommand.StreamErr
	if opts.Stdout {
		first = remotecommand.StreamStdOut
	} else if opts.Stderr {
		first = remotecommand.StreamStdErr
	}
	_, _ = streams[first].Write(nil)

	s := podstream.Streams{TTY: opts.TTY}
	if opts.Stdin {
		s.Stdin = streams[remotecommand.StreamStdIn]
	}
	if opts.Stdout {
		s.Stdout = streams[remotecommand.StreamStdOut]
	}
	if opts.Stderr {
		s.Stderr = streams[remotecommand.StreamStdErr]
	}
	if opts.TTY {
		sizes := make(chan podstream.TermSize, 1)
		s.Resize = sizes
		go func() {
			dec := json.NewDecoder(streams[remotecommand.StreamResize])
			for {
				var size remotecommand.TerminalSize
				if dec.Decode(&size) != nil {
					return
				}
				select {
				case sizes <- podstream.TermSize{Width: size.Width, Height: size.Height}:
				case <-r.Context().Done():
					return
				}
			}
		}()
	}
	exit, err := b.sess.Exec(s)
	st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess}
	switch {
	case err != nil || exit.Error != "":
		msg := exit.Error
		if err != nil {
			msg = err.Error()
		}
		st = apierrors.NewInternalError(errors.New(msg)).Status()
	case exit.Code != 0:
		st.Status = metav1.StatusFailure
		st.Reason = remotecommand.NonZeroExitCodeReason
		st.Message = fmt.Sprintf("command terminated with non-zero exit code: exit status %d", exit.Code)
		st.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{
			Type: remotecommand.ExitCodeCauseType, Message: strconv.Itoa(exit.Code)}}}
	}
	data, _ := json.Marshal(st)
	_, _ = streams[remotecommand.StreamErr].Write(data)
}
