package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestChunk(t *testing.T) {
	node := func(name string, pods int) Node { return Node{Name: name, Pods: make([]Pod, pods)} }
	tests := []struct {
		name  string
		nodes []Node
		max   int
		want  [][]string
	}{
		{"none", nil, 10, nil},
		{"fits", []Node{node("a", 3), node("b", 3)}, 10, [][]string{{"a", "b"}}},
		{"splits", []Node{node("a", 6), node("b", 6), node("c", 4)}, 10, [][]string{{"a"}, {"b", "c"}}},
		{"a node larger than max alone", []Node{node("a", 1), node("b", 30), node("c", 0)}, 10, [][]string{{"a"}, {"b"}, {"c"}}},
		{"empty nodes pack", []Node{node("a", 0), node("b", 0)}, 1, [][]string{{"a", "b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [][]string
			for _, r := range Chunk(tt.nodes, tt.max) {
				var names []string
				for _, n := range r.Nodes {
					names = append(names, n.Name)
				}
				got = append(got, names)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	r := &Report{Nodes: []Node{{Name: "n1", Time: time.Unix(1700000000, 0).UTC(), WindowMillis: 15000, CPUNanoCores: 7, MemoryBytes: 9,
		Pods: []Pod{{Namespace: "ns", Name: "p", UID: "u", Containers: []Container{{Name: "c", CPUNanoCores: 1, MemoryBytes: 2}}}}}}}
	data, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got.Nodes[0].Window() != 15*time.Second {
		t.Errorf("window %v", got.Nodes[0].Window())
	}
	old, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(old); err != nil || cmp.Diff(r, got) != "" {
		t.Errorf("a JSON report of an earlier agent: %v, (-want +got):\n%s", err, cmp.Diff(r, got))
	}
	for _, bad := range []string{`nope`, `{"nodes":[{"cpu":1}]}`, "\x0a\x02\x20\x01"} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%s) = %v, want ErrMalformed", bad, err)
		}
	}
}

// poolChunk is a pool's report of maxPods pods, as the simulated agents send every UsageInterval.
func poolChunk() *Report {
	at := time.Unix(1700000000, 0).UTC()
	r := &Report{}
	for n := range 20 {
		node := Node{Name: fmt.Sprintf("node-%04d", n), Time: at, WindowMillis: 15000, CPUNanoCores: 1e9, MemoryBytes: 1 << 30}
		for p := range 100 {
			node.Pods = append(node.Pods, Pod{Namespace: "default", Name: fmt.Sprintf("pod-%04d-%03d", n, p),
				UID: "6f1c2e8a-3b5d-4c7e-9f0a-1b2c3d4e5f60", Containers: []Container{{Name: "app", CPUNanoCores: 1e7, MemoryBytes: 16 << 20}}})
		}
		r.Nodes = append(r.Nodes, node)
	}
	return r
}

// The agent side of a chunk: Encode against building the generated message and marshalling it.
func BenchmarkEncode(b *testing.B) {
	r := poolChunk()
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Encode(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("message", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(reference(r)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The API server decodes one chunk per message. The json case is the format before protobuf.
func BenchmarkDecode(b *testing.B) {
	r := poolChunk()
	pbData, err := Encode(r)
	if err != nil {
		b.Fatal(err)
	}
	jsonData, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
	}{{"protobuf", pbData}, {"json", jsonData}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if _, err := Decode(c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Decode reads what the generated protobuf code reads, Walk what Decode reads, and what it decodes
// encodes back to itself.
func FuzzDecode(f *testing.F) {
	r := &Report{Nodes: []Node{{Name: "n1", Time: time.Unix(1700000000, 5).UTC(), WindowMillis: 15000, CPUNanoCores: 7,
		Pods: []Pod{{Namespace: "ns", Name: "p", UID: "u", Containers: []Container{{Name: "c", CPUNanoCores: 1, MemoryBytes: 2}}}}}}}
	data, err := Encode(r)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("\x0a\x02\x20\x01"))
	f.Add([]byte("\x0a\x04\x0a\x02\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		walked, _, werr := walkReport(data, "")
		if (err == nil) != (werr == nil) {
			t.Fatalf("Decode: %v, Walk: %v", err, werr)
		}
		if err == nil && cmp.Diff(got, walked, cmpopts.EquateEmpty()) != "" {
			t.Fatalf("Walk reads otherwise (-Decode +Walk):\n%s", cmp.Diff(got, walked, cmpopts.EquateEmpty()))
		}
		if len(data) > 0 && data[0] == '{' {
			return
		}
		var m pb.UsageReport
		perr := proto.Unmarshal(data, &m)
		if perr != nil {
			if err == nil {
				t.Fatalf("Decode accepted what protobuf refuses (%v)", perr)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if len(got.Nodes) != len(m.GetNodes()) {
			t.Fatalf("%d nodes, protobuf reads %d", len(got.Nodes), len(m.GetNodes()))
		}
		again, err := Encode(got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(again)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(got, back, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("round trip (-first +second):\n%s", d)
		}
	})
}

// Encode writes the bytes proto.Marshal makes of the same UsageReport, zero fields left out, and
// refuses what it refuses.
func TestEncodeAsMarshal(t *testing.T) {
	full := Node{Name: "n1", Time: time.Unix(1700000000, 5).UTC(), WindowMillis: 15000, CPUNanoCores: 1 << 40, MemoryBytes: 9,
		Pods: []Pod{
			{Namespace: "ns", Name: "p", UID: "u", Containers: []Container{{Name: "c", CPUNanoCores: 1, MemoryBytes: 2}, {Name: "d"}}},
			{Namespace: "ns", Name: "q"},
		}}
	tests := []struct {
		name string
		r    *Report
	}{
		{"empty", &Report{}},
		{"zero node", &Report{Nodes: []Node{{}}}},
		{"full", &Report{Nodes: []Node{full, {Name: "n2", Time: time.Unix(-5, 0)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Encode(tt.r)
			if err != nil {
				t.Fatal(err)
			}
			want, err := proto.Marshal(reference(tt.r))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("Encode = %x\nproto.Marshal = %x", got, want)
			}
		})
	}
	bad := &Report{Nodes: []Node{{Name: "n", Pods: []Pod{{Name: "\xff"}}}}}
	if _, err := Encode(bad); err == nil {
		t.Error("Encode accepted a name that is not UTF-8")
	}
}

// reference is r as the generated message.
func reference(r *Report) *pb.UsageReport {
	m := &pb.UsageReport{}
	for _, n := range r.Nodes {
		nu := &pb.NodeUsage{Name: n.Name, WindowMs: n.WindowMillis, CpuNanoCores: n.CPUNanoCores, MemoryBytes: n.MemoryBytes}
		if !n.Time.IsZero() {
			nu.TimeUnixNano = n.Time.UnixNano()
		}
		for _, p := range n.Pods {
			pu := &pb.PodUsage{Namespace: p.Namespace, Name: p.Name, Uid: p.UID}
			for _, c := range p.Containers {
				pu.Containers = append(pu.Containers, &pb.ContainerUsage{Name: c.Name, CpuNanoCores: c.CPUNanoCores, MemoryBytes: c.MemoryBytes})
			}
			nu.Pods = append(nu.Pods, pu)
		}
		m.Nodes = append(m.Nodes, nu)
	}
	return m
}
