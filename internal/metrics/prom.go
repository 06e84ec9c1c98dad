package metrics

import (
	"context"
	"expvar"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry holds every Prometheus metric of the process: the Go runtime and process collectors, the
// metrics declared here, and the expvar counters bridged as podbus_events_total. It is process-wide, as
// expvar is: `podbus up` runs every service in one process and serves one /metrics.
var Registry = prometheus.NewRegistry()

var reg = wrapRegisterer{Registry}

// wrapRegisterer registers at package init, where a duplicate is a programming error.
type wrapRegisterer struct{ r *prometheus.Registry }

func (w wrapRegisterer) add(c prometheus.Collector) { w.r.MustRegister(c) }

// Handler serves Registry in the Prometheus text (or OpenMetrics) format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{Registry: Registry, EnableOpenMetrics: true})
}

// Pod stages, each observed once per pod by the service that completes it (see Stage).
var stageDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "podbus_pod_stage_duration_seconds",
	Help: "Time a pod spent in each stage of the pipeline: admission (the API's create request), store " +
		"(create command stored to pod written), scheduling (pod stored to decision), binding (decision " +
		"stored to binding committed), node_start (binding stored to containers started), ready (pod " +
		"created to Ready).",
	Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5ms .. ~65s
}, []string{"stage"})

// Stage is one stage's histogram, resolved once so that observing it allocates nothing.
type Stage struct{ o prometheus.Observer }

// The stages of a pod, in order.
var (
	StageAdmission  = Stage{stageDuration.WithLabelValues("admission")}
	StageStore      = Stage{stageDuration.WithLabelValues("store")}
	StageScheduling = Stage{stageDuration.WithLabelValues("scheduling")}
	StageBinding    = Stage{stageDuration.WithLabelValues("binding")}
	StageNodeStart  = Stage{stageDuration.WithLabelValues("node_start")}
	StageReady      = Stage{stageDuration.WithLabelValues("ready")}
)

// Since observes the time since start; a zero start (unknown) is not observed.
func (s Stage) Since(start time.Time) {
	if start.IsZero() {
		return
	}
	s.o.Observe(time.Since(start).Seconds())
}

// Observe observes d.
func (s Stage) Observe(d time.Duration) { s.o.Observe(d.Seconds()) }

// Scheduler metrics, named as kube-scheduler's where it has one.
var (
	// SchedulingAttempts counts scheduling attempts by result (scheduled, unschedulable, error) and profile.
	SchedulingAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "scheduler_schedule_attempts_total",
		Help: "Number of attempts to schedule pods, by the result.",
	}, []string{"result", "profile"})
	// SchedulingAttemptDuration is the time of one scheduling attempt, by result and profile.
	SchedulingAttemptDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "scheduler_scheduling_attempt_duration_seconds",
		Help:    "Scheduling attempt latency in seconds (scheduling algorithm + binding decision published).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"result", "profile"})
	// UnschedulableByPlugin counts, per plugin, the unschedulable attempts in which that plugin
	// rejected at least one node.
	UnschedulableByPlugin = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "podbus_scheduler_unschedulable_total",
		Help: "Unschedulable attempts by a plugin that rejected nodes in them.",
	}, []string{"plugin"})
)

// pendingDescSched is kube-scheduler's scheduler_pending_pods. Pods waiting on the bus for a scheduler
// (kube's "active" queue) are the scheduler consumer's podbus_consumer_pending_messages.
var pendingPodsDesc = prometheus.NewDesc("scheduler_pending_pods",
	"Number of pending pods, by the queue type: 'unschedulable' (parked until the cluster changes or their back-off ends).",
	[]string{"queue"}, nil)

// pendingCollector sums, per queue, what the registered schedulers in this process hold.
type pendingCollector struct {
	mu      sync.Mutex
	next    int
	byQueue map[string]map[int]func() int
}

var pending = &pendingCollector{byQueue: map[string]map[int]func() int{}}

