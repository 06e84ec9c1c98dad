package admission

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	"github.com/podbus/podbus/internal/syncbuf"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestErrors(t *testing.T) {
	e := start(t, func(c *Config) { c.MaxBodyBytes = 64 << 10 }, false)
	e.mustCreate("exists")
	big := podJSON("big", `labels={"x":"`+strings.Repeat("a", 70<<10)+`"}`)
	tests := []struct {
		name, method, path, body string
		headers                  []string
		code                     int
		reason                   metav1.StatusReason
		message                  string // substring
		causes                   []string
	}{
		{name: "malformed json", method: "POST", path: "/api/v1/namespaces/default/pods", body: `{"metadata":`,
			code: 400, reason: metav1.StatusReasonBadRequest, message: `Pod in version "v1" cannot be handled as a Pod`},
		{name: "malformed yaml", method: "POST", path: "/api/v1/namespaces/default/pods", body: "metadata: [a\n  b: :",
			headers: []string{"Content-Type: application/yaml"}, code: 400, reason: metav1.StatusReasonBadRequest, message: "yaml"},
		{name: "unknown field strict", method: "POST", path: "/api/v1/namespaces/default/pods?fieldValidation=Strict",
			body: podJSON("x", `spec={"foo":1,"containers":[{"name":"c","image":"i"}]}`),
			code: 400, reason: metav1.StatusReasonBadRequest, message: `strict decoding error: unknown field "spec.foo"`},
		{name: "duplicate field strict", method: "POST", path: "/api/v1/namespaces/default/pods?fieldValidation=Strict",
			body: `{"metadata":{"name":"d","name":"e"},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
			code: 400, reason: metav1.StatusReasonBadRequest, message: `duplicate field "metadata.name"`},
		{name: "too large", method: "POST", path: "/api/v1/namespaces/default/pods", body: big,
			code: 413, reason: metav1.StatusReasonRequestEntityTooLarge},
		{name: "invalid", method: "POST", path: "/api/v1/namespaces/default/pods", body: podJSON("inv", `spec={"containers":[]}`),
			code: 422, reason: metav1.StatusReasonInvalid, message: `Pod "inv" is invalid: spec.containers: Required value`,
			causes: []string{"spec.containers"}},
		{name: "namespace mismatch", method: "POST", path: "/api/v1/namespaces/other/pods",
			body: `{"metadata":{"name":"m","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
			code: 400, reason: metav1.StatusReasonBadRequest, message: "does not match the namespace"},
		{name: "wrong kind", method: "POST", path: "/api/v1/namespaces/default/pods",
			body: `{"kind":"Node","metadata":{"name":"k"}}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "not found", method: "GET", path: "/api/v1/namespaces/default/pods/nope",
			code: 404, reason: metav1.StatusReasonNotFound, message: `pods "nope" not found`},
		{name: "already exists", method: "POST", path: "/api/v1/namespaces/default/pods", body: podJSON("exists"),
			code: 409, reason: metav1.StatusReasonAlreadyExists, message: `pods "exists" already exists`},
		{name: "delete missing", method: "DELETE", path: "/api/v1/namespaces/default/pods/nope",
			code: 404, reason: metav1.StatusReasonNotFound},
		{name: "immutable field", method: "PATCH", path: "/api/v1/namespaces/default/pods/exists",
			body: `{"spec":{"restartPolicy":"Never"}}`, headers: []string{"Content-Type: application/merge-patch+json"},
			code: 422, reason: metav1.StatusReasonInvalid, message: `Pod "exists" is invalid`},
		{name: "stale resourceVersion", method: "PATCH", path: "/api/v1/namespaces/default/pods/exists",
			body: `{"metadata":{"resourceVersion":"999","labels":{"a":"b"}}}`, headers: []string{"Content-Type: application/merge-patch+json"},
			code: 409, reason: metav1.StatusReasonConflict},
		{name: "unsupported patch", method: "PATCH", path: "/api/v1/namespaces/default/pods/exists",
			body: `{}`, headers: []string{"Content-Type: application/apply-patch+yaml"},
			code: 415, reason: metav1.StatusReasonUnsupportedMediaType},
		{name: "node without a name", method: "POST", path: "/api/v1/nodes", body: `{}`,
			code: 422, reason: metav1.StatusReasonInvalid},
		{name: "nodes have no log", method: "GET", path: "/api/v1/nodes/n1/log",
			code: 404, reason: metav1.StatusReasonNotFound},
		{name: "node status cannot be deleted", method: "DELETE", path: "/api/v1/nodes/n1/status",
			code: 405, reason: metav1.StatusReasonMethodNotAllowed},
		{name: "bad field selector", method: "GET", path: "/api/v1/pods?fieldSelector=spec.foo%3Dx",
			code: 400, reason: metav1.StatusReasonBadRequest, message: "field label not supported: spec.foo"},
		{name: "unknown path", method: "GET", path: "/api/v1/widgets", code: 404, reason: metav1.StatusReasonNotFound},
		{name: "log of unbound pod", method: "GET", path: "/api/v1/namespaces/default/pods/exists/log",
			code: 400, reason: metav1.StatusReasonBadRequest, message: "does not have a host assigned"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do(tt.method, tt.path, tt.body, tt.headers...)
			st := decodeStatus(t, data)
			if resp.StatusCode != tt.code || st.Code != int32(tt.code) || st.Reason != tt.reason {
				t.Fatalf("got %d %s, want %d %s: %s", resp.StatusCode, st.Reason, tt.code, tt.reason, data)
			}
			if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure {
				t.Errorf("not a failure Status: %s", data)
			}
			if !strings.Contains(st.Message, tt.message) {
				t.Errorf("message %q does not contain %q", st.Message, tt.message)
			}
			if tt.causes != nil {
				var fields []string
				for _, c := range st.Details.Causes {
					fields = append(fields, c.Field)
				}
				if d := cmp.Diff(tt.causes, fields); d != "" {
					t.Errorf("causes (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	e := start(t, func(c *Config) {
		c.InsecureHTTP = false
		c.TokenAuthFile = tokenFile(t, "t0k,alice,1")
	}, false)
	tests := []struct {
		name    string
		headers []string
		code    int
	}{
		{name: "no token", code: 401},
		{name: "wrong token", headers: []string{"Authorization: Bearer nope"}, code: 401},
		{name: "good token", headers: []string{"Authorization: Bearer t0k"}, code: 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do("POST", "/api/v1/namespaces/default/pods", podJSON("p-"+strings.ReplaceAll(tt.name, " ", "-")), tt.headers...)
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d, want %d: %s", resp.StatusCode, tt.code, data)
			}
		})
	}
	cmd, meta := e.store.lastCommand()
	if cmd.GetUser() != "alice" || meta.User != "alice" {
		t.Errorf("user = %q / %q, want alice", cmd.GetUser(), meta.User)
	}
	if resp, _ := e.do("GET", "/version", ""); resp.StatusCode != 200 {
		t.Errorf("/version needs no token, got %d", resp.StatusCode)
	}
}

func TestCreate(t *testing.T) {
	e := start(t, nil, false)
	resp, data := e.do("POST", "/api/v1/namespaces/default/pods?fieldValidation=Warn",
		`{"metadata":{"generateName":"web-"},"spec":{"bogus":true,"containers":[{"name":"c","image":"nginx","resources":{"limits":{"cpu":"1","memory":"1Gi"}}}]}}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create = %d %s", resp.StatusCode, data)
	}
	if w := resp.Header.Values("Warning"); len(w) == 0 || !strings.Contains(w[0], `unknown field \"spec.bogus\"`) {
		t.Errorf("Warning headers = %q", w)
	}
	var pod map[string]any
	_ = json.Unmarshal(data, &pod)
	name, _ := get(pod, "metadata", "name").(string)
	if !strings.HasPrefix(name, "web-") || len(name) != len("web-")+5 {
		t.Errorf("generated name = %q", name)
	}
	for path, want := range map[string]any{
		"status.phase":          "Pending",
		"status.qosClass":       "Guaranteed",
		"metadata.namespace":    "default",
		"spec.restartPolicy":    "Always",
		"spec.schedulerName":    "default-scheduler",
		"kind":                  "Pod",
		"apiVersion":            "v1",
		"metadata.generateName": "web-",
	} {
		var p []any
		for _, s := range strings.Split(path, ".") {
			p = append(p, s)
		}
		if got := get(pod, p...); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if get(pod, "metadata", "uid") == "" || get(pod, "metadata", "resourceVersion") == "" || get(pod, "metadata", "creationTimestamp") == nil {
		t.Errorf("server fields missing: %s", data)
	}
	cmd, meta := e.store.lastCommand()
	uid := cmd.GetPod().GetMetadata().GetUid()
	if cmd.GetOp() != pb.PodCommand_OP_CREATE || meta.MsgID != "create-"+uid || meta.PodUID != uid || meta.Key != "default/"+name ||
		meta.Correlation == "" || meta.Correlation != cmd.GetPod().GetInternal().GetCorrelationId() || meta.User != unsecuredUser {
		t.Errorf("command %v meta %+v", cmd.GetOp(), meta)
	}

	// YAML bodies and dry runs.
	before := len(e.store.commands)
	resp, data = e.do("POST", "/api/v1/namespaces/default/pods?dryRun=All", "metadata:\n  name: dry\nspec:\n  containers:\n  - name: c\n    image: i\n",
		"Content-Type: application/yaml")
	if resp.StatusCode != 201 || !strings.Contains(string(data), `"name":"dry"`) {
		t.Fatalf("dry run = %d %s", resp.StatusCode, data)
	}
	if len(e.store.commands) != before {
		t.Errorf("dry run sent a command")
	}
	if resp, _ := e.do("GET", "/api/v1/namespaces/default/pods/dry", ""); resp.StatusCode != 404 {
		t.Errorf("dry-run pod exists: %d", resp.StatusCode)
	}
}

func TestReplyTimeout(t *testing.T) {
	e := start(t, func(c *Config) { c.ReplyTimeout = 200 * time.Millisecond }, true)
	resp, data := e.do("POST", "/api/v1/namespaces/default/pods", podJSON("slow"))
	st := decodeStatus(t, data)
	if resp.StatusCode != 504 || st.Reason != metav1.StatusReasonTimeout {
		t.Fatalf("got %d %s", resp.StatusCode, data)
	}
}

// A create whose answer is lost after the store wrote the pod is answered from the bucket: 201 when
// the stored pod is the create's (its uid), 504 as before otherwise.
func TestCreateAnsweredFromTheBucket(t *testing.T) {
	e := start(t, func(c *Config) { c.ReplyTimeout = 300 * time.Millisecond }, false)
	e.mustCreate("taken")
	e.store.mu.Lock()
	e.store.silent = true
	e.store.mu.Unlock()
	tests := []struct {
		name     string
		pod      string
		wantCode int
	}{
		{name: "written, answer lost", pod: "written", wantCode: 201},
		{name: "the name held by another pod, answer lost", pod: "taken", wantCode: 504},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do("POST", "/api/v1/namespaces/default/pods", podJSON(tt.pod))
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, data, tt.wantCode)
			}
			cmd, _ := e.store.lastCommand()
			if cmd.GetPod().GetMetadata().GetName() != tt.pod {
				t.Fatalf("the store's last command is for %q, want %q", cmd.GetPod().GetMetadata().GetName(), tt.pod)
			}
			if tt.wantCode != 201 {
				if st := decodeStatus(t, data); st.Reason != metav1.StatusReasonTimeout {
					t.Errorf("reason %q, want %q", st.Reason, metav1.StatusReasonTimeout)
				}
				return
			}
			var pod corev1.Pod
			if err := json.Unmarshal(data, &pod); err != nil {
				t.Fatal(err)
			}
			if want := cmd.GetPod().GetMetadata().GetUid(); string(pod.UID) != want || pod.Name != tt.pod || pod.ResourceVersion == "" {
				t.Errorf("answered pod %s uid %s rv %q, want the stored %s uid %s", pod.Name, pod.UID, pod.ResourceVersion, tt.pod, want)
			}
		})
	}
}

