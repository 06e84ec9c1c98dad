package controllers

import (
	"runtime"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/internal/podtest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func runningPod(i int) *pb.Pod { return podtest.RunningPod(i) }

func testService() *Service {
	return &Service{cfg: Config{Kinds: defaultKinds}, cache: newCache(), kv: map[string]jetstream.KeyValue{}, dirtyDS: map[string]bool{},
		dirtyPDB: map[string]bool{}, dirtyGC: map[string]bool{}}
}

// BenchmarkCachePods is what the cache keeps per pod: the pods' entries are made before the first
// measure, so what grows is the cache alone.
func BenchmarkCachePods(b *testing.B) {
	const n = 20000
	entries, size := podtest.Entries(n)
	kb := &defaultKinds[0]
	for b.Loop() {
		podtest.ReportLiveHeap(b, n, size, func() any {
			s := testService()
			for _, e := range entries {
				s.apply(change{kind: kb, entry: e})
			}
			// work would have drained these.
			s.dirtyDS, s.dirtyPDB, s.dirtyGC = map[string]bool{}, map[string]bool{}, map[string]bool{}
			return s
		})
	}
	runtime.KeepAlive(entries)
}
