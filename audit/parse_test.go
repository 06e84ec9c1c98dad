package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"", time.Time{}, false},
		{"2026-11-30T14:00:00Z", now.Add(-time.Hour), false},
		{"2026-11-30T14:00:00.5+01:00", time.Date(2026, 11, 30, 13, 0, 0, 5e8, time.UTC), false},
		{"15m", now.Add(-15 * time.Minute), false},
		{"2h ago", now.Add(-2 * time.Hour), false},
		{"-5m", time.Time{}, true},
		{"yesterday", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := ParseTime(tt.in, now)
		if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParsePodRef(t *testing.T) {
	tests := []struct{ in, ns, name string }{
		{"default/web", "default", "web"},
		{"web", "default", "web"},
		{"kube-system/a.b", "kube-system", "a.b"},
		{"/web", "", ""},
		{"a/b/c", "", ""},
	}
	for _, tt := range tests {
		ns, name, err := ParsePodRef(tt.in)
		if ns != tt.ns || name != tt.name || (err != nil) != (tt.ns == "") {
			t.Errorf("ParsePodRef(%q) = %q %q %v", tt.in, ns, name, err)
		}
	}
}

func TestNewMessage(t *testing.T) {
	tests := map[string]string{
		"pod.cmd.create":       "PodCommand",
		"pod.pending":          "PendingPod",
		"pod.scheduled":        "SchedulingDecision",
		"pod.bound.n1":         "PodBinding",
		"pod.terminate.n1":     "PodTermination",
		"pod.deleted":          "PodDeleted",
		"status.pod.n1":        "PodStatusReport",
		"node.heartbeat.n1":    "NodeHeartbeat",
		"event.default.web":    "Event",
		"$KV.pods.default.web": "Pod",
		"$KV.nodes.n1":         "Node",
		"$KV.alloc.n1.m":       "NodeAllocation",
		"$KV.alloc.n1.p.u1":    "PodAllocation",
		"dead.pod.scheduled":   "",
		"something.else":       "",
	}
	for subj, want := range tests {
		got := ""
		if m := NewMessage(subj); m != nil {
			got = string(m.ProtoReflect().Descriptor().Name())
		}
		if got != want {
			t.Errorf("NewMessage(%q) = %q, want %q", subj, got, want)
		}
	}
}

func TestAppendJSON(t *testing.T) {
	data, _ := proto.Marshal(&pb.SchedulingDecision{Uid: "u1", Node: "n2", Score: 87})
	r := &Record{Seq: 7, Time: time.Date(2026, 11, 30, 15, 4, 5, 120e6, time.UTC), Subject: bus.SubjPodScheduled,
		Header: nats.Header{bus.HdrActor: {"scheduler/sched-b"}, bus.HdrPodUID: {"u1"}, "Nats-Stream-Source": {"PODS 41 > > pod.scheduled"}},
		Data:   data}
	got, err := AppendJSON(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`{"seq":7,"time":"2026-11-30T15:04:05.12Z","subject":"pod.scheduled","stream":"PODS","stream_seq":41`,
		`"actor":"scheduler/sched-b"`, `"uid":"u1"`, `"data":{`, `"node":"n2"`, "}\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("JSON %s lacks %s", got, want)
		}
	}
	del := &Record{Seq: 8, Subject: "$KV.pods.default.web", Header: nats.Header{bus.HdrKVOperation: {"DEL"}}}
	got, _ = AppendJSON(nil, del)
	if !strings.Contains(string(got), `"op":"DEL"`) || strings.Contains(string(got), `"data"`) {
		t.Errorf("delete record: %s", got)
	}
	if s := string(appendString(nil, "a\"b\\c\n\x01é")); s != `"a\"b\\c\n\u0001é"` {
		t.Errorf("appendString = %s", s)
	}
}

func TestMergeWindows(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	got := mergeWindows([][2]time.Time{{at(10), at(12)}, {at(0), at(2)}, {at(1), at(4)}, {at(12), at(13)}})
	want := [][2]time.Time{{at(0), at(4)}, {at(10), at(13)}}
	if len(got) != len(want) || !got[0][1].Equal(want[0][1]) || !got[1][0].Equal(want[1][0]) || !got[1][1].Equal(want[1][1]) {
		t.Errorf("mergeWindows = %v, want %v", got, want)
	}
}

func TestPhases(t *testing.T) {
	t0 := time.Unix(0, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	in := Incarnation{Steps: []Step{
		{Time: ms(0), Kind: "admitted"}, {Time: ms(1), Kind: "stored"}, {Time: ms(2), Kind: "queued"},
		{Time: ms(4), Kind: "scheduled"}, {Time: ms(5), Kind: "bound"}, {Time: ms(100), Kind: "running"},
		{Time: ms(283), Kind: "ready"}, {Time: ms(900), Kind: "deleted"},
	}}
	if got, want := PhasesOf(in).String(), "total 283 ms: admission 1 ms, scheduling 3 ms, binding 1 ms, node 278 ms"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// AUDIT copies its sources at different moments: an admission copied 30 ms after the pod's records
// comes first in causal order with the latest time. The total spans from the earliest step.
func TestPhasesOfACopyLate(t *testing.T) {
	t0 := time.Unix(0, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	in := Incarnation{Steps: []Step{
		{Time: ms(30), Kind: "admitted"}, {Time: ms(0), Kind: "stored"}, {Time: ms(30), Kind: "queued"},
		{Time: ms(30), Kind: "scheduled"}, {Time: ms(4), Kind: "bound"}, {Time: ms(6), Kind: "ready"},
	}}
	if got := PhasesOf(in).Total; got != 6*time.Millisecond {
		t.Errorf("total %v, want 6ms (stored to ready)", got)
	}
}

func TestCausalOrder(t *testing.T) {
	steps := []Step{{Kind: "stored"}, {Kind: "admitted"}, {Kind: "event"}, {Kind: "queued"}, {Kind: "scheduled"},
		{Kind: "handed"}, {Kind: "bound"}, {Kind: "queued"}, {Kind: "ready"}}
	causalOrder(steps)
	var got []string
	for _, s := range steps {
		got = append(got, s.Kind)
	}
	if want := "admitted stored event queued scheduled bound handed queued ready"; strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}
