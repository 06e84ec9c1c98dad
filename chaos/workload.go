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

// workload creates, updates and deletes pods through the API, keeping about cfg.Pods, and logs every
// answer.
type workload struct {
	h      *harness
	cfg    Config
	r      *rand.Rand
	path   string
	f      *os.File
	enc    *json.Encoder
	client *http.Client

	live                      []*livePod // pods created (201) and not deleted yet
	n                         int
	created, deleted, updated int
	realCreated, realDeleted  int // of the pods meant for the real node

	deploys                                                      []*liveDeploy // Deployments created and not deleted yet
	nd                                                           int
	deploysCreated, deploysScaled, deploysRolled, deploysDeleted int
}

// livePod is a pod of the workload and the generation of its last update request.
type livePod struct {
	name, uid string
	gen       int
	real      bool // meant for the real node
}

func newWorkload(h *harness, cfg Config, path string) (*workload, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &workload{h: h, cfg: cfg, r: rand.New(rand.NewSource(cfg.Seed)), path: path, f: f, enc: json.NewEncoder(f),
		client: &http.Client{Timeout: 45 * time.Second}}, nil
}

func (w *workload) close() { _ = w.f.Close() }

// action is one kind of request of the workload, drawn with its weight once the pod count allows it.
// The Deployment actions log check.WorkloadOp lines too; the checker holds Deployments to their
// promises from the history itself.
type action struct {
	weight int
	run    func(context.Context)
}

func (w *workload) actions() []action {
	return []action{
		{3, w.create},
		{2, w.update},
		{3, w.delete},
		{1, w.deployCreate},
		{1, w.deployScale},
		{1, w.deployRoll},
		{1, w.deployDelete},
	}
}

func (w *workload) run(ctx context.Context) {
	acts := w.actions()
	total := 0
	for _, a := range acts {
		total += a.weight
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(between(w.r, 100*time.Millisecond, 400*time.Millisecond)):
		}
		switch {
		case len(w.live) < w.cfg.Pods/2:
			w.create(ctx)
		case len(w.live) >= 2*w.cfg.Pods:
			w.delete(ctx)
		default:
			x := w.r.Intn(total)
			for _, a := range acts {
				if x -= a.weight; x < 0 {
					a.run(ctx)
					break
				}
			}
		}
	}
}

// create posts a small pod; one in four carries a preferred anti-affinity, so the schedulers' partitioned
// consumers for constrained pods take part too (preferred: it never makes a pod unschedulable). With a
// real node, another one in four goes there (realnode.go); the draws are the same either way.
func (w *workload) create(ctx context.Context) {
	w.n++
	name := fmt.Sprintf("wl-%d-%d", w.cfg.Seed, w.n)
	cpu := []string{"50m", "100m", "200m"}[w.r.Intn(3)]
	extra := ""
	labels := `{"app":"chaos"}`
	if w.n%4 == 0 {
		labels = `{"app":"chaos","group":"spread"}`
		extra = spreadAffinity("group", "spread")
	}
	image, command := "example.local/app:1", ""
	real := w.h.real != nil && w.n%4 == 2
	if real {
		image = w.h.real.image
		cmd, _ := json.Marshal(realCommand)
		command = `,"command":` + string(cmd)
		extra = fmt.Sprintf(`,"nodeSelector":{%q:"containerd"},"tolerations":[{"key":%q,"operator":"Equal","value":"containerd","effect":"NoSchedule"}]`,
			RealLabel, RealLabel)
	}
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"default","labels":%s},`+
		`"spec":{"terminationGracePeriodSeconds":2,"containers":[{"name":"app","image":%q%s,`+
		`"resources":{"requests":{"cpu":%q,"memory":"32Mi"}}}]%s}}`, name, labels, image, command, cpu, extra)
	code, resp := w.do(ctx, http.MethodPost, w.h.api+"/api/v1/namespaces/default/pods", body)
	op := check.WorkloadOp{Op: "create", Namespace: "default", Name: name, UID: createdUID(code, resp), Code: code, Error: failure(code, resp)}
	if code == http.StatusCreated {
		w.live = append(w.live, &livePod{name: name, uid: op.UID, real: real})
		w.created++
		if real {
			w.realCreated++
		}
	}
	_ = w.enc.Encode(op)
}

// update patches a random live pod's label and annotation with its next generation: the checker holds
// the store to never losing an update answered 200, nor writing an older generation over a newer one.
func (w *workload) update(ctx context.Context) {
	if len(w.live) == 0 {
		return
	}
	p := w.live[w.r.Intn(len(w.live))]
	p.gen++ // even when the outcome is unknown, so that every request carries a new generation
	body := fmt.Sprintf(`{"metadata":{"labels":{%q:"%d"},"annotations":{%q:"%d"}}}`, check.GenLabel, p.gen, check.GenAnnotation, p.gen)
	code, resp := w.doType(ctx, http.MethodPatch, w.h.api+"/api/v1/namespaces/default/pods/"+p.name, body, "application/merge-patch+json")
	if code == http.StatusOK {
		w.updated++
	}
	_ = w.enc.Encode(check.WorkloadOp{Op: "update", Namespace: "default", Name: p.name, UID: p.uid, Gen: p.gen, Code: code, Error: failure(code, resp)})
}

// delete deletes a random live pod, with a grace period of 0 (forced), 1 or 2 seconds.
func (w *workload) delete(ctx context.Context) {
	if len(w.live) == 0 {
		return
	}
	i := w.r.Intn(len(w.live))
	name, real := w.live[i].name, w.live[i].real
	grace := w.r.Intn(3)
	code, resp := w.do(ctx, http.MethodDelete, w.h.api+"/api/v1/namespaces/default/pods/"+name, fmt.Sprintf(`{"gracePeriodSeconds":%d}`, grace))
	if code == http.StatusOK || code == http.StatusNotFound {
		w.live = append(w.live[:i], w.live[i+1:]...)
	}
	if code == http.StatusOK {
		w.deleted++
		if real {
			w.realDeleted++
		}
	}
	_ = w.enc.Encode(check.WorkloadOp{Op: "delete", Namespace: "default", Name: name, Code: code, Error: failure(code, resp)})
}

// do sends one request; code 0 means no answer (the outcome is unknown).
func (w *workload) do(ctx context.Context, method, url, body string) (int, []byte) {
	return w.doType(ctx, method, url, body, "application/json")
}

func (w *workload) doType(ctx context.Context, method, url, body, ctype string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewBufferString(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// failure is the message of an answer that is not a success, for the log.
func failure(code int, body []byte) string {
	if code/100 == 2 {
		return ""
	}
	var st struct{ Message string }
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return st.Message
	}
	if code == 0 {
		return "no answer"
	}
	return string(body[:min(len(body), 200)])
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
