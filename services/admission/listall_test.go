package admission

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/internal/podtest"
)

// BenchmarkListAllPages pages through 150,000 running pods in pages of 500, as `kubectl get pods -A`
// does (a Table) and as a client of whole objects does: the server's side of the list.
func BenchmarkListAllPages(b *testing.B) {
	const n = 150_000
	entries, _ := podtest.Entries(n)
	initial := newWatchCache(podKind, nil, 1, time.Hour, nil)
	for _, e := range entries {
		initial.apply(e.Key(), e.Operation(), e.Value(), e.Revision())
	}
	c := newWatchCache(podKind, nil, 0, 0, nil)
	c.replace(initial, n)
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
					req := request{kind: podKind, q: q}
					if bc.table {
						req.table = &tableOptions{includeObject: metav1.IncludeMetadata}
					}
					m, err := newMatcher(q, podKind)
					if err != nil {
						b.Fatal(err)
					}
					w := httptest.NewRecorder()
					if err := s.listCached(context.Background(), w, req, c, selectionOf(req, m)); err != nil {
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
