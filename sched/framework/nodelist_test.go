package framework_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

// The builder against a sorted map: every list handed out keeps its contents whatever changes follow,
// and From visits every node once from any start, wrapping around.
func TestNodeListBuilder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var b framework.NodeListBuilder
	want := map[string]*framework.NodeInfo{}
	type handed struct {
		list  framework.NodeList
		names []string
		infos []*framework.NodeInfo
	}
	var lists []handed
	sorted := func() ([]string, []*framework.NodeInfo) {
		var names []string
		for n := range want {
			names = append(names, n)
		}
		slices.Sort(names)
		infos := make([]*framework.NodeInfo, len(names))
		for i, n := range names {
			infos[i] = want[n]
		}
		return names, infos
	}
	for step := range 6000 {
		name := fmt.Sprintf("node-%04d", rng.IntN(700))
		switch r := rng.IntN(10); {
		case r < 6:
			info := st.Node(name).Info()
			b.Set(name, info)
			want[name] = info
		default:
			b.Set(name, nil)
			delete(want, name)
		}
		if step%97 == 0 {
			names, infos := sorted()
			lists = append(lists, handed{b.List(), names, infos})
		}
	}
	names, infos := sorted()
	lists = append(lists, handed{b.List(), names, infos})
	for i, h := range lists {
		if got := h.list.Len(); got != len(h.names) {
			t.Fatalf("list %d: Len %d, want %d", i, got, len(h.names))
		}
		if got := h.list.Flatten(); !slices.EqualFunc(got, h.infos, same) {
			t.Fatalf("list %d changed after it was handed out", i)
		}
		for j, n := range h.names {
			if !same(h.list.Get(n), h.infos[j]) {
				t.Fatalf("list %d: Get(%s) wrong", i, n)
			}
		}
		if h.list.Get("absent") != nil {
			t.Fatalf("list %d: Get of an absent name", i)
		}
		if len(h.infos) == 0 {
			continue
		}
		start := rng.IntN(len(h.infos))
		var visited []*framework.NodeInfo
		for n := range h.list.From(start) {
			visited = append(visited, n)
		}
		if wantOrder := append(slices.Clone(h.infos[start:]), h.infos[:start]...); !slices.EqualFunc(visited, wantOrder, same) {
			t.Fatalf("list %d: From(%d) visited %d nodes out of order", i, start, len(visited))
		}
	}
}

// same: the list holds copies, so a node is recognised by its pb.Node (each Set in the test has its own).
func same(a, b *framework.NodeInfo) bool { return a != nil && b != nil && a.Node == b.Node }
