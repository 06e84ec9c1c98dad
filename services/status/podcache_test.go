package status

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The cache keeps the last two generations of writes: a pod written just before a generation fills
// is still found after the switch, one written two generations ago is not, and the cache never holds
// more than two generations.
func TestPodCacheGenerations(t *testing.T) {
	data, err := proto.Marshal(&pb.Pod{Metadata: &pb.ObjectMeta{Uid: "u"}})
	if err != nil {
		t.Fatal(err)
	}
	var c podCache
	put := func(i int) { c.put(fmt.Sprint("default/p", i), "u", data, uint64(i+1)) }
	has := func(i int) bool {
		p, ok := c.get(fmt.Sprint("default/p", i), "u")
		return ok && p.rev == uint64(i+1)
	}
	for i := range maxCachedPods {
		put(i)
	}
	put(maxCachedPods) // the first generation is full: it becomes the previous one
	if !has(0) || !has(maxCachedPods-1) || !has(maxCachedPods) {
		t.Fatal("a pod of the previous generation is lost at the switch")
	}
	put(0) // written again: moves to the current generation
	for i := maxCachedPods + 1; i < 2*maxCachedPods; i++ {
		put(i)
	}
	put(2 * maxCachedPods) // second switch: the first generation is dropped
	if has(1) {
		t.Error("a pod written two generations ago is still cached")
	}
	if !has(0) || !has(maxCachedPods) || !has(2*maxCachedPods) {
		t.Error("a recent pod is missing")
	}
	if n := len(c.cur) + len(c.prev); n > 2*maxCachedPods {
		t.Errorf("the cache holds %d pods, more than two generations", n)
	}
	if _, ok := c.get("default/p0", "other"); ok {
		t.Error("another incarnation's entry answered")
	}
	c.forget("default/p0")
	if has(0) {
		t.Error("a forgotten pod is still cached")
	}
}
