package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/events"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func listRV(t *testing.T, e *env, path string) string {
	t.Helper()
	_, data := e.do("GET", path, "")
	var l struct {
		Metadata struct{ ResourceVersion string }
	}
	_ = json.Unmarshal(data, &l)
	if l.Metadata.ResourceVersion == "" {
		t.Fatalf("no resourceVersion in %s", data)
	}
	return l.Metadata.ResourceVersion
}

func TestWatchPods(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("old")
	rv := listRV(t, e, "/api/v1/namespaces/default/pods")

	type event struct{ typ, name string }
	tests := []struct {
		name    string
		path    string
		headers []string
		want    []event
	}{
		{name: "from list rv", path: "/api/v1/namespaces/default/pods?watch=true&resourceVersion=" + rv,
			want: []event{{"ADDED", "new"}, {"MODIFIED", "new"}, {"ADDED", "other"}, {"DELETED", "new"}}},
		{name: "rv 0 starts with current", path: "/api/v1/watch/namespaces/default/pods?resourceVersion=0",
			want: []event{{"ADDED", "old"}, {"ADDED", "new"}, {"MODIFIED", "new"}, {"ADDED", "other"}, {"DELETED", "new"}}},
		{name: "field selector", path: "/api/v1/namespaces/default/pods?watch=1&fieldSelector=metadata.name%3Dnew&resourceVersion=" + rv,
			want: []event{{"ADDED", "new"}, {"MODIFIED", "new"}, {"DELETED", "new"}}},
		{name: "all namespaces", path: "/api/v1/pods?watch=true&labelSelector=app%3Dweb&resourceVersion=" + rv,
			want: []event{{"ADDED", "new"}, {"MODIFIED", "new"}, {"ADDED", "other"}, {"DELETED", "new"}}},
		{name: "table", path: "/api/v1/namespaces/default/pods?watch=true&resourceVersion=" + rv, headers: []string{tableAccept},
			want: []event{{"ADDED", "new"}, {"MODIFIED", "new"}, {"ADDED", "other"}, {"DELETED", "new"}}},
	}
	nexts := make([]func() (string, map[string]any), len(tests))
	for i, tt := range tests {
		nexts[i], _ = e.watchStream(tt.path, tt.headers...)
	}
	e.mustCreate("new")
	e.setPod("default", "new", func(p *pb.Pod) { p.Status.Phase = "Running" })
	e.mustCreate("other")
	if resp, data := e.do("DELETE", "/api/v1/namespaces/default/pods/new", ""); resp.StatusCode != 200 {
		t.Fatalf("delete: %d %s", resp.StatusCode, data)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for j, w := range tt.want {
				typ, obj := nexts[i]()
				name, _ := get(obj, "metadata", "name").(string)
				if tt.headers != nil {
					if get(obj, "kind") != "Table" {
						t.Fatalf("event object is not a Table: %v", obj)
					}
					cols, _ := get(obj, "columnDefinitions").([]any)
					if (j == 0) != (len(cols) > 0) {
						t.Errorf("event %d has %d column definitions", j, len(cols))
					}
					name, _ = get(obj, "rows", 0, "cells", 0).(string)
				}
				if typ != w.typ || name != w.name {
					t.Fatalf("event %d = %s %s, want %s %s", j, typ, name, w.typ, w.name)
				}
				if tt.headers == nil && get(obj, "metadata", "resourceVersion") == "" {
					t.Errorf("event without resourceVersion: %v", obj)
				}
			}
		})
	}
}

func TestWatchTimeout(t *testing.T) {
	e := start(t, nil, false)
	next, _ := e.watchStream("/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1")
	if typ, _ := next(); typ != "" {
		t.Fatalf("got event %s, want the stream to end", typ)
	}
	// A resourceVersion from the future is refused before the stream starts.
	resp, data := e.do("GET", "/api/v1/namespaces/default/pods?watch=true&resourceVersion=99999", "")
	if resp.StatusCode != 504 {
		t.Errorf("future rv: %d %s", resp.StatusCode, data)
	}
}

