package webview

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestStageOf(t *testing.T) {
	cond := func(typ, status string) *pb.PodCondition { return &pb.PodCondition{Type: typ, Status: status} }
	tests := []struct {
		name string
		pod  *pb.Pod
		want Stage
	}{
		{"new", &pb.Pod{}, Admitted},
		{"unschedulable", &pb.Pod{Status: &pb.PodStatus{Conditions: []*pb.PodCondition{cond(podutil.PodScheduled, podutil.False)}}}, Admitted},
		{"scheduled", &pb.Pod{Status: &pb.PodStatus{Conditions: []*pb.PodCondition{cond(podutil.PodScheduled, podutil.True)}}}, Scheduled},
		{"bound", &pb.Pod{Spec: &pb.PodSpec{NodeName: "n1"}, Status: &pb.PodStatus{Phase: "Pending"}}, Bound},
		{"running", &pb.Pod{Spec: &pb.PodSpec{NodeName: "n1"}, Status: &pb.PodStatus{Phase: "Running"}}, Running},
		{"succeeded", &pb.Pod{Spec: &pb.PodSpec{NodeName: "n1"}, Status: &pb.PodStatus{Phase: "Succeeded"}}, Running},
		{"ready", &pb.Pod{Spec: &pb.PodSpec{NodeName: "n1"}, Status: &pb.PodStatus{Phase: "Running",
			Conditions: []*pb.PodCondition{cond(podutil.PodReady, podutil.True)}}}, Ready},
	}
	for _, tt := range tests {
		if got := stageOf(tt.pod); got != tt.want {
			t.Errorf("%s: stage %s, want %s", tt.name, got, tt.want)
		}
	}
}

// sseEvent is one server-sent event.
type sseEvent struct{ name, data string }

// readStream opens url and sends its events to the returned channel until ctx ends.
func readStream(t *testing.T, ctx context.Context, url string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					ev.data = strings.Join(data, "\n")
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev, data = sseEvent{}, nil
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			}
		}
	}()
	return out
}

// waitEvent returns the first event named name for which ok holds.
func waitEvent(t *testing.T, events <-chan sseEvent, name string, ok func(data string) bool) string {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.name == name && ok(ev.data) {
				return ev.data
			}
		case <-deadline:
			t.Fatalf("no %q event as expected within 20s", name)
		}
	}
}

