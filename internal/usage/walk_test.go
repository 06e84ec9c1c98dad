package usage

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// rebuild is the decoder's builder, skipping nodes by name and counting EndNode calls.
type rebuild struct {
	builder
	skip string
	ends int
}

func (b *rebuild) Node(n Node) bool { return n.Name != b.skip && b.builder.Node(n) }

func (b *rebuild) EndNode() { b.ends++ }

// walkReport is what Walk gives of data, as a Report.
func walkReport(data []byte, skip string) (*Report, int, error) {
	b := &rebuild{builder: builder{strs: map[string]string{}}, skip: skip}
	err := Walk(data, b)
	return &b.r, b.ends, err
}

func TestWalkAsDecode(t *testing.T) {
	pool := poolChunk()
	pbData, err := Encode(pool)
	if err != nil {
		t.Fatal(err)
	}
	jsonData, err := json.Marshal(pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{{"protobuf", pbData}, {"json", jsonData}} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := Decode(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			got, ends, err := walkReport(tc.data, "")
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("(-Decode +Walk):\n%s", d)
			}
			if ends != len(want.Nodes) {
				t.Errorf("EndNode called %d times for %d nodes", ends, len(want.Nodes))
			}
			skipped, ends, err := walkReport(tc.data, "node-0003")
			if err != nil || len(skipped.Nodes) != len(want.Nodes)-1 || ends != len(want.Nodes)-1 {
				t.Errorf("skipping a node: %d nodes, %d ends, %v", len(skipped.Nodes), ends, err)
			}
		})
	}
}

// A report Decode refuses is refused whole: the walker sees none of it, not even the good nodes
// before the bad one.
func TestWalkRefusesBeforeAnyCall(t *testing.T) {
	good, err := Encode(&Report{Nodes: []Node{{Name: "n1", Pods: []Pod{{Namespace: "ns", Name: "p"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`nope`, `{"nodes":[{"cpu":1}]}`, "\x0a\x02\x20\x01", "\x0a\x04\x0a\x02\xff\xfe",
		string(good) + "\x0a\x02\x20\x01", string(good) + "\x0a\x06\x0a\x01x\x32\x01\x0a"} {
		got, ends, err := walkReport([]byte(bad), "")
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("Walk(%q) = %v, want ErrMalformed", bad, err)
		}
		if len(got.Nodes) != 0 || ends != 0 {
			t.Errorf("Walk(%q) called the walker: %d nodes, %d ends", bad, len(got.Nodes), ends)
		}
		if _, derr := Decode([]byte(bad)); derr == nil {
			t.Errorf("Decode(%q) accepts what Walk refuses", bad)
		}
	}
}

type nopWalker struct{}

func (nopWalker) Node(Node) bool { return true }
func (nopWalker) Pod(*PodView)   {}
func (nopWalker) EndNode()       {}

// Walking allocates per node (its name), not per pod.
func TestWalkAllocations(t *testing.T) {
	data, err := Encode(poolChunk())
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := Walk(data, nopWalker{}); err != nil {
			t.Fatal(err)
		}
	})
	if nodes := len(poolChunk().Nodes); allocs > float64(nodes+4) {
		t.Errorf("%.0f allocations to walk %d nodes of 100 pods", allocs, nodes)
	}
}

// The API server's side of a chunk: Walk against Decode.
func BenchmarkWalk(b *testing.B) {
	data, err := Encode(poolChunk())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := Walk(data, nopWalker{}); err != nil {
			b.Fatal(err)
		}
	}
}
