package admission

import (
	"fmt"
	"net/url"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podtest"
	pb "github.com/podbus/podbus/proto/podbusv1"
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

// Pods on the same node in the same phase share their field values; each reads its own name,
// namespace and IP, and field selectors match as on the decoded pod.
func TestCacheEntriesShareFields(t *testing.T) {
	c := fedCache(t)
	pod := func(ns, name, node, ip string) *pb.Pod {
		p := smallPod(ns, name, "web")
		p.Spec.NodeName, p.Status.PodIp, p.Status.Phase = node, ip, "Running"
		return p
	}
	pods := []*pb.Pod{pod("default", "a", "n1", "10.0.0.1"), pod("default", "b", "n1", "10.0.0.2"),
		pod("other", "c", "n1", ""), pod("default", "d", "n2", "10.0.0.4"), pod("default", "n1", "n1", "10.0.0.5")}
	for i, p := range pods {
		c.apply(bus.PodKey(p.Metadata.Namespace, p.Metadata.Name), jetstream.KeyValuePut, mustMarshal(t, p), uint64(i+1))
	}
	e := func(ns, name string) *cacheEntry { return c.objects[ns+"/"+name] }
	if &e("default", "a").fields[0] != &e("default", "b").fields[0] || &e("default", "a").fields[0] != &e("other", "c").fields[0] {
		t.Error("pods of one node and phase hold separate field values")
	}
	if &e("default", "a").fields[0] == &e("default", "d").fields[0] {
		t.Error("pods of two nodes share field values")
	}
	for _, p := range pods {
		got := e(p.Metadata.Namespace, p.Metadata.Name)
		want := podFieldsPB(p)
		for i, f := range c.fieldNames {
			if v := got.field(i); v != want[f] {
				t.Errorf("pod %s/%s: %s = %q, want %q", p.Metadata.Namespace, p.Metadata.Name, f, v, want[f])
			}
		}
	}
	for _, tc := range []struct {
		selector string
		want     []string
	}{
		{"status.podIP=10.0.0.2", []string{"default/b"}},
		{"spec.nodeName=n1", []string{"default/a", "default/b", "default/n1", "other/c"}},
		{"metadata.name=n1", []string{"default/n1"}},
		{"metadata.namespace=other,status.phase=Running", []string{"other/c"}},
		{"status.podIP=", []string{"other/c"}},
	} {
		m, err := newMatcher(url.Values{"fieldSelector": {tc.selector}}, podKind)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for id, en := range c.objects {
			if c.matches(selection{m: m}, en) {
				got = append(got, id)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.selector, got, tc.want)
		}
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

// BenchmarkCachePods is what the watch cache keeps per pod (live heap after a GC): the pods'
// entries are made before the first measure, so what grows is the cache alone. 20,000 pods on 5,000
// nodes, as podtest makes them: four pods a node share their field values.
func BenchmarkCachePods(b *testing.B) {
	const n = 20000
	entries, size := podtest.Entries(n)
	for b.Loop() {
		podtest.ReportLiveHeap(b, n, size, func() any {
			c := newWatchCache(podKind, nil, 0, 0, nil)
			for _, e := range entries {
				c.apply(e.K, e.Op, e.V, e.Rev)
			}
			c.mu.Lock()
			c.sortedLocked()
			c.mu.Unlock()
			return c
		})
	}
	runtime.KeepAlive(entries)
}
