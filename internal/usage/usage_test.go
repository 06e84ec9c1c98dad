package usage

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	for _, bad := range []string{`nope`, `{"nodes":[{"cpu":1}]}`} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%s) = %v, want ErrMalformed", bad, err)
		}
	}
}