// RegisterPending reports n() pods in queue under scheduler_pending_pods until the returned func is
// called; replicas in one process add up.
func RegisterPending(queue string, n func() int) (unregister func()) {
	pending.mu.Lock()
	defer pending.mu.Unlock()
	id := pending.next
	pending.next++
	if pending.byQueue[queue] == nil {
		pending.byQueue[queue] = map[int]func() int{}
	}
	pending.byQueue[queue][id] = n
	return func() {
		pending.mu.Lock()
		defer pending.mu.Unlock()
		delete(pending.byQueue[queue], id)
	}
}

func (*pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pendingPodsDesc }

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, fs := range c.byQueue {
		total := 0
		for _, f := range fs {
			total += f()
		}
		ch <- prometheus.MustNewConstMetric(pendingPodsDesc, prometheus.GaugeValue, float64(total), q)
	}
}

// Attempts are one profile's scheduling attempt metrics by result, resolved once per profile so that
// counting an attempt allocates nothing.
type Attempts struct {
	Scheduled, Unschedulable, Error Attempt
}

// Attempt is the counter and duration histogram of one result of one profile.
type Attempt struct {
	c prometheus.Counter
	h prometheus.Observer
}

// Since counts an attempt that started at start.
func (a Attempt) Since(start time.Time) {
	a.c.Inc()
	a.h.Observe(time.Since(start).Seconds())
}

var (
	attemptsMu sync.RWMutex
	attempts   = map[string]*Attempts{}
)

// SchedulingAttemptsFor returns the attempt metrics of a scheduler profile (a bounded set: the
// profiles a scheduler was configured with).
func SchedulingAttemptsFor(profile string) *Attempts {
	attemptsMu.RLock()
	a := attempts[profile]
	attemptsMu.RUnlock()
	if a != nil {
		return a
	}
	attemptsMu.Lock()
	defer attemptsMu.Unlock()
	if a = attempts[profile]; a == nil {
		at := func(result string) Attempt {
			return Attempt{SchedulingAttempts.WithLabelValues(result, profile), SchedulingAttemptDuration.WithLabelValues(result, profile)}
		}
		a = &Attempts{Scheduled: at("scheduled"), Unschedulable: at("unschedulable"), Error: at("error")}
		attempts[profile] = a
	}
	return a
}

// API metrics, named as kube-apiserver's.
var (
	// APIRequests counts the API's requests by verb, group, resource, subresource and HTTP code.
	APIRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_request_total",
		Help: "Counter of apiserver requests broken out for each verb, group, resource, subresource and HTTP response code.",
	}, []string{"verb", "group", "resource", "subresource", "code"})
	// APIRequestDuration is the latency of the API's requests other than watches.
	APIRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "apiserver_request_duration_seconds",
		Help: "Response latency distribution in seconds for each verb, group, resource and subresource (watches excluded).",
		Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
			4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
	}, []string{"verb", "group", "resource", "subresource"})
	// APILongRunning is the watches open now.
	APILongRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_longrunning_requests",
		Help: "Gauge of all active long-running apiserver requests (watches) broken out by verb, group and resource.",
	}, []string{"verb", "group", "resource"})
)

// Bus metrics.
var (
	// Parked counts messages parked on dead.> by the consumer that parked them.
	Parked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "podbus_parked_messages_total",
		Help: "Messages parked (malformed, failed for good or given up), by consumer.",
	}, []string{"consumer"})
	// CASConflicts counts compare-and-set conflicts on KV buckets.
	CASConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "podbus_kv_cas_conflicts_total",
		Help: "Compare-and-set writes to a KV bucket that lost to a concurrent write, by bucket.",
	}, []string{"bucket"})
)

