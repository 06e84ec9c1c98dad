package nodelifecycle

import (
	"runtime"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/podtest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// testService is a Service's cache, without a bus.
func testService() *Service {
	return &Service{nodes: map[string]*cachedNode{}, pods: map[string]cachedPod{}, byNode: map[string]map[string]bool{},
		pending: map[string]time.Time{}, strs: intern.NewStrings(intern.DefaultLimit),
		tols: intern.NewTable[[]*pb.Toleration](intern.DefaultLimit)}
}

// BenchmarkCachePods is what the cache keeps per pod: the pods' entries are made before the first
// measure, so what grows is the cache alone.
func BenchmarkCachePods(b *testing.B) {
	const n = 20000
	entries, size := podtest.Entries(n)
	for b.Loop() {
		podtest.ReportLiveHeap(b, n, size, func() any {
			s := testService()
			for _, e := range entries {
				s.onPod(e)
			}
			return s
		})
	}
	runtime.KeepAlive(entries)
}
