package admission

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podbus/podbus/bus"
)

// Entries keep their own copy of the stored value, and objects with equal labels share one set.
func TestCacheEntriesShareLabels(t *testing.T) {
	c := fedCache(t)
	buf := mustMarshal(t, smallPod("default", "a", "web"))
	c.apply(bus.PodKey("default", "a"), jetstream.KeyValuePut, buf, 1)
	c.putPod(t, "b", "web", 2)
	c.putPod(t, "c", "db", 3)
	for i := range buf {
		buf[i] = 0 // the message buffer is reused or freed
	}
	a, b, d := c.objects["default/a"], c.objects["default/b"], c.objects["default/c"]
	if reflect.ValueOf(a.labels).UnsafePointer() != reflect.ValueOf(b.labels).UnsafePointer() {
		t.Error("pods with equal labels hold separate sets")
	}
	if d.labels["app"] != "db" || a.labels["app"] != "web" {
		t.Errorf("labels %v and %v, want app=web and app=db", a.labels, d.labels)
	}
	if o, err := c.get("default/a"); err != nil || objectMeta(o).Name != "a" {
		t.Errorf("get after the buffer changed: %v, %v", o, err)
	}
}

// An object's versions share the id of its first one: the ring keeps several versions of a pod that
// changes, and a string each would be one more object per version.
func TestCacheVersionsShareID(t *testing.T) {
	c := fedCache(t)
	c.putPod(t, "a", "web", 1)
	first := c.objects["default/a"]
	c.putPod(t, "a", "db", 2)
	second := c.objects["default/a"]
	if second == first || second.labels["app"] != "db" || !first.stale {
		t.Fatalf("the second version did not replace the first: %+v", second)
	}
	if second.id != "default/a" || unsafe.StringData(second.id) != unsafe.StringData(first.id) {
		t.Errorf("versions hold separate ids %q and %q", first.id, second.id)
	}
}

// Past its byte budget the ring drops its oldest changes down to its minimum, and a watch from before
// them is 410 Expired.
func TestRingBoundedByBytes(t *testing.T) {
	c := fedCache(t)
	const n = minCacheEvents + 500
	for i := range n {
		c.putPod(t, fmt.Sprintf("p%d", i), "web", uint64(i+1))
	}
	cost := c.ringBytes / c.n
	c.maxBytes = cost * (minCacheEvents + 100)
	c.putPod(t, "last", "web", n+1)
	if c.n <= minCacheEvents || c.n > minCacheEvents+100 || c.ringBytes > c.maxBytes {
		t.Errorf("ring holds %d events, %d bytes; want %d to %d events within %d bytes", c.n, c.ringBytes, minCacheEvents+1, minCacheEvents+100, c.maxBytes)
	}
	if _, _, _, _, err := c.register(selection{m: everything()}, 0, false, false); err == nil {
		t.Error("watch from revision 0 started, want 410 Expired")
	}
	w, _, backlog, _, err := c.register(selection{m: everything()}, c.oldest, false, false)
	if err != nil {
		t.Fatalf("watch from the oldest held: %v", err)
	}
	defer c.stop(w)
	if len(backlog) != c.n {
		t.Errorf("backlog of %d events, want %d", len(backlog), c.n)
	}
}

// A cache that nobody lists does not keep the versions its objects replaced: the pending entries it
// merges on the next list stay within a bound of the objects it holds.
func TestUnlistedCacheKeepsNoReplacedVersions(t *testing.T) {
	c := fedCache(t)
	const pods, versions = 2 * minCacheEvents, 10
	rev := uint64(0)
	for v := range versions {
		for i := range pods {
			rev++
			c.putPod(t, fmt.Sprintf("p%d", i), fmt.Sprintf("v%d", v), rev)
		}
	}
	if bound := max(minCacheEvents, len(c.objects)/2); len(c.pending) > bound {
		t.Errorf("%d pending entries for %d objects, want at most %d", len(c.pending), len(c.objects), bound)
	}
	held := map[*cacheEntry]bool{}
	for _, e := range append(slices.Clone(c.sorted), c.pending...) {
		held[e] = true
	}
	if len(held) > pods+max(minCacheEvents, pods/2) {
		t.Errorf("sorted and pending hold %d entries for %d objects", len(held), pods)
	}
	items, _ := c.state()
	if len(items) != pods {
		t.Fatalf("list: %d objects, want %d", len(items), pods)
	}
	for _, e := range items {
		if e.stale || e.labels["app"] != fmt.Sprintf("v%d", versions-1) {
			t.Fatalf("listed %s with app=%s (stale %v), want the last version", e.id, e.labels["app"], e.stale)
		}
	}
}

func everything() matcher { return matcher{label: labels.Everything(), field: fields.Everything()} }