func init() {
	reg.add(collectors.NewGoCollector())
	reg.add(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range []prometheus.Collector{stageDuration, SchedulingAttempts, SchedulingAttemptDuration,
		UnschedulableByPlugin, pending, APIRequests, APIRequestDuration, APILongRunning, Parked, CASConflicts,
		eventsCollector{}, consumers} {
		reg.add(c)
	}
}

// eventsCollector exports the expvar counters (Count) as podbus_events_total{event=...} and the gauges
// (NewGauge) as podbus_gauge{name=...}: one bridge instead of a Prometheus metric per counter.
type eventsCollector struct{}

var (
	eventsDesc = prometheus.NewDesc("podbus_events_total", "Counters of the services' events (the expvar map \"podbus\" at /debug/vars), by name.", []string{"event"}, nil)
	gaugeDesc  = prometheus.NewDesc("podbus_gauge", "Gauges of the services (the expvar map \"podbus\"), by name.", []string{"name"}, nil)
)

func (eventsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- eventsDesc; ch <- gaugeDesc }

func (eventsCollector) Collect(ch chan<- prometheus.Metric) {
	metrics.Do(func(kv expvar.KeyValue) {
		switch v := kv.Value.(type) {
		case *expvar.Int:
			ch <- prometheus.MustNewConstMetric(eventsDesc, prometheus.CounterValue, float64(v.Value()), kv.Key)
		case expvar.Func:
			if n, ok := v().(int64); ok {
				ch <- prometheus.MustNewConstMetric(gaugeDesc, prometheus.GaugeValue, float64(n), kv.Key)
			}
		}
	})
}

// ConsumerState is what a consumer reports of itself at scrape time.
type ConsumerState struct {
	Pending     uint64 // messages not yet delivered (the consumer's lag)
	AckPending  uint64 // delivered, not yet acknowledged
	Redelivered uint64
}

// ConsumerInfo asks the bus for a consumer's state.
type ConsumerInfo func(ctx context.Context) (ConsumerState, error)

// consumerCollector asks each registered consumer for its state when scraped: the bus knows the lag,
// so nothing is counted on the hot path.
type consumerCollector struct {
	mu   sync.Mutex
	byID map[string]*consumerEntry
}

type consumerEntry struct {
	info ConsumerInfo
	refs int
}

var consumers = &consumerCollector{byID: map[string]*consumerEntry{}}

var (
	pendingDesc     = prometheus.NewDesc("podbus_consumer_pending_messages", "Messages of the consumer's stream not yet delivered to it (lag).", []string{"consumer"}, nil)
	ackPendingDesc  = prometheus.NewDesc("podbus_consumer_ack_pending_messages", "Messages delivered to the consumer and not yet acknowledged.", []string{"consumer"}, nil)
	redeliveredDesc = prometheus.NewDesc("podbus_consumer_redelivered_messages", "Messages delivered to the consumer more than once and not yet acknowledged.", []string{"consumer"}, nil)
)

// scrapeTimeout bounds the time a scrape waits for all the consumers' states.
const scrapeTimeout = 2 * time.Second

// RegisterConsumer reports the consumer's state under name until the returned func is called. Replicas
// of one consumer in one process share it.
func RegisterConsumer(name string, info ConsumerInfo) (unregister func()) {
	consumers.mu.Lock()
	defer consumers.mu.Unlock()
	e := consumers.byID[name]
	if e == nil {
		e = &consumerEntry{}
		consumers.byID[name] = e
	}
	e.info = info
	e.refs++
	var once sync.Once
	return func() {
		once.Do(func() {
			consumers.mu.Lock()
			defer consumers.mu.Unlock()
			if e.refs--; e.refs == 0 {
				delete(consumers.byID, name)
			}
		})
	}
}

func (*consumerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- ackPendingDesc
	ch <- redeliveredDesc
}

func (c *consumerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	names := make([]string, 0, len(c.byID))
	infos := make(map[string]ConsumerInfo, len(c.byID))
	for n, e := range c.byID {
		names = append(names, n)
		infos[n] = e.info
	}
	c.mu.Unlock()
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	type result struct {
		name string
		st   ConsumerState
		err  error
	}
	results := make([]result, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := infos[n](ctx)
			results[i] = result{n, st, err}
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.err != nil {
			continue // absent rather than wrong: the scrape still answers
		}
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(r.st.Pending), r.name)
		ch <- prometheus.MustNewConstMetric(ackPendingDesc, prometheus.GaugeValue, float64(r.st.AckPending), r.name)
		ch <- prometheus.MustNewConstMetric(redeliveredDesc, prometheus.GaugeValue, float64(r.st.Redelivered), r.name)
	}
}
