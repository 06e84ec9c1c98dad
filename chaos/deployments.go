package chaos

import (
	"context"
	"fmt"
	"net/http"

	"github.com/podbus/podbus/audit/check"
)

// Deployment operations in the workload log.
const (
	opDeployCreate = "deploy-create"
	opDeployScale  = "deploy-scale"
	opDeployRoll   = "deploy-roll"
	opDeployDelete = "deploy-delete"
)

// maxDeployments bounds the live Deployments, so that their pods stay a small share of the nodes.
const maxDeployments = 3

// liveDeploy is a Deployment of the workload and its template generation (the last roll).
type liveDeploy struct {
	name, uid string
	roll      int
}

func (w *workload) deployURL(name string) string {
	u := w.h.api + "/apis/apps/v1/namespaces/default/deployments"
	if name != "" {
		u += "/" + name
	}
	return u
}

// deployCreate creates a RollingUpdate Deployment of 1 to 4 replicas; every other one spreads its
// pods with a preferred anti-affinity (never unschedulable) and surges by a percentage instead of 1.
func (w *workload) deployCreate(ctx context.Context) {
	if len(w.deploys) >= maxDeployments {
		w.deployScale(ctx)
		return
	}
	w.nd++
	name := fmt.Sprintf("wd-%d-%d", w.cfg.Seed, w.nd)
	replicas := 1 + w.r.Intn(4)
	surge, unavailable := `1`, `0`
	affinity := ""
	if w.nd%2 == 0 {
		surge, unavailable = `"25%"`, `"25%"`
		affinity = spreadAffinity("deploy", name)
	}
	body := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":"default"},`+
		`"spec":{"replicas":%d,"selector":{"matchLabels":{"deploy":%q}},`+
		`"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":%s,"maxUnavailable":%s}},`+
		`"template":{"metadata":{"labels":{"app":"chaos","deploy":%q}},"spec":{"terminationGracePeriodSeconds":2,`+
		`"containers":[{"name":"app","image":"example.local/app:1","resources":{"requests":{"cpu":"100m","memory":"32Mi"}}}]%s}}}}`,
		name, replicas, name, surge, unavailable, name, affinity)
	code, resp := w.do(ctx, http.MethodPost, w.deployURL(""), body)
	op := check.WorkloadOp{Op: opDeployCreate, Namespace: "default", Name: name, UID: createdUID(code, resp), Gen: replicas, Code: code, Error: failure(code, resp)}
	if code == http.StatusCreated {
		w.deploys = append(w.deploys, &liveDeploy{name: name, uid: op.UID})
		w.deploysCreated++
	}
	_ = w.enc.Encode(op)
}

// deployScale sets a live Deployment's replicas to 1 to 4 (the scale may come in the middle of a roll).
func (w *workload) deployScale(ctx context.Context) {
	if len(w.deploys) == 0 {
		return
	}
	d := w.deploys[w.r.Intn(len(w.deploys))]
	replicas := 1 + w.r.Intn(4)
	code, resp := w.doType(ctx, http.MethodPatch, w.deployURL(d.name), fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas), "application/merge-patch+json")
	if code == http.StatusOK {
		w.deploysScaled++
	}
	_ = w.enc.Encode(check.WorkloadOp{Op: opDeployScale, Namespace: "default", Name: d.name, UID: d.uid, Gen: replicas, Code: code, Error: failure(code, resp)})
}

// deployRoll changes a live Deployment's template, as `kubectl set image` does: a new image tag, or
// every other time an annotation of the template only (a roll all the same).
func (w *workload) deployRoll(ctx context.Context) {
	if len(w.deploys) == 0 {
		return
	}
	d := w.deploys[w.r.Intn(len(w.deploys))]
	d.roll++
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"example.local/app:%d"}]}}}}`, d.roll+1)
	if d.roll%2 == 0 {
		patch = fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"chaos.podbus.io/roll":"%d"}}}}}`, d.roll)
	}
	code, resp := w.doType(ctx, http.MethodPatch, w.deployURL(d.name), patch, "application/strategic-merge-patch+json")
	if code == http.StatusOK {
		w.deploysRolled++
	}
	_ = w.enc.Encode(check.WorkloadOp{Op: opDeployRoll, Namespace: "default", Name: d.name, UID: d.uid, Gen: d.roll, Code: code, Error: failure(code, resp)})
}

// deployDelete deletes a live Deployment with the default (background) propagation: the garbage
// collector removes its ReplicaSets and their pods.
func (w *workload) deployDelete(ctx context.Context) {
	if len(w.deploys) == 0 {
		return
	}
	i := w.r.Intn(len(w.deploys))
	d := w.deploys[i]
	code, resp := w.do(ctx, http.MethodDelete, w.deployURL(d.name), `{}`)
	if code == http.StatusOK || code == http.StatusNotFound {
		w.deploys = append(w.deploys[:i], w.deploys[i+1:]...)
	}
	if code == http.StatusOK {
		w.deploysDeleted++
	}
	_ = w.enc.Encode(check.WorkloadOp{Op: opDeployDelete, Namespace: "default", Name: d.name, UID: d.uid, Code: code, Error: failure(code, resp)})
}
