// Package admission is podbus's Kubernetes API front door: an HTTP server that speaks enough of the
// kube-apiserver protocol for the real kubectl (discovery, OpenAPI v3, tables, watches, Status errors).
// Every resource is a kind in a registry (registry.go) from which routing, discovery, OpenAPI, tables and
// selectors are derived; kinds kept in a KV bucket are served by generic handlers (generic.go), others
// plug in their own:
//
//	kubectl ──HTTP──▶ admission ─┬─ pods: decode, default, validate, publish pod.cmd.{create,update,delete},
//	                             │    wait for the store's CommandResult on podbus.reply.<id>.<n> (core
//	                             │    NATS); GET straight from the pods bucket
//	                             ├─ nodes, namespaces, configmaps: generic handlers, compare-and-set on
//	                             │    the kind's bucket (resourceVersion = KV revision)
//	                             ├─ LIST/WATCH of every kind in a bucket: its watch cache (watchcache.go),
//	                             │    fed by one KV watch of the bucket
//	                             ├─ POST pods/eviction: a graceful delete, as above
//	                             ├─ GET/LIST/WATCH events: the EVENTS stream (resourceVersion = sequence)
//	                             └─ pods/log: request/reply to the node's agent on podbus.logs.<node>
//
// Admission never writes pods itself: the store service is the only writer of pod commands. Nodes,
// namespaces and configmaps have no pipeline and are written here (see docs/design.md, "Nodes"); the
// namespace controller (services/namespaces) finishes namespace deletions.
package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/webview"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Defaults.
const (
	DefaultAddr         = "127.0.0.1:6443"
	DefaultReplyTimeout = 30 * time.Second
	DefaultLookAfter    = 2500 * time.Millisecond
	DefaultMaxBodyBytes = 3 << 20 // kube-apiserver's limit for a request body
)