func TestNodes(t *testing.T) {
	e := start(t, nil, true)
	b, err := bus.OpenBuckets(context.Background(), e.conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, ready string, unschedulable bool) {
		n := &pb.Node{Metadata: &pb.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
			Spec:   &pb.NodeSpec{Unschedulable: unschedulable},
			Status: &pb.NodeStatus{Conditions: []*pb.NodeCondition{{Type: "Ready", Status: ready}}, NodeInfo: &pb.NodeSystemInfo{KubeletVersion: "v1.32.0"}}}
		if _, err := b.Nodes.Put(context.Background(), bus.NodeKey(name), mustMarshal(t, n)); err != nil {
			t.Fatal(err)
		}
	}
	put("n1", "True", false)
	put("n2", "False", false)
	next, _ := e.watchStream("/api/v1/watch/nodes?fieldSelector=metadata.name%3Dn3&resourceVersion=" + listRV(t, e, "/api/v1/nodes"))
	put("n3", "True", true)
	if typ, obj := next(); typ != "ADDED" || get(obj, "metadata", "name") != "n3" {
		t.Errorf("watch: %s %v", typ, obj)
	}
	_, data := e.do("GET", "/api/v1/nodes", "", tableAccept)
	var tbl metav1.Table
	_ = json.Unmarshal(data, &tbl)
	var got []string
	for _, r := range tbl.Rows {
		got = append(got, r.Cells[0].(string)+" "+r.Cells[1].(string)+" "+r.Cells[2].(string)+" "+r.Cells[4].(string))
	}
	want := "n1 Ready control-plane v1.32.0|n2 NotReady control-plane v1.32.0|n3 Ready,SchedulingDisabled control-plane v1.32.0"
	if strings.Join(got, "|") != want {
		t.Errorf("rows = %q\nwant   %q", strings.Join(got, "|"), want)
	}
	if resp, _ := e.do("GET", "/api/v1/nodes/n2", ""); resp.StatusCode != 200 {
		t.Errorf("GET node = %d", resp.StatusCode)
	}
	if resp, _ := e.do("GET", "/api/v1/nodes/n9", ""); resp.StatusCode != 404 {
		t.Errorf("GET missing node = %d", resp.StatusCode)
	}
}

