package admission

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podbus/podbus/internal/intern"
)

// The watch cache holds every object of a kind, and lately changed ones twice or more: what it keeps
// per object is most of the API's memory. Objects of one kind repeat the same label sets (a
// Deployment's pods) and field values (node names, phases), so the cache keeps one copy of each, in the
// process-wide table of internal/intern that the other services' caches share.

const (
	// maxCacheEventBytes bounds the stored bytes the ring of changes holds, beyond its minimum of
	// events: under a burst the ring keeps fewer than eventFreshness of changes rather than several
	// versions of every object, and watches that start before its oldest are 410 Expired.
	maxCacheEventBytes = 64 << 20
	// cacheEntryOverhead is what an entry costs beyond its stored bytes, as the ring counts it.
	cacheEntryOverhead = 256
)

// internLabels is the shared set equal to m (nil when empty); callers must not change it.
func internLabels(m map[string]string) labels.Set {
	if len(m) == 0 {
		return nil
	}
	return intern.Labels(m)
}

// eventCost is what an event's entry counts against maxCacheEventBytes.
func eventCost(ev *cacheEvent) int {
	if e := ev.object(); e != nil {
		return len(e.data) + cacheEntryOverhead
	}
	return cacheEntryOverhead
}