// An update or delete whose answer is lost is answered from the bucket when the stored pod shows its
// effect, and stays 504 when it does not: the command lost before the store acted, even when another
// writer changed the pod since.
func TestUpdateAndDeleteAnsweredFromTheBucket(t *testing.T) {
	const patch = `{"metadata":{"labels":{"tier":"front"}}}`
	tests := []struct {
		name     string
		bound    bool // the pod has a node, so a delete marks it terminating
		deleting bool // the pod is terminating before the command
		method   string
		drop     bool                      // the command is lost before the store acts
		then     func(e *env, name string) // another writer, after the command's effect
		wantCode int
		check    func(t *testing.T, pod map[string]any)
	}{
		{name: "update written", method: "PATCH", wantCode: 200, check: func(t *testing.T, p map[string]any) {
			if get(p, "metadata", "labels", "tier") != "front" {
				t.Errorf("labels %v, want the patch's", get(p, "metadata", "labels"))
			}
		}},
		{name: "update written, then the status changed", method: "PATCH", wantCode: 200,
			then: func(e *env, name string) {
				e.setPod("default", name, func(p *pb.Pod) { p.Status.Phase = "Running" })
			},
			check: func(t *testing.T, p map[string]any) {
				if get(p, "metadata", "labels", "tier") != "front" || get(p, "status", "phase") != "Running" {
					t.Errorf("labels %v phase %v, want the patch's and Running", get(p, "metadata", "labels"), get(p, "status", "phase"))
				}
			}},
		{name: "update lost", method: "PATCH", drop: true, wantCode: 504},
		{name: "update lost, the pod changed by another", method: "PATCH", drop: true, wantCode: 504,
			then: func(e *env, name string) {
				e.setPod("default", name, func(p *pb.Pod) { p.Metadata.Labels["tier"] = "back" })
			}},
		{name: "unbound pod deleted", method: "DELETE", wantCode: 200},
		{name: "bound pod marked terminating", method: "DELETE", bound: true, wantCode: 200, check: func(t *testing.T, p map[string]any) {
			if get(p, "metadata", "deletionTimestamp") == nil {
				t.Errorf("no deletionTimestamp in %v", p["metadata"])
			}
		}},
		{name: "delete lost", method: "DELETE", drop: true, wantCode: 504},
		{name: "delete lost, the pod already terminating", method: "DELETE", bound: true, deleting: true, drop: true, wantCode: 504},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, func(c *Config) { c.ReplyTimeout = 300 * time.Millisecond }, false)
			name := fmt.Sprintf("p%d", i)
			e.mustCreate(name)
			if tt.bound || tt.deleting {
				e.setPod("default", name, func(p *pb.Pod) {
					if tt.bound {
						p.Spec.NodeName = "n1"
					}
					if tt.deleting {
						p.Metadata.DeletionTimestamp = timestamppb.Now()
						p.Metadata.DeletionGracePeriodSeconds = proto.Int64(30)
					}
				})
			}
			e.store.mu.Lock()
			e.store.silent, e.store.drop = true, tt.drop
			if tt.then != nil {
				e.store.then = func(*pb.PodCommand) { tt.then(e, name) }
			}
			e.store.mu.Unlock()
			path := "/api/v1/namespaces/default/pods/" + name
			var headers []string
			body := ""
			if tt.method == "PATCH" {
				body, headers = patch, []string{"Content-Type: application/merge-patch+json"}
			}
			resp, data := e.do(tt.method, path, body, headers...)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, data, tt.wantCode)
			}
			if cmd, _ := e.store.lastCommand(); cmd.GetPod().GetMetadata().GetName() != name {
				t.Fatalf("the store's last command is for %q, want %q", cmd.GetPod().GetMetadata().GetName(), name)
			}
			if tt.wantCode == 504 {
				if st := decodeStatus(t, data); st.Reason != metav1.StatusReasonTimeout {
					t.Errorf("reason %q, want %q", st.Reason, metav1.StatusReasonTimeout)
				}
				return
			}
			var pod map[string]any
			if err := json.Unmarshal(data, &pod); err != nil {
				t.Fatal(err)
			}
			if get(pod, "metadata", "name") != name || get(pod, "metadata", "resourceVersion") == "" {
				t.Errorf("answered %v, want pod %s with a resourceVersion", pod["metadata"], name)
			}
			if tt.check != nil {
				tt.check(t, pod)
			}
		})
	}
}