func TestEvents(t *testing.T) {
	e := start(t, nil, true)
	rec := events.NewRecorder(bus.NewPublisher(e.conn.JS, "test"), "kubelet", "n1")
	record := func(ns, name, reason string) {
		f, err := rec.Event(&pb.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, Uid: "uid-" + name}, "Normal", reason, reason+" "+name, "", time.Now())
		if err == nil {
			err = bus.Wait(context.Background(), f)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	record("default", "a", "Pulled")
	record("default", "b", "Pulled")
	record("kube-system", "c", "Started")

	names := func(path string) []string {
		t.Helper()
		_, data := e.do("GET", path, "")
		var l struct {
			Kind  string
			Items []struct {
				InvolvedObject struct{ Name string } `json:"involvedObject"`
				Reason         string
			}
		}
		_ = json.Unmarshal(data, &l)
		if l.Kind != "EventList" {
			t.Fatalf("%s: %s", path, data)
		}
		var out []string
		for _, i := range l.Items {
			out = append(out, i.InvolvedObject.Name+"/"+i.Reason)
		}
		return out
	}
	for path, want := range map[string]string{
		"/api/v1/events":                    "a/Pulled b/Pulled c/Started",
		"/api/v1/namespaces/default/events": "a/Pulled b/Pulled",
		"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Db,involvedObject.namespace%3Ddefault,involvedObject.uid%3Duid-b": "b/Pulled",
		"/api/v1/events?fieldSelector=reason%3DStarted":           "c/Started",
		"/api/v1/namespaces/empty/events":                         "",
		"/api/v1/events?fieldSelector=involvedObject.kind%3DNode": "",
	} {
		if got := strings.Join(names(path), " "); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	_, data := e.do("GET", "/api/v1/namespaces/default/events", "", tableAccept)
	if !strings.Contains(string(data), `"Last Seen"`) || !strings.Contains(string(data), `"pod/a"`) {
		t.Errorf("events table: %s", data)
	}

	// Watch from the list's resourceVersion: only later events.
	rv := listRV(t, e, "/api/v1/namespaces/default/events")
	next, _ := e.watchStream("/api/v1/namespaces/default/events?watch=true&resourceVersion=" + rv)
	record("kube-system", "d", "Started")
	record("default", "e", "Killing")
	if typ, obj := next(); typ != "ADDED" || get(obj, "reason") != "Killing" {
		t.Errorf("watch: %s %v", typ, obj)
	}

	// Events older than what the stream holds: 410 Expired.
	stream, err := e.conn.JS.Stream(context.Background(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(context.Background(), jetstream.WithPurgeKeep(1)); err != nil {
		t.Fatal(err)
	}
	next, _ = e.watchStream("/api/v1/namespaces/default/events?watch=true&resourceVersion=1")
	typ, obj := next()
	if typ != "ERROR" || get(obj, "reason") != "Expired" || get(obj, "code") != float64(410) {
		t.Errorf("expired watch: %s %v", typ, obj)
	}
}

// Events recorded at once are stored in their namespace's batches: lists and field selectors read the
// entries that match, each with its own position as resourceVersion, and a watch from the position of an
// entry inside a batch starts with the entry after it.
func TestBatchedEvents(t *testing.T) {
	e := start(t, nil, true)
	rec := events.NewRecorder(bus.NewBatcher(e.conn.JS, "test"), "default-scheduler", "b1")
	var futures []jetstream.PubAckFuture
	for i := range 60 {
		ns := []string{"default", "other"}[i%2]
		f, err := rec.Event(&pb.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("p%02d", i), Uid: fmt.Sprint("uid-", i)},
			"Normal", "Scheduled", fmt.Sprint(i), "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := bus.Wait(context.Background(), futures...); err != nil {
		t.Fatal(err)
	}
	stream, err := e.conn.JS.Stream(context.Background(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter("event.default"))
	if err != nil || info.State.Msgs == 0 {
		t.Fatalf("no batch of default's events was stored (%v)", err)
	}

	type item struct {
		Metadata       struct{ ResourceVersion string }
		InvolvedObject struct{ Name string } `json:"involvedObject"`
	}
	list := func(path string) []item {
		t.Helper()
		_, data := e.do("GET", path, "")
		var l struct{ Items []item }
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatalf("%s: %s", path, data)
		}
		return l.Items
	}
	items := list("/api/v1/namespaces/default/events")
	if len(items) != 30 {
		t.Fatalf("%d events listed in default, want 30", len(items))
	}
	var last uint64
	for i, it := range items {
		rv, err := strconv.ParseUint(it.Metadata.ResourceVersion, 10, 64)
		if want := fmt.Sprintf("p%02d", 2*i); err != nil || rv <= last || it.InvolvedObject.Name != want {
			t.Fatalf("item %d: %s at %q after %d; want %s at a later position", i, it.InvolvedObject.Name, it.Metadata.ResourceVersion, last, want)
		}
		last = rv
	}
	if got := list("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp14"); len(got) != 1 || got[0].InvolvedObject.Name != "p14" {
		t.Errorf("field selector on p14 listed %v", got)
	}
	if got := list("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp15"); len(got) != 0 {
		t.Errorf("p15 is in namespace other, yet default listed %v", got)
	}
	// Inside a batch: the next entry of the same stored message comes first.
	k := -1
	for i := 0; i+1 < len(items); i++ {
		a, _ := strconv.ParseUint(items[i].Metadata.ResourceVersion, 10, 64)
		b, _ := strconv.ParseUint(items[i+1].Metadata.ResourceVersion, 10, 64)
		if a>>bus.PositionBits == b>>bus.PositionBits {
			k = i
			break
		}
	}
	if k < 0 {
		t.Fatal("no two listed events share a stored message")
	}
	next, _ := e.watchStream("/api/v1/namespaces/default/events?watch=true&resourceVersion=" + items[k].Metadata.ResourceVersion)
	if typ, obj := next(); typ != "ADDED" || get(obj, "involvedObject", "name") != items[k+1].InvolvedObject.Name {
		t.Errorf("watch from %s (%s) began with %s %v; want %s", items[k].Metadata.ResourceVersion, items[k].InvolvedObject.Name,
			typ, get(obj, "involvedObject", "name"), items[k+1].InvolvedObject.Name)
	}
}

func TestLogs(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("p")
	e.setPod("default", "p", func(p *pb.Pod) { p.Spec.NodeName = "n1" })
	resp, data := e.do("GET", "/api/v1/namespaces/default/pods/p/log", "")
	if st := decodeStatus(t, data); resp.StatusCode != 503 || !strings.Contains(st.Message, `node "n1"`) {
		t.Errorf("no agent: %d %s", resp.StatusCode, data)
	}
	sub, err := e.conn.NC.Subscribe(bus.SubjLogs("n1"), func(m *nats.Msg) {
		var req LogRequest
		_ = json.Unmarshal(m.Data, &req)
		out, _ := json.Marshal(LogResponse{Logs: "hello from " + req.Name + "/" + req.Container + "\n"})
		_ = m.Respond(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = e.conn.NC.Flush()
	resp, data = e.do("GET", "/api/v1/namespaces/default/pods/p/log?tailLines=10", "")
	if resp.StatusCode != 200 || string(data) != "hello from p/c\n" {
		t.Errorf("logs: %d %q", resp.StatusCode, data)
	}
}
