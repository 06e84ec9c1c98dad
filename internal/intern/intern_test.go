package intern

import (
	"maps"
	"reflect"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// same reports whether two maps are one and the same.
func same(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestLabels(t *testing.T) {
	tests := []struct {
		name  string
		a, b  map[string]string
		share bool
	}{
		{"equal", map[string]string{"app": "web", "tier": "fe"}, map[string]string{"tier": "fe", "app": "web"}, true},
		{"value differs", map[string]string{"app": "web"}, map[string]string{"app": "api"}, false},
		{"key differs", map[string]string{"app": "web"}, map[string]string{"name": "web"}, false},
		// Keys and values are delimited, not concatenated.
		{"split differs", map[string]string{"a": "bc"}, map[string]string{"ab": "c"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := Labels(maps.Clone(tc.a)), Labels(maps.Clone(tc.b))
			if !maps.Equal(a, tc.a) || !maps.Equal(b, tc.b) {
				t.Fatalf("got %v %v, want %v %v", a, b, tc.a, tc.b)
			}
			if same(a, b) != tc.share {
				t.Errorf("shared = %v, want %v", same(a, b), tc.share)
			}
		})
	}
	if got := Labels(nil); got != nil {
		t.Errorf("Labels(nil) = %v", got)
	}
}

// TestLabelsKeyNotReused: the scratch key of a later call does not overwrite a stored one, and a hit
// allocates nothing.
func TestLabelsKeyNotReused(t *testing.T) {
	first := Labels(map[string]string{"scratch": "one", "z": "1"})
	Labels(map[string]string{"scratch": "two", "z": "2"}) // same length: would overwrite an aliased key
	again := map[string]string{"z": "1", "scratch": "one"}
	if got := Labels(again); !same(got, first) {
		t.Fatalf("Labels(%v) = %v, not the map stored first", again, got)
	}
	if n := testing.AllocsPerRun(100, func() { Labels(again) }); n != 0 {
		t.Errorf("a hit allocates %v times, want 0", n)
	}
}

func TestResources(t *testing.T) {
	r := func() *pb.Resources { return &pb.Resources{MilliCpu: 100, Memory: 64 << 20, Pods: 1} }
	if a, b := Resources(r()), Resources(r()); a != b || !proto.Equal(a, r()) {
		t.Errorf("equal requests not shared: %v %v", a, b)
	}
	if a, b := Resources(r()), Resources(&pb.Resources{MilliCpu: 200, Memory: 64 << 20, Pods: 1}); a == b {
		t.Error("different requests shared")
	}
	gpu := func() *pb.Resources {
		return &pb.Resources{MilliCpu: 100, Scalar: map[string]int64{"example.com/gpu": 1}}
	}
	if g := gpu(); Resources(g) != g {
		t.Error("requests with extended resources interned")
	}
	if Resources(nil) != nil {
		t.Error("Resources(nil) != nil")
	}
}

// A cache that changes an interned entry clones it first: the clone must not share what it changes.
func TestPodAllocationCloneIsDeep(t *testing.T) {
	pa := func() *pb.PodAllocation {
		return &pb.PodAllocation{Namespace: "default", Name: "web-1", SchedulerName: "default-scheduler",
			Labels: map[string]string{"app": "web"}, Requests: &pb.Resources{MilliCpu: 100}}
	}
	a, b := pa(), pa()
	PodAllocation(a)
	PodAllocation(b)
	if !same(a.Labels, b.Labels) || a.Requests != b.Requests {
		t.Fatal("equal allocations share nothing")
	}
	if !proto.Equal(a, pa()) {
		t.Fatalf("interning changed the allocation: %v", a)
	}
	c := proto.Clone(a).(*pb.PodAllocation)
	c.Labels["app"] = "changed"
	c.Requests.MilliCpu = 1
	c.PreemptedBy = "other"
	if !proto.Equal(b, pa()) {
		t.Errorf("changing a clone changed the shared values: %v", b)
	}
	PodAllocation(nil)
}

func BenchmarkLabelsHit(b *testing.B) {
	m := map[string]string{"app": "web", "tier": "frontend", "pod-template-hash": "5d8f7c9b6"}
	Labels(m)
	b.ReportAllocs()
	for b.Loop() {
		Labels(m)
	}
}

// Bytes gives the string String gives, the very same one, and allocates nothing when it is shared.
func TestBytes(t *testing.T) {
	b := []byte("bytes-test-value")
	s := Bytes(b)
	if s != string(b) || Bytes(nil) != "" {
		t.Fatalf("Bytes(%q) = %q", b, s)
	}
	if u := String(string(b)); unsafe.StringData(u) != unsafe.StringData(s) {
		t.Error("String and Bytes give different copies")
	}
	b[0] = 'B' // the shared string is not b's memory
	if s != "bytes-test-value" {
		t.Errorf("the shared string changed with its bytes: %q", s)
	}
	b[0] = 'b'
	if n := testing.AllocsPerRun(100, func() { _ = Bytes(b) }); n != 0 {
		t.Errorf("%v allocations for a shared string", n)
	}
}
