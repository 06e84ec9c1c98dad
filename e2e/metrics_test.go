package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/podbus/podbus/cluster/up"
)

// After 100 pods through the pipeline, each stage histogram on the API's /metrics has counted every
// one of them once, and so have the scheduler's attempts and the API's create requests. The metrics
// are process-wide, so the test counts what its own pods added. The embedded server's monitoring
// endpoint answers too.
func TestMetricsCountEveryStage(t *testing.T) {
	cl, conn := startCluster(t, up.Config{Nodes: 3, StartDelay: 5 * time.Millisecond, NATSMonitor: "127.0.0.1:0"})
	client := apiClient(cl, 30*time.Second)
	stages := []string{"admission", "store", "scheduling", "binding", "node_start", "ready"}
	counts := func() map[string]float64 {
		fams := scrapeMetrics(t, client, cl.APIURL+"/metrics")
		out := map[string]float64{}
		for _, s := range stages {
			out[s] = histogramCount(fams["podbus_pod_stage_duration_seconds"], map[string]string{"stage": s})
		}
		out["attempts"] = counterValue(fams["scheduler_schedule_attempts_total"], map[string]string{"result": "scheduled"})
		out["creates"] = counterValue(fams["apiserver_request_total"], map[string]string{"verb": "POST", "resource": "pods", "code": "201"})
		return out
	}
	before := counts()

	const n = 100
	for i := range n {
		if code, body := post(t, client, cl.APIURL, "default", podJSON("default", fmt.Sprintf("m-%d", i), "10m", "16Mi")); code != http.StatusCreated {
			t.Fatalf("create pod %d: %d %s", i, code, body)
		}
	}
	waitAll(t, conn, n, 60*time.Second, isReady)

	// The status service observes the ready stage right after the write a watcher sees.
	deadline := time.Now().Add(10 * time.Second)
	for {
		after := counts()
		var short []string
		for k, v := range after {
			if d := v - before[k]; d > n {
				t.Fatalf("%s counted %v pods, want %d", k, d, n)
			} else if d < n {
				short = append(short, fmt.Sprintf("%s=%v", k, d))
			}
		}
		if len(short) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d Ready pods, counted only %v", n, short)
		}
		time.Sleep(100 * time.Millisecond)
	}

	fams := scrapeMetrics(t, client, cl.APIURL+"/metrics")
	for _, name := range []string{"podbus_consumer_pending_messages", "podbus_consumer_ack_pending_messages", "go_goroutines", "process_resident_memory_bytes"} {
		if len(fams[name].GetMetric()) == 0 {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if cl.NATSMonitorURL == "" {
		t.Fatal("no NATS monitoring endpoint")
	}
	resp, err := http.Get(cl.NATSMonitorURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("NATS monitor /healthz: %s", resp.Status)
	}
}

func scrapeMetrics(t *testing.T, client *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// matches reports whether m has every label in want.
func matches(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func histogramCount(f *dto.MetricFamily, labels map[string]string) float64 {
	var n float64
	for _, m := range f.GetMetric() {
		if matches(m, labels) {
			n += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

func counterValue(f *dto.MetricFamily, labels map[string]string) float64 {
	var n float64
	for _, m := range f.GetMetric() {
		if matches(m, labels) {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}