// A command whose answer is lost is looked for in the bucket every Config.LookAfter, long before the
// reply timeout: the client's own timeout here is a third of that. The effect may come after the first
// look, as when the store's consumer redelivers a command whose delivery was lost.
func TestLostAnswerLookedForEarly(t *testing.T) {
	for _, late := range []time.Duration{0, 400 * time.Millisecond} {
		t.Run(fmt.Sprintf("effect after %s", late), func(t *testing.T) {
			e := start(t, func(c *Config) { c.ReplyTimeout, c.LookAfter = time.Minute, 50*time.Millisecond }, false)
			e.client.Timeout = 20 * time.Second
			e.mustCreate("updated")
			e.mustCreate("deleted")
			e.store.mu.Lock()
			e.store.silent, e.store.late = true, late
			e.store.mu.Unlock()
			tests := []struct {
				name, method, path, body, ctype string
				wantCode                        int
			}{
				{name: "create", method: "POST", path: "/api/v1/namespaces/default/pods", body: podJSON("created"), ctype: "application/json", wantCode: 201},
				{name: "update", method: "PATCH", path: "/api/v1/namespaces/default/pods/updated", body: `{"metadata":{"labels":{"tier":"front"}}}`,
					ctype: "application/merge-patch+json", wantCode: 200},
				{name: "delete", method: "DELETE", path: "/api/v1/namespaces/default/pods/deleted", wantCode: 200},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					var headers []string
					if tt.ctype != "" {
						headers = []string{"Content-Type: " + tt.ctype}
					}
					if resp, data := e.do(tt.method, tt.path, tt.body, headers...); resp.StatusCode != tt.wantCode {
						t.Fatalf("got %d %s, want %d", resp.StatusCode, data, tt.wantCode)
					}
				})
			}
		})
	}
}

