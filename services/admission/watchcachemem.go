package admission

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/labels"
)

// The watch cache holds every object of a kind, and lately changed ones twice or more: what it keeps
// per object is most of the API's memory. Objects of one kind repeat the same label sets (a
// Deployment's pods) and field values (node names, phases), so the cache keeps one copy of each.

const (
	// maxCacheEventBytes bounds the stored bytes the ring of changes holds, beyond its minimum of
	// events: under a burst the ring keeps fewer than eventFreshness of changes rather than several
	// versions of every object, and watches that start before its oldest are 410 Expired.
	maxCacheEventBytes = 64 << 20
	// cacheEntryOverhead is what an entry costs beyond its stored bytes, as the ring counts it.
	cacheEntryOverhead = 256
	// maxInterned bounds each interner: values beyond it are kept as they are, unshared.
	maxInterned = 1 << 14
)

// interner shares equal label sets and field values among a cache's entries. It only grows, up to
// maxInterned of each; values it no longer sees stay until the cache is rebuilt.
type interner struct {
	mu     sync.Mutex
	sets   map[string]labels.Set
	values map[string]string
	key    strings.Builder
}

func newInterner() *interner {
	return &interner{sets: map[string]labels.Set{}, values: map[string]string{}}
}

// labels returns a set equal to m, shared with the other entries that have it; callers must not change it.
func (in *interner) labels(m map[string]string) labels.Set {
	if len(m) == 0 {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.key.Reset()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		in.key.WriteString(k)
		in.key.WriteByte(0)
		in.key.WriteString(m[k])
		in.key.WriteByte(0)
	}
	if s, ok := in.sets[in.key.String()]; ok {
		return s
	}
	s := make(labels.Set, len(m))
	for k, v := range m {
		s[in.valueLocked(k)] = in.valueLocked(v)
	}
	if len(in.sets) < maxInterned {
		in.sets[in.key.String()] = s
	}
	return s
}

// value returns a string equal to v, shared with the other entries that have it.
func (in *interner) value(v string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.valueLocked(v)
}

func (in *interner) valueLocked(v string) string {
	if v == "" {
		return ""
	}
	if s, ok := in.values[v]; ok {
		return s
	}
	if len(in.values) < maxInterned {
		v = strings.Clone(v)
		in.values[v] = v
	}
	return v
}

// eventCost is what an event's entry counts against maxCacheEventBytes.
func eventCost(ev *cacheEvent) int {
	if e := ev.object(); e != nil {
		return len(e.data) + cacheEntryOverhead
	}
	return cacheEntryOverhead
}
