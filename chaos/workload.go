package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"time"

	"github.com/podbus/podbus/audit/check"
)

// workload creates and deletes pods through the API, keeping about cfg.Pods, and logs every answer.
type workload struct {
	h      *harness
	cfg    Config
	r      *rand.Rand
	path   string
	f      *os.File
	enc    *json.Encoder
	client *http.Client

	live             []string // pods created (201) and not deleted yet
	n                int
	created, deleted int
}

func newWorkload(h *harness, cfg Config, path string) (*workload, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &workload{h: h, cfg: cfg, r: rand.New(rand.NewSource(cfg.Seed)), path: path, f: f, enc: json.NewEncoder(f),
		client: &http.Client{Timeout: 15 * time.Second}}, nil
}

func (w *workload) close() { _ = w.f.Close() }

func (w *workload) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(between(w.r, 100*time.Millisecond, 400*time.Millisecond)):
		}
		switch {
		case len(w.live) < w.cfg.Pods/2 || (len(w.live) < 2*w.cfg.Pods && w.r.Intn(2) == 0):
			w.create(ctx)
		case len(w.live) > 0:
			w.delete(ctx)
		}
	}
}

// create posts a small pod; one in four carries a preferred anti-affinity, so the schedulers' partitioned
// consumers for constrained pods take part too (preferred: it never makes a pod unschedulable).
func (w *workload) create(ctx context.Context) {
	w.n++
	name := fmt.Sprintf("wl-%d-%d", w.cfg.Seed, w.n)
	cpu := []string{"50m", "100m", "200m"}[w.r.Intn(3)]
	affinity := ""
	labels := `{"app":"chaos"}`
	if w.n%4 == 0 {
		labels = `{"app":"chaos","group":"spread"}`
		affinity = `,"affinity":{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":100,` +
			`"podAffinityTerm":{"topologyKey":"kubernetes.io/hostname","labelSelector":{"matchLabels":{"group":"spread"}}}}]}}`
	}
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"default","labels":%s},`+
		`"spec":{"terminationGracePeriodSeconds":2,"containers":[{"name":"app","image":"example.local/app:1",`+
		`"resources":{"requests":{"cpu":%q,"memory":"32Mi"}}}]%s}}`, name, labels, cpu, affinity)
	code, resp := w.do(ctx, http.MethodPost, w.h.api+"/api/v1/namespaces/default/pods", body)
	op := check.WorkloadOp{Op: "create", Namespace: "default", Name: name, Code: code}
	if code == http.StatusCreated {
		var p struct {
			Metadata struct{ UID string } `json:"metadata"`
		}
		_ = json.Unmarshal(resp, &p)
		op.UID = p.Metadata.UID
		w.live = append(w.live, name)
		w.created++
	}
	_ = w.enc.Encode(op)
}

// delete deletes a random live pod, with a grace period of 0 (forced), 1 or 2 seconds.
func (w *workload) delete(ctx context.Context) {
	i := w.r.Intn(len(w.live))
	name := w.live[i]
	grace := w.r.Intn(3)
	code, _ := w.do(ctx, http.MethodDelete, w.h.api+"/api/v1/namespaces/default/pods/"+name, fmt.Sprintf(`{"gracePeriodSeconds":%d}`, grace))
	if code == http.StatusOK || code == http.StatusNotFound {
		w.live = append(w.live[:i], w.live[i+1:]...)
	}
	if code == http.StatusOK {
		w.deleted++
	}
	_ = w.enc.Encode(check.WorkloadOp{Op: "delete", Namespace: "default", Name: name, Code: code})
}

// do sends one request; code 0 means no answer (the outcome is unknown).
func (w *workload) do(ctx context.Context, method, url, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewBufferString(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// ops reads the log back.
func (w *workload) ops() ([]check.WorkloadOp, error) {
	f, err := os.Open(w.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return check.ReadWorkload(f)
}