// A command the store neither answered nor carried out is logged with its pod when the API answers
// 504, and not when the client went away before: nobody was kept waiting.
func TestReplyTimeoutLogged(t *testing.T) {
	var buf syncbuf.Buffer
	e := start(t, func(c *Config) {
		c.ReplyTimeout, c.LookAfter = 500*time.Millisecond, 100*time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	}, false)
	e.store.mu.Lock()
	e.store.drop = true
	e.store.mu.Unlock()

	gone := *e.client
	gone.Timeout = 100 * time.Millisecond
	req, err := http.NewRequest("POST", e.base+"/api/v1/namespaces/default/pods", strings.NewReader(podJSON("gone")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if resp, err := gone.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d before the reply timeout", resp.StatusCode)
	}
	if resp, data := e.do("POST", "/api/v1/namespaces/default/pods", podJSON("waits")); resp.StatusCode != 504 {
		t.Fatalf("got %d %s, want 504", resp.StatusCode, data)
	}
	logged := buf.String()
	if !strings.Contains(logged, "pod=default/waits") || !strings.Contains(logged, "no answer from the store, nor its effect in the bucket") {
		t.Errorf("the 504 is not logged with its pod:\n%s", logged)
	}
	if strings.Contains(logged, "pod=default/gone") {
		t.Errorf("a request whose client went away is logged as a timeout:\n%s", logged)
	}
}

// A command's answer is taken when it comes, even while the publish's acknowledgement has not: the
// acknowledgement can be lost when the command was stored.
func TestAnswerBeforeTheAcknowledgement(t *testing.T) {
	e := start(t, func(c *Config) {
		c.ReplyTimeout, c.LookAfter = time.Minute, 50*time.Second
		c.testPublisher = func(p commandPublisher) commandPublisher { return ackLost{p} }
	}, false)
	e.client.Timeout = 20 * time.Second
	e.mustCreate("p")
	if resp, data := e.do("DELETE", "/api/v1/namespaces/default/pods/p", ""); resp.StatusCode != 200 {
		t.Fatalf("delete: got %d %s, want 200", resp.StatusCode, data)
	}
}

// ackLost publishes through p but never delivers the acknowledgement.
type ackLost struct{ p commandPublisher }

func (a ackLost) PublishAsync(subject string, m proto.Message, meta bus.Meta) (jetstream.PubAckFuture, error) {
	f, err := a.p.PublishAsync(subject, m, meta)
	return lostAck{f}, err
}

type lostAck struct{ jetstream.PubAckFuture }

func (lostAck) Ok() <-chan *jetstream.PubAck { return nil }
func (lostAck) Err() <-chan error            { return nil }

func TestPatchAndDelete(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("p")
	tests := []struct {
		name, method, ctype, body string
		conflicts                 int // store answers 409 this many times first
		check                     func(pod map[string]any) bool
	}{
		{name: "strategic merge image", method: "PATCH", ctype: "application/strategic-merge-patch+json",
			body:  `{"spec":{"containers":[{"name":"c","image":"nginx:2"}]}}`,
			check: func(p map[string]any) bool { return get(p, "spec", "containers", 0, "image") == "nginx:2" }},
		{name: "merge patch label", method: "PATCH", ctype: "application/merge-patch+json",
			body:  `{"metadata":{"labels":{"tier":"front"}}}`,
			check: func(p map[string]any) bool { return get(p, "metadata", "labels", "tier") == "front" }},
		{name: "json patch annotation", method: "PATCH", ctype: "application/json-patch+json",
			body:  `[{"op":"add","path":"/metadata/annotations","value":{"a":"1"}}]`,
			check: func(p map[string]any) bool { return get(p, "metadata", "annotations", "a") == "1" }},
		{name: "retry after store conflicts", method: "PATCH", ctype: "application/merge-patch+json", conflicts: 2,
			body:  `{"metadata":{"labels":{"retried":"yes"}}}`,
			check: func(p map[string]any) bool { return get(p, "metadata", "labels", "retried") == "yes" }},
		{name: "no-op patch", method: "PATCH", ctype: "application/merge-patch+json",
			body:  `{"metadata":{"labels":{"retried":"yes"}}}`,
			check: func(p map[string]any) bool { return get(p, "metadata", "labels", "retried") == "yes" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.store.mu.Lock()
			e.store.conflicts = tt.conflicts
			e.store.mu.Unlock()
			resp, data := e.do(tt.method, "/api/v1/namespaces/default/pods/p?fieldValidation=Strict", tt.body, "Content-Type: "+tt.ctype)
			if resp.StatusCode != 200 {
				t.Fatalf("got %d %s", resp.StatusCode, data)
			}
			var pod map[string]any
			_ = json.Unmarshal(data, &pod)
			if !tt.check(pod) {
				t.Errorf("unexpected pod %s", data)
			}
			_, data = e.do("GET", "/api/v1/namespaces/default/pods/p", "")
			_ = json.Unmarshal(data, &pod)
			if !tt.check(pod) {
				t.Errorf("stored pod %s", data)
			}
		})
	}
	cmd, _ := e.store.lastCommand()
	if cmd.GetOp() != pb.PodCommand_OP_UPDATE || cmd.GetExpectedRevision() == 0 || cmd.GetPod().GetInternal().GetCorrelationId() == "" {
		t.Errorf("update command %v", cmd)
	}

	// PUT of the full object.
	_, data := e.do("GET", "/api/v1/namespaces/default/pods/p", "")
	put := strings.Replace(string(data), "nginx:2", "nginx:3", 1)
	if resp, data := e.do("PUT", "/api/v1/namespaces/default/pods/p", put); resp.StatusCode != 200 || !strings.Contains(string(data), "nginx:3") {
		t.Fatalf("PUT = %d %s", resp.StatusCode, data)
	}

	// Bound pods are marked terminating; the agent removes them.
	e.setPod("default", "p", func(p *pb.Pod) { p.Spec.NodeName = "n1" })
	resp, data := e.do("DELETE", "/api/v1/namespaces/default/pods/p", `{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":7,"propagationPolicy":"Background"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(data), `"deletionTimestamp"`) {
		t.Fatalf("DELETE = %d %s", resp.StatusCode, data)
	}
	cmd, _ = e.store.lastCommand()
	if cmd.GetOp() != pb.PodCommand_OP_DELETE || cmd.GetGracePeriodSeconds() != 7 {
		t.Errorf("delete command %v", cmd)
	}
	resp, data = e.do("DELETE", "/api/v1/namespaces/default/pods/p", `{"preconditions":{"uid":"other"}}`)
	if resp.StatusCode != 409 {
		t.Errorf("uid precondition: %d %s", resp.StatusCode, data)
	}
	e.mustCreate("q")
	if resp, data := e.do("DELETE", "/api/v1/namespaces/default/pods/q?gracePeriodSeconds=0", ""); resp.StatusCode != 200 {
		t.Fatalf("DELETE q = %d %s", resp.StatusCode, data)
	}
	if resp, _ := e.do("GET", "/api/v1/namespaces/default/pods/q", ""); resp.StatusCode != 404 {
		t.Errorf("q still there: %d", resp.StatusCode)
	}
}

const tableAccept = "Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

func TestListsTablesSelectors(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("a", `labels={"app":"web"}`)
	e.mustCreate("b", `labels={"app":"db"}`)
	if resp, data := e.do("POST", "/api/v1/namespaces", `{"metadata":{"name":"other"}}`); resp.StatusCode != 201 {
		t.Fatal(string(data))
	}
	resp, data := e.do("POST", "/api/v1/namespaces/other/pods", podJSON("c", `labels={"tier":"x"}`))
	if resp.StatusCode != 201 {
		t.Fatal(string(data))
	}
	e.setPod("default", "a", func(p *pb.Pod) {
		p.Spec.NodeName = "n1"
		p.Status.Phase = "Running"
		p.Status.PodIp = "10.0.0.9"
		p.Status.PodIps = []string{"10.0.0.9"}
		p.Status.ContainerStatuses = []*pb.ContainerStatus{{Name: "c", Ready: true, RestartCount: 2,
			State: &pb.ContainerState{Running: &pb.ContainerStateRunning{}}}}
	})
	e.setPod("default", "b", func(p *pb.Pod) {
		p.Status.ContainerStatuses = []*pb.ContainerStatus{{Name: "c", State: &pb.ContainerState{Waiting: &pb.ContainerStateWaiting{Reason: "ErrImagePull"}}}}
	})

	names := func(path string) []string {
		t.Helper()
		resp, data := e.do("GET", path, "")
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", path, resp.StatusCode, data)
		}
		var l struct {
			Kind     string
			Metadata struct{ ResourceVersion string }
			Items    []struct{ Metadata struct{ Name string } }
		}
		_ = json.Unmarshal(data, &l)
		if l.Kind != "PodList" || l.Metadata.ResourceVersion == "" {
			t.Errorf("list %s: %s", path, data)
		}
		out := []string{}
		for _, i := range l.Items {
			out = append(out, i.Metadata.Name)
		}
		return out
	}
	for path, want := range map[string][]string{
		"/api/v1/namespaces/default/pods":                                 {"a", "b"},
		"/api/v1/pods":                                                    {"a", "b", "c"},
		"/api/v1/pods?labelSelector=app%3Dweb":                            {"a"},
		"/api/v1/pods?labelSelector=app+in+(web,db)":                      {"a", "b"},
		"/api/v1/pods?fieldSelector=spec.nodeName%3Dn1":                   {"a"},
		"/api/v1/pods?fieldSelector=status.phase!%3DRunning":              {"b", "c"},
		"/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Db": {"b"},
		"/api/v1/pods?fieldSelector=metadata.namespace%3Dother":           {"c"},
		"/api/v1/pods?limit=1&continue=":                                  {"a"}, // the first page
	} {
		if d := cmp.Diff(want, names(path)); d != "" {
			t.Errorf("%s (-want +got):\n%s", path, d)
		}
	}

	resp, data = e.do("GET", "/api/v1/namespaces/default/pods", "", tableAccept)
	var tbl metav1.Table
	if err := json.Unmarshal(data, &tbl); err != nil || tbl.Kind != "Table" || tbl.APIVersion != "meta.k8s.io/v1" {
		t.Fatalf("table %d: %s", resp.StatusCode, data)
	}
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if d := cmp.Diff([]string{"Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"}, cols); d != "" {
		t.Errorf("columns:\n%s", d)
	}
	if len(tbl.Rows) != 2 {
		t.Fatalf("rows: %s", data)
	}
	want := [][]any{
		{"a", "1/1", "Running", "2", "10.0.0.9", "n1", "<none>", "<none>"},
		{"b", "0/1", "ErrImagePull", "0", "<none>", "<none>", "<none>", "<none>"},
	}
	for i, r := range tbl.Rows {
		got := append(append([]any{}, r.Cells[:4]...), r.Cells[5:]...)
		if d := cmp.Diff(want[i], got); d != "" {
			t.Errorf("row %d (-want +got):\n%s", i, d)
		}
		var meta metav1.PartialObjectMetadata
		if err := json.Unmarshal(r.Object.Raw, &meta); err != nil || meta.Kind != "PartialObjectMetadata" || meta.ResourceVersion == "" {
			t.Errorf("row object %s", r.Object.Raw)
		}
	}
	_, data = e.do("GET", "/api/v1/namespaces/default/pods/a?includeObject=Object", "", tableAccept)
	_ = json.Unmarshal(data, &tbl)
	if len(tbl.Rows) != 1 || !strings.Contains(string(tbl.Rows[0].Object.Raw), `"spec"`) {
		t.Errorf("includeObject=Object: %s", data)
	}

	// Namespaces: the fixed ones plus those with pods.
	_, data = e.do("GET", "/api/v1/namespaces", "", tableAccept)
	_ = json.Unmarshal(data, &tbl)
	var nss []any
	for _, r := range tbl.Rows {
		nss = append(nss, r.Cells[0])
	}
	if d := cmp.Diff([]any{"default", "kube-node-lease", "kube-public", "kube-system", "other"}, nss); d != "" {
		t.Errorf("namespaces:\n%s", d)
	}
	if resp, _ := e.do("GET", "/api/v1/namespaces/other", ""); resp.StatusCode != 200 {
		t.Errorf("GET namespace other = %d", resp.StatusCode)
	}
	if resp, _ := e.do("GET", "/api/v1/namespaces/nope", ""); resp.StatusCode != 404 {
		t.Errorf("GET namespace nope = %d", resp.StatusCode)
	}
}

func TestPodStatusColumn(t *testing.T) {
	tests := []struct {
		name string
		pod  func(p *pb.Pod)
		want string
	}{
		{name: "pending", pod: func(p *pb.Pod) {}, want: "Pending"},
		{name: "creating", pod: func(p *pb.Pod) {
			p.Status.ContainerStatuses = []*pb.ContainerStatus{{Name: "c", State: &pb.ContainerState{Waiting: &pb.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		}, want: "ContainerCreating"},
		{name: "crashloop", pod: func(p *pb.Pod) {
			p.Status.Phase = "Running"
			p.Status.ContainerStatuses = []*pb.ContainerStatus{{Name: "c", RestartCount: 3, State: &pb.ContainerState{Waiting: &pb.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
		}, want: "CrashLoopBackOff"},
		{name: "completed", pod: func(p *pb.Pod) {
			p.Status.Phase = "Succeeded"
			p.Status.ContainerStatuses = []*pb.ContainerStatus{{Name: "c", State: &pb.ContainerState{Terminated: &pb.ContainerStateTerminated{Reason: "Completed"}}}}
		}, want: "Completed"},
		{name: "exit code", pod: func(p *pb.Pod) {
			p.Status.Phase = "Failed"
			p.Status.ContainerStatuses = []*pb.ContainerStatus{{Name: "c", State: &pb.ContainerState{Terminated: &pb.ContainerStateTerminated{ExitCode: 3}}}}
		}, want: "ExitCode:3"},
		{name: "terminating", pod: func(p *pb.Pod) {
			p.Status.Phase = "Running"
			p.Metadata.DeletionTimestamp = timestamppb.Now()
		}, want: "Terminating"},
		{name: "init waiting", pod: func(p *pb.Pod) {
			p.Spec.InitContainers = []*pb.Container{{Name: "i", Image: "x"}}
			p.Status.InitContainerStatuses = []*pb.ContainerStatus{{Name: "i", State: &pb.ContainerState{Waiting: &pb.ContainerStateWaiting{Reason: "ErrImagePull"}}}}
		}, want: "Init:ErrImagePull"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &pb.Pod{
				Metadata: &pb.ObjectMeta{Name: "x", Namespace: "default"},
				Spec:     &pb.PodSpec{Containers: []*pb.Container{{Name: "c", Image: "i"}}},
				Status:   &pb.PodStatus{Phase: "Pending"},
			}
			tt.pod(p)
			row := podRow(podFromPB(p, 1))
			if row[2] != tt.want {
				t.Errorf("status = %v, want %s", row[2], tt.want)
			}
		})
	}
}

// spec.priorityClassName goes through the Priority admission plugin: a known class sets the priority,
// an unknown one is 403 Forbidden with kube-apiserver's message.
func TestCreatePodPriorityClass(t *testing.T) {
	classes, err := convert.ParsePriorityClasses([]byte("kind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, func(c *Config) { c.PriorityClasses = classes }, false)
	spec := func(class string) string {
		return `spec={"priorityClassName":"` + class + `","containers":[{"name":"c","image":"nginx"}]}`
	}
	m := e.mustCreate("hi", spec("high"))
	if got := get(m, "spec", "priority"); got != float64(1000) {
		t.Errorf("priority = %v, want 1000", got)
	}
	resp, data := e.do("POST", "/api/v1/namespaces/default/pods", podJSON("nope", spec("gold")))
	st := decodeStatus(t, data)
	if resp.StatusCode != 403 || st.Reason != "Forbidden" || st.Message != `pods "nope" is forbidden: no PriorityClass with name gold was found` {
		t.Errorf("unknown class: %d %s %q", resp.StatusCode, st.Reason, st.Message)
	}
}

// Every pod command carries a de-duplication id of its request's own, so that a command whose
// acknowledgement was lost can be sent again, while two requests stay two commands.
func TestCommandsCarryTheirOwnIDs(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("p")
	for _, tier := range []string{"front", "back"} {
		patch := `{"metadata":{"labels":{"tier":"` + tier + `"}}}`
		if resp, data := e.do("PATCH", "/api/v1/namespaces/default/pods/p", patch, "Content-Type: application/merge-patch+json"); resp.StatusCode != 200 {
			t.Fatalf("patch: got %d %s", resp.StatusCode, data)
		}
	}
	if resp, data := e.do("DELETE", "/api/v1/namespaces/default/pods/p", ""); resp.StatusCode != 200 {
		t.Fatalf("delete: got %d %s", resp.StatusCode, data)
	}
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	seen := map[string]bool{}
	for i, m := range e.store.metas {
		op := e.store.commands[i].GetOp()
		if m.MsgID == "" || seen[m.MsgID] {
			t.Errorf("command %d (%s) has de-duplication id %q, want one of its own", i, op, m.MsgID)
		}
		seen[m.MsgID] = true
	}
	if len(seen) != 4 {
		t.Errorf("%d commands, want a create, two updates and a delete", len(seen))
	}
}