// stageCount reads a stage's count from the pipeline fragment.
func stageCount(html, stage string) string {
	m := regexp.MustCompile(`id="stage-` + stage + `"[^>]*>\s*<div class="name">[^<]*</div>\s*<div class="count">(\d+)</div>`).FindStringSubmatch(html)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestStreamFollowsPodChanges(t *testing.T) {
	_, c := bustest.Start(t)
	// t.Context ends before the cleanups run, so the streams are over when the server closes.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	v := New(c.JS, Config{})
	runDone := make(chan error, 1)
	go func() { runDone <- v.Run(ctx) }()
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)

	pods, err := c.JS.KeyValue(ctx, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := c.JS.KeyValue(ctx, bus.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	put := func(kv interface {
		Put(context.Context, string, []byte) (uint64, error)
	}, key string, m proto.Message) {
		t.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	put(nodes, bus.NodeKey("n1"), &pb.Node{Metadata: &pb.ObjectMeta{Name: "n1"}, Status: &pb.NodeStatus{
		Conditions: []*pb.NodeCondition{{Type: podutil.NodeReady, Status: podutil.True}}}})

	all := readStream(t, ctx, srv.URL+Prefix+"stream")
	one := readStream(t, ctx, srv.URL+Prefix+"stream?pod=default/web")
	waitEvent(t, one, "pod", func(d string) bool { return d == "unknown" })

	pod := &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web", Uid: "u1", CreationTimestamp: timestamppb.Now()}}
	put(pods, bus.PodKey("default", "web"), pod)
	waitEvent(t, all, "pipeline", func(d string) bool { return stageCount(d, "admitted") == "1" })
	waitEvent(t, one, "pod", func(d string) bool { return d == "admitted" })

	pod.Status = &pb.PodStatus{Conditions: []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.False,
		Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient cpu."}}}
	put(pods, bus.PodKey("default", "web"), pod)
	waitEvent(t, all, "unschedulable", func(d string) bool { return strings.Contains(d, "1 Insufficient cpu") })

	pod.Spec = &pb.PodSpec{NodeName: "n1"}
	pod.Status = &pb.PodStatus{Phase: "Running", Conditions: []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.True},
		{Type: podutil.PodReady, Status: podutil.True}}}
	put(pods, bus.PodKey("default", "web"), pod)
	html := waitEvent(t, all, "pipeline", func(d string) bool { return stageCount(d, "ready") == "1" })
	if got := stageCount(html, "admitted"); got != "0" {
		t.Errorf("admitted count %q after the pod is ready, want 0", got)
	}
	if !strings.Contains(html, `<span class="reached">1</span>`) {
		t.Errorf("no stage reached by 1 pod in\n%s", html)
	}
	waitEvent(t, all, "nodes", func(d string) bool {
		return strings.Contains(d, `data-node="n1"`) && strings.Contains(d, `href="/ui/pods/default/web"`)
	})
	waitEvent(t, one, "pod", func(d string) bool { return d == "ready" })

	if err := pods.Delete(ctx, bus.PodKey("default", "web")); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, all, "pipeline", func(d string) bool { return stageCount(d, "ready") == "0" })
	waitEvent(t, one, "pod", func(d string) bool { return d == "unknown" })

	cancel()
	select {
	case err := <-runDone:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Run did not return after its context ended")
	}
}

func TestPages(t *testing.T) {
	_, c := bustest.Start(t)
	// t.Context ends before the cleanups run, so the streams are over when the server closes.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	v := New(c.JS, Config{})
	go func() { _ = v.Run(ctx) }()
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)
	for _, tt := range []struct {
		path, want string
		code       int
	}{
		{Prefix, `sse-connect="/ui/stream"`, 200},
		{Prefix + "assets/vendor/htmx.min.js", "htmx", 200},
		{Prefix + "assets/app.css", ".gantt", 200},
		{Prefix + "pods/default/web", `hx-get="/ui/pods/default/web/timeline"`, 200},
		{Prefix + "pods/default/web/timeline", "is not in the audit log", 200},
		{Prefix + "nothing", "", 404},
	} {
		resp, err := http.Get(srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		if resp.StatusCode != tt.code || !strings.Contains(b.String(), tt.want) {
			t.Errorf("GET %s: %d, want %d with %q; body:\n%.400s", tt.path, resp.StatusCode, tt.code, tt.want, b.String())
		}
	}
}

// A pod's timeline fragment is read from the audit log: a pod the store holds as Ready whose log lacks
// the later steps gets a bar for what the log has, and asks again a bounded number of times.
func TestTimelineFromAuditLog(t *testing.T) {
	_, c := bustest.Start(t)
	// t.Context ends before the cleanups run, so the streams are over when the server closes.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	v := New(c.JS, Config{})
	go func() { _ = v.Run(ctx) }()
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)

	pods, err := c.JS.KeyValue(ctx, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	pod := &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "default", Name: "web", Uid: "u1", CreationTimestamp: timestamppb.Now()},
		Spec: &pb.PodSpec{NodeName: "n1"}, Status: &pb.PodStatus{Phase: "Running",
			Conditions: []*pb.PodCondition{{Type: podutil.PodReady, Status: podutil.True}}}}
	b, _ := proto.Marshal(pod)
	if _, err := pods.Put(ctx, bus.PodKey("default", "web"), b); err != nil {
		t.Fatal(err)
	}
	all := readStream(t, ctx, srv.URL+Prefix+"stream")
	waitEvent(t, all, "pipeline", func(d string) bool { return stageCount(d, "ready") == "1" })

	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return b.String()
	}
	var html string
	bustest.Eventually(t, 20*time.Second, func() bool {
		html = get(Prefix + "pods/default/web/timeline")
		return strings.Contains(html, `class="gantt`)
	}, "a timeline from the audit log")
	if !regexp.MustCompile(`<div class="row ok" data-stage="admitted">`).MatchString(html) {
		t.Errorf("no admitted bar:\n%s", html)
	}
	if strings.Contains(html, `class="row ok" data-stage="ready"`) {
		t.Errorf("a ready bar without the steps before it:\n%s", html)
	}
	if !strings.Contains(html, `hx-get="/ui/pods/default/web/timeline?try=1"`) {
		t.Errorf("an incomplete timeline of a ready pod does not ask again:\n%s", html)
	}
	if html := get(Prefix + "pods/default/web/timeline?try=10"); strings.Contains(html, "?try=11") {
		t.Errorf("the tenth try asks again:\n%s", html)
	}
}
