package admission

import (
	"bufio"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// servePortForward serves kubectl port-forward: SPDY as before kubectl 1.31, SPDY tunnelled in a
// WebSocket since (a WebSocket message carries SPDY bytes), and the kubelet's own WebSocket protocol
// for other clients.
func (s *Service) servePortForward(w http.ResponseWriter, r *http.Request, b *streamBackend, pod *corev1.Pod) {
	opts := &portforward.V4Options{}
	switch {
	case wsstream.IsWebSocketRequestWithTunnelingProtocol(r):
		w, r = newTunnel(w, r)
	case wsstream.IsWebSocketRequest(r):
		o, err := portforward.NewV4Options(r)
		if err != nil {
			writeStatus(w, badRequest("%v", err))
			return
		}
		opts = o
	}
	portforward.ServePortForward(w, r, b, pod.Name, string(pod.UID), opts, streamIdleTimeout,
		streamCreationTimeout, portforward.SupportedProtocols)
}

// tunnelWriter lets the SPDY upgrader run over a WebSocket: the upgrader's 101 is dropped (the
// WebSocket handshake answers instead) and its hijack upgrades to the WebSocket.
type tunnelWriter struct {
	w      http.ResponseWriter
	r      *http.Request
	header http.Header
}

// newTunnel is the writer and the request the SPDY upgrader sees for a tunnelling WebSocket request.
func newTunnel(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	sr := r.Clone(r.Context())
	sr.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	sr.Header.Set(httpstream.HeaderUpgrade, "SPDY/3.1")
	sr.Header.Set(httpstream.HeaderProtocolVersion, portforward.ProtocolV1Name)
	return &tunnelWriter{w: w, r: r, header: http.Header{}}, sr
}

func (t *tunnelWriter) Header() http.Header { return t.header }

func (t *tunnelWriter) WriteHeader(code int) {
	if code == http.StatusSwitchingProtocols {
		return
	}
	maps.Copy(t.w.Header(), t.header)
	t.w.WriteHeader(code)
}

func (t *tunnelWriter) Write(b []byte) (int, error) { return t.w.Write(b) }

func (t *tunnelWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	up := websocket.Upgrader{Subprotocols: []string{portforward.WebsocketsSPDYTunnelingPortForwardV1}}
	ws, err := up.Upgrade(t.w, t.r, nil)
	if err != nil {
		return nil, nil, err
	}
	c := &wsConn{ws: ws}
	return c, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c)), nil
}

// wsConn is a WebSocket as a byte stream: binary messages in both directions.
type wsConn struct {
	ws  *websocket.Conn
	cur io.Reader
	wmu sync.Mutex
}

var errNotBinary = errors.New("tunnel: a WebSocket message that is not binary")

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				return 0, errNotBinary
			}
			c.cur = r
		}
		n, err := c.cur.Read(p)
		if errors.Is(err, io.EOF) {
			c.cur = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error                       { return c.ws.Close() }
func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error      { return c.ws.NetConn().SetDeadline(t) }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