// Config configures one admission replica.
type Config struct {
	ID string
	// SharedWatches, when set, shares whole-bucket watches with the process's other services.
	SharedWatches *bus.WatchHub
	// Addr is the listen address; "127.0.0.1:0" picks a free port (see Service.Addr).
	Addr string
	// TLSCertFile and TLSKeyFile are the serving certificate and key (kube-apiserver's --tls-cert-file and
	// --tls-private-key-file), PEM; required unless InsecureHTTP.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile authenticates client certificates that chain to it: CN the user, O the groups
	// (--client-ca-file). Empty: no x509 authentication.
	ClientCAFile string
	// TokenAuthFile holds static bearer tokens in kube's CSV, token,user,uid[,"group1,group2"]
	// (--token-auth-file). Empty: no tokens.
	TokenAuthFile string
	// InsecureHTTP serves plain HTTP without authentication: every request is system:unsecured in
	// system:masters. New refuses it with any of the above.
	InsecureHTTP bool
	// ReplyTimeout bounds the wait for the store's answer to a command (504 Timeout after it). It
	// covers a NATS server's stop: the store's consumer redelivers a command whose delivery was lost
	// after its AckWait (10 s).
	ReplyTimeout time.Duration
	// LookAfter is how often a command still without an answer has its effect looked for in the bucket
	// (an answer lost in a NATS server's stop then costs this, not the whole timeout); default
	// DefaultLookAfter, or a quarter of a shorter ReplyTimeout.
	LookAfter time.Duration
	// MaxBodyBytes bounds request bodies (413 above it).
	MaxBodyBytes int64
	// Limits bound requests, watches and objects (zero: kube-apiserver's defaults).
	Limits Limits
	// PriorityClasses resolve spec.priorityClassName on create (nil: only the built-in system classes).
	PriorityClasses *convert.PriorityClasses
	// Bus shapes the buckets of the served kinds, which New provisions (replicas, storage) as the
	// pipeline's are.
	Bus bus.Options
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// EncryptionKeyFile seals Secrets at rest (secretbox's key file, see secrets.go); empty: in clear.
	EncryptionKeyFile string
	// kinds served besides the built-in ones (tests of the registry).
	extraKinds []*kind
	// testUser, when set, replaces the authenticated requester (tests of authorization).
	testUser func(r *http.Request, u *userInfo) *userInfo
	// testPublisher, when set, wraps the commands' publisher (tests of lost acknowledgements).
	testPublisher func(commandPublisher) commandPublisher
	// cacheEvents fixes how many changes a kind's watch cache keeps (0: as many as eventFreshness, within
	// minCacheEvents and maxCacheEvents); bookmarkEvery
	// how often watchers that allow them get a BOOKMARK (0: defaultBookmarkEvery). For tests.
	cacheEvents   int
	bookmarkEvery time.Duration
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("admission: invalid config")

// commandPublisher sends the pod commands (bus.Batcher).
type commandPublisher interface {
	PublishAsync(subject string, m proto.Message, meta bus.Meta) (jetstream.PubAckFuture, error)
}

// Service is one admission replica.
type Service struct {
	cfg     Config
	conn    *bus.Conn
	pub     commandPublisher // a bus.Batcher: commands of concurrent requests are stored together (group commit)
	reg     *registry
	buckets map[string]jetstream.KeyValue // by bucket name: the served kinds' and the pipeline's
	pods    jetstream.KeyValue
	log     *slog.Logger
	ready   chan struct{}
	limits  *limiter
	authn   *authn
	addr    atomic.Value // string, set once listening
	mu      sync.Mutex
	waiter  map[string]chan *pb.CommandResult // by reply token
	// ctx bounds the watch caches: it ends with Run.
	ctx      context.Context
	stop     context.CancelFunc
	authz    *authorizer
	cachesMu sync.Mutex
	caches   map[string]*watchCache // by bucket
	kvReads  atomic.Int64           // reads of objects from a bucket, for tests
	ui       *webview.View          // the live web view under /ui/ (ui.go)
	usage    *usageCache            // metrics.k8s.io (metricsapi.go)
}

// New opens the buckets the API reads from, provisions those of the served kinds, and creates the
// namespaces that always exist. The pipeline's streams and buckets must be provisioned.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if cfg.ID == "" || strings.ContainsAny(cfg.ID, ".*> \t") {
		return nil, fmt.Errorf("%w: ID %q must be one subject token", ErrConfig, cfg.ID)
	}
	if conn == nil || conn.NC == nil || conn.JS == nil {
		return nil, fmt.Errorf("%w: no bus connection", ErrConfig)
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.ReplyTimeout <= 0 {
		cfg.ReplyTimeout = DefaultReplyTimeout
	}
	if cfg.LookAfter <= 0 || cfg.LookAfter >= cfg.ReplyTimeout {
		cfg.LookAfter = min(DefaultLookAfter, cfg.ReplyTimeout/4)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	an, err := newAuthn(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	box, err := loadSecretBox(cfg.EncryptionKeyFile)
	if err != nil {
		return nil, err
	}
	reg := &registry{kinds: withSecretBox(append(builtinKinds(), cfg.extraKinds...), box)}
	specs := reg.buckets()
	if err := bus.ProvisionBuckets(ctx, conn.JS, cfg.Bus, specs...); err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	buckets := map[string]jetstream.KeyValue{}
	for _, name := range append([]string{bus.BucketPods, bus.BucketNodes, bus.BucketLeases}, bucketNames(specs)...) {
		kv, err := bus.OpenBucket(ctx, conn.JS, name)
		if err != nil {
			return nil, fmt.Errorf("admission: %w", err)
		}
		buckets[name] = cfg.SharedWatches.Wrap(kv)
	}
	// A command's publish is sent again for as long as its answer is waited for: an outage of the
	// stream's leader shorter than that is only a slower answer.
	var pub commandPublisher = bus.NewBatcher(conn.JS, "admission/"+cfg.ID, bus.WithPublishTTL(cfg.ReplyTimeout))
	if cfg.testPublisher != nil {
		pub = cfg.testPublisher(pub)
	}
	s := &Service{
		cfg:     cfg,
		conn:    conn,
		pub:     pub,
		reg:     reg,
		buckets: buckets,
		pods:    buckets[bus.BucketPods],
		log:     logger.With("actor", "admission/"+cfg.ID),
		ready:   make(chan struct{}),
		limits:  newLimiter(cfg.Limits.withDefaults()),
		authn:   an,
		waiter:  map[string]chan *pb.CommandResult{},
		caches:  map[string]*watchCache{},
		ui:      webview.New(conn.JS, webview.Config{Logger: logger}),
		usage:   newUsageCache(),
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.authz = s.newAuthorizer()
	for _, ns := range systemNamespaces {
		if err := s.ensureNamespace(ctx, ns); err != nil {
			return nil, fmt.Errorf("admission: %w", err)
		}
	}
	if err := s.bootstrapPolicy(ctx); err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	return s, nil
}

func bucketNames(specs []bus.BucketSpec) []string {
	out := make([]string, len(specs))
	for i, b := range specs {
		out[i] = b.Name
	}
	return out
}

// Ready is closed once the server listens; Addr is valid from then on.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Addr is the bound listen address ("" before Ready).
func (s *Service) Addr() string {
	a, _ := s.addr.Load().(string)
	return a
}

// URL is the API's base URL, https:// unless Config.InsecureHTTP ("" before Ready).
func (s *Service) URL() string {
	a := s.Addr()
	switch {
	case a == "":
		return ""
	case s.cfg.InsecureHTTP:
		return "http://" + a
	default:
		return "https://" + a
	}
}

// Run serves the API until ctx is cancelled, then shuts the server down gracefully.
func (s *Service) Run(ctx context.Context) error {
	defer s.stop()
	stopCaches := context.AfterFunc(ctx, s.stop)
	defer stopCaches()
	defer s.runUI(ctx)()
	// Every kind's cache starts now, so watches may resume from any resourceVersion since the start.
	for _, k := range s.reg.kinds {
		if k.storage != nil && k.serve == nil && !k.hot {
			s.cache(k)
		}
	}
	sub, err := s.conn.NC.Subscribe(bus.SubjReplies(s.cfg.ID), s.onReply)
	if err != nil {
		return fmt.Errorf("admission: subscribe replies: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	usub, err := s.subscribeUsage()
	if err != nil {
		return fmt.Errorf("admission: subscribe usage: %w", err)
	}
	defer func() { _ = usub.Unsubscribe() }()

	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("admission: listen %s: %w", s.cfg.Addr, err)
	}
	scheme := "http"
	if !s.cfg.InsecureHTTP {
		ln = tls.NewListener(ln, s.authn.tlsConfig())
		scheme = "https"
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       s.limits.l.IdleTimeout, // read and write deadlines are per request (limits.go)
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       withConnAuth,
		// Failed handshakes (a client that does not trust the CA) are the client's business.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.addr.Store(ln.Addr().String())
	close(s.ready)
	s.log.Info("serving kubernetes API", "addr", ln.Addr().String(), "scheme", scheme)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admission: serve: %w", err)
	case <-ctx.Done():
	}
	// Watches are tied to ctx (BaseContext) and end with it, so Shutdown does not wait on them.
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		_ = srv.Close()
	}
	<-errc
	return nil
}

// onReply hands a store answer to the request waiting for it: only one answer, and only on the subject
// made for that request (SubjReply); anything else is counted and dropped.
func (s *Service) onReply(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	res := &pb.CommandResult{}
	if err := proto.Unmarshal(m.Data, res); err != nil {
		metrics.Count("admission.reply.malformed", 1)
		return
	}
	s.mu.Lock()
	ch := s.waiter[token]
	delete(s.waiter, token)
	s.mu.Unlock()
	if ch == nil {
		metrics.Count("admission.reply.unexpected", 1)
		return
	}
	ch <- res // buffered: never blocks
}

// ErrReplyTimeout is returned by command when the store did not answer within Config.ReplyTimeout.
var ErrReplyTimeout = errors.New("no answer from the store")

// command publishes a pod command and waits for the store's answer. An answer can be lost after the
// store acted (a NATS server under the store's or this service's connection stops), so while none has
// come, every Config.LookAfter and at Config.ReplyTimeout, look (nil: never) reads the bucket for the
// command's effect and its answer stands for the store's. Without either, ErrReplyTimeout. The
// answer and the looks do not wait for the publish's acknowledgement, which can be lost too.
func (s *Service) command(ctx context.Context, subject string, cmd *pb.PodCommand, meta bus.Meta,
	look func(context.Context) (*pb.CommandResult, bool)) (*pb.CommandResult, error) {
	token := bus.ReplyToken()
	ch := make(chan *pb.CommandResult, 1)
	s.mu.Lock()
	s.waiter[token] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiter, token)
		s.mu.Unlock()
	}()
	meta.Reply = bus.SubjReply(s.cfg.ID, token)
	start := time.Now()
	wait, cancel := context.WithTimeout(ctx, s.cfg.ReplyTimeout)
	defer cancel()
	f, err := s.pub.PublishAsync(subject, cmd, meta)
	if err != nil {
		return nil, err
	}
	acked, failed := f.Ok(), f.Err()
	// What became of the publish, for the log at the timeout.
	var stored *jetstream.PubAck
	var pubErr error
	var every <-chan time.Time
	if look != nil {
		t := time.NewTicker(s.cfg.LookAfter)
		defer t.Stop()
		every = t.C
	}
	for {
		select {
		case res := <-ch:
			return res, nil
		case stored = <-acked:
			acked, failed = nil, nil
		case err := <-failed:
			if !mayBeStored(err) {
				return nil, fmt.Errorf("publish %s: %w", subject, err) // refused: not stored
			}
			// The acknowledgement was lost, perhaps not the command: wait on.
			acked, failed, pubErr = nil, nil, err
		case <-every:
			if res, ok := look(wait); ok {
				return res, nil
			}
		case <-wait.Done():
			if look != nil && ctx.Err() == nil {
				if res, ok := look(ctx); ok {
					return res, nil
				}
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil, ErrReplyTimeout // the client went away: nobody waits for the answer
			}
			md := cmd.GetPod().GetMetadata()
			s.log.Warn("no answer from the store, nor its effect in the bucket", "op", cmd.GetOp().String(),
				"pod", md.GetNamespace()+"/"+md.GetName(), "msgID", meta.MsgID, "command", published(stored, pubErr),
				"after", time.Since(start).Round(time.Millisecond))
			return nil, ErrReplyTimeout
		}
	}
}

// published describes what became of a command's publish: stored (ack), or unknown (err, or no
// acknowledgement yet).
func published(ack *jetstream.PubAck, err error) string {
	switch {
	case ack != nil:
		return fmt.Sprintf("stored as %s %d", ack.Stream, ack.Sequence)
	case err != nil:
		return "unknown: " + err.Error()
	}
	return "no acknowledgement"
}

// mayBeStored says whether a failed publish may have stored its message after all: no answer came, or
// nats-server was still storing a copy with the same message id when the batcher gave up.
func mayBeStored(err error) bool {
	return bus.Unanswered(err) || bus.StoringCopy(err)
}

// userInfo is an authenticated requester, as Kubernetes' user.Info: authorization decides on its name
// and groups.
type userInfo struct {
	Name   string
	Groups []string
}

// user authenticates the request (authn.go): nil for no or wrong credentials.
func (s *Service) user(r *http.Request) *userInfo {
	return s.authn.authenticate(r)
}
