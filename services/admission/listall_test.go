package admission

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/podtest"
)

// BenchmarkListAllPages pages through 150,000 running pods in pages of 500, as `kubectl get pods -A`
// does (a Table) and as a client of whole objects does: the server's side of the list.
func BenchmarkListAllPages(b *testing.B) {
	const n = 150_000
	c := podCache(b, n)
	s := &Service{}
	for _, bc := range []struct {
		name  string
		table bool
	}{{"table", true}, {"objects", false}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var bytes int
			for b.Loop() {
				cont, items, pages := "", 0, 0
				bytes = 0
				for {
					q := url.Values{"limit": {"500"}}
					if cont != "" {
						q.Set("continue", cont)
					} else {
						q.Set("resourceVersion", "0")
					}
					req, sel := listRequest(b, q, bc.table)
					w := httptest.NewRecorder()
					if err := s.listCached(context.Background(), w, req, c, sel); err != nil {
						b.Fatal(err)
					}
					var page struct {
						Metadata struct {
							Continue string `json:"continue"`
						} `json:"metadata"`
						Items []json.RawMessage `json:"items"`
						Rows  []json.RawMessage `json:"rows"`
					}
					if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
						b.Fatal(err)
					}
					items += len(page.Items) + len(page.Rows)
					bytes += w.Body.Len()
					pages++
					if cont = page.Metadata.Continue; cont == "" {
						break
					}
				}
				if items != n {
					b.Fatalf("listed %d of %d pods in %d pages", items, n, pages)
				}
			}
			b.ReportMetric(float64(bytes)/1e6, "MB/list")
		})
	}
}

var listBenchPods = flag.Int("list-pods", 20000, "pods BenchmarkListUnpaged lists")

// BenchmarkListUnpaged lists every pod in one answer, without limit, as `curl /api/v1/pods` or
// `kubectl get pods -A --chunk-size=0` do, and reports the peak of the heap's objects during the
// request above what the cache holds: what one such list costs the server's memory.
func BenchmarkListUnpaged(b *testing.B) {
	n := *listBenchPods
	c := podCache(b, n)
	s := &Service{}
	for _, bc := range []struct {
		name  string
		table bool
	}{{"table", true}, {"objects", false}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var peak, base uint64
			var body int
			for b.Loop() {
				req, sel := listRequest(b, url.Values{"resourceVersion": {"0"}}, bc.table)
				w := &countingWriter{h: http.Header{}}
				base = podtest.HeapAlloc()
				stop := sampleHeap(&peak)
				err := s.listCached(context.Background(), w, req, c, sel)
				stop()
				if err != nil {
					b.Fatal(err)
				}
				body = w.n
			}
			b.ReportMetric(float64(peak-base), "peak-B")
			b.ReportMetric(float64(peak-base)/float64(n), "peak-B/pod")
			b.ReportMetric(float64(body)/1e6, "MB/list")
		})
	}
	runtime.KeepAlive(c)
}

// sampleHeap records the most bytes the heap's objects took until stop is called, sampled every
// millisecond.
func sampleHeap(peak *uint64) (stop func()) {
	*peak = 0
	done := make(chan struct{})
	finished := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(sample)
		*peak = max(*peak, sample[0].Value.Uint64())
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		read()
	}
}

// countingWriter is a client that reads an answer and keeps none of it.
type countingWriter struct {
	h    http.Header
	n    int
	code int
}

func (w *countingWriter) Header() http.Header { return w.h }
func (w *countingWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.n += len(p)
	return len(p), nil
}
