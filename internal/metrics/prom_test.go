package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// /metrics carries the stage histograms, the expvar counters bridged, the consumers' lag as reported
// at scrape time (a consumer that cannot answer is left out, not failing the scrape), the schedulers'
// pending pods summed, and the Go runtime.
func TestHandler(t *testing.T) {
	// Counters are the process's: a second run of the test (-count) starts from the first run's count.
	events := Counter("prom_test.events") + 3
	Count("prom_test.events", 3)
	StageBinding.Observe(20 * time.Millisecond)
	un := RegisterConsumer("prom-test", func(context.Context) (ConsumerState, error) {
		return ConsumerState{Pending: 7, AckPending: 2}, nil
	})
	defer un()
	defer RegisterConsumer("prom-test-down", func(context.Context) (ConsumerState, error) {
		return ConsumerState{}, errors.New("no NATS")
	})()
	defer RegisterPending("unschedulable", func() int { return 2 })()
	defer RegisterPending("unschedulable", func() int { return 3 })()

	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	text := rec.Body.String()
	for _, want := range []string{
		fmt.Sprintf(`podbus_events_total{event="prom_test.events"} %d`, events),
		`podbus_pod_stage_duration_seconds_count{stage="binding"}`,
		`podbus_pod_stage_duration_seconds_count{stage="ready"} 0`,
		`podbus_consumer_pending_messages{consumer="prom-test"} 7`,
		`podbus_consumer_ack_pending_messages{consumer="prom-test"} 2`,
		`scheduler_pending_pods{queue="unschedulable"} 5`,
		"go_goroutines ",
		"process_start_time_seconds ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "prom-test-down") {
		t.Error("a consumer that failed to answer was reported")
	}
}

// Unregistering a consumer twice, or one of two replicas, keeps the other's series.
func TestRegisterConsumerReplicas(t *testing.T) {
	info := func(context.Context) (ConsumerState, error) { return ConsumerState{Pending: 1}, nil }
	a := RegisterConsumer("replicated", info)
	b := RegisterConsumer("replicated", info)
	a()
	a()
	if !strings.Contains(scrape(t), `podbus_consumer_pending_messages{consumer="replicated"} 1`) {
		t.Error("one replica left, series gone")
	}
	b()
	if strings.Contains(scrape(t), `consumer="replicated"`) {
		t.Error("no replica left, series still there")
	}
}

func scrape(t *testing.T) string {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// What the pipeline observes once per pod allocates nothing.
func TestHotPathAllocatesNothing(t *testing.T) {
	start := time.Now()
	a := SchedulingAttemptsFor("default-scheduler")
	for name, f := range map[string]func(){
		"stage":   func() { StageScheduling.Since(start) },
		"attempt": func() { SchedulingAttemptsFor("default-scheduler").Scheduled.Since(start) },
		"cached":  func() { a.Unschedulable.Since(start) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}
