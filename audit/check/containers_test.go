package check

import (
	"context"
	"errors"
	"testing"
)

// fakeRuntime is a node's runtime as a fixed list of containers.
type fakeRuntime struct {
	cs  []Container
	err error
}

func (f fakeRuntime) ListContainers(context.Context) ([]Container, error) { return f.cs, f.err }

func TestContainers(t *testing.T) {
	// a: Ready on n1; b: deleted on request; c: Ready on n2; d: pending.
	history := []step{nodeRec("n1", "4"), nodeRec("n2", "4"),
		podRec("a", pod("ua", "1", on("n1"), ready)),
		podRec("b", pod("ub", "1", on("n1"), ready)), deleteCmd("b"), podRec("b", pod("ub", "1", on("n1"), ready, deleting(1))), podDel("b"),
		podRec("c", pod("uc", "1", on("n2"), ready)),
		podRec("d", pod("ud", "1"))}
	run := func(id, uid, pod string) Container {
		return Container{ID: id, PodUID: uid, Pod: pod, Name: "c", Running: true}
	}
	exited := func(id, uid, pod string) Container { c := run(id, uid, pod); c.Running = false; return c }
	tests := []struct {
		name string
		n1   []Container
		want []Violation // Kind, Pod, UID, Node, Revision compared
	}{
		{name: "the Ready pod's container runs, an earlier attempt exited", n1: []Container{run("a1", "ua", "default/a"), exited("a0", "ua", "default/a")}},
		{
			name: "a deleted pod's container left running",
			n1:   []Container{run("a1", "ua", "default/a"), run("b1", "ub", "default/b")},
			want: []Violation{{Kind: KindLeftover, Pod: "default/b", UID: "ub", Node: "n1", Revision: 6}},
		},
		{
			name: "a deleted pod's exited container left",
			n1:   []Container{run("a1", "ua", "default/a"), exited("b1", "ub", "default/b")},
			want: []Violation{{Kind: KindLeftover, Pod: "default/b", UID: "ub", Node: "n1", Revision: 6}},
		},
		{
			name: "a container of a pod the history never shows",
			n1:   []Container{run("a1", "ua", "default/a"), run("x1", "ux", "default/x")},
			want: []Violation{{Kind: KindLeftover, Pod: "default/x", UID: "ux", Node: "n1"}},
		},
		{
			name: "the Ready pod's container exited",
			n1:   []Container{exited("a1", "ua", "default/a")},
			want: []Violation{{Kind: KindNotRunning, Pod: "default/a", UID: "ua", Node: "n1", Revision: 3}},
		},
		{
			name: "the Ready pod's container gone, a stale one left",
			n1:   []Container{run("b1", "ub", "default/b")},
			want: []Violation{{Kind: KindLeftover, Pod: "default/b", UID: "ub", Node: "n1", Revision: 6},
				{Kind: KindNotRunning, Pod: "default/a", UID: "ua", Node: "n1", Revision: 3}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHistory()
			for i, s := range history {
				if err := h.apply(s(uint64(i + 1))); err != nil {
					t.Fatal(err)
				}
			}
			got, err := h.runtimes(context.Background(), map[string]ContainerLister{"n1": fakeRuntime{cs: tt.n1}})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("violations:\n%v\nwant:\n%v", got, tt.want)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Kind != w.Kind || g.Pod != w.Pod || g.UID != w.UID || g.Node != w.Node || g.Revision != w.Revision {
					t.Errorf("violation %d = %v, want %v", i, g, w)
				}
			}
		})
	}
}

// A runtime that cannot be listed fails the check rather than passing it.
func TestContainersListError(t *testing.T) {
	broken := errors.New("containerd does not answer")
	_, err := newHistory().runtimes(context.Background(), map[string]ContainerLister{"n1": fakeRuntime{err: broken}})
	if !errors.Is(err, broken) {
		t.Fatalf("err = %v, want %v", err, broken)
	}
}
