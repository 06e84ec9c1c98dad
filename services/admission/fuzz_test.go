package admission

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/internal/convert"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The fuzz targets cover what a client's bytes reach before anything is stored: body decoding, the
// three patch types, selectors, resourceVersion and the Accept header. `make fuzz` runs each briefly;
// crashers found are kept under testdata/fuzz as regression seeds.

const fuzzPodJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default","labels":{"app":"web"},"annotations":{"a":"b"}},` +
	`"spec":{"containers":[{"name":"c","image":"nginx","ports":[{"containerPort":80}],"env":[{"name":"E","value":"v"}],` +
	`"resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}],"tolerations":[{"key":"k","operator":"Exists"}]}}`

const fuzzPodYAML = `apiVersion: v1
kind: Pod
metadata:
  name: p
  labels: {app: web}
spec:
  containers:
  - name: c
    image: nginx
    resources: {limits: {cpu: "1", memory: 1Gi}}
  nodeSelector: {disk: ssd}
`

// bodyContentTypes are the media types a create or update body comes in (the fuzzer picks one).
var bodyContentTypes = []string{"application/json", "application/yaml", contentTypeProtobuf}

// FuzzDecodePod decodes a body as the create path does, then defaults, validates, converts to the
// stored form and back: nothing may panic, and a valid pod's stored form must survive the round trip.
func FuzzDecodePod(f *testing.F) {
	f.Add([]byte(fuzzPodJSON), uint8(0), false)
	f.Add([]byte(fuzzPodJSON), uint8(0), true)
	f.Add([]byte(fuzzPodYAML), uint8(1), false)
	f.Add([]byte(fuzzPodYAML), uint8(1), true)
	f.Add([]byte("a: 1\na: 2\n"), uint8(1), true)
	f.Add([]byte(`{"spec":{"containers":[{"name":"c","image":"x","resources":{"requests":{"cpu":"1e100"}}}]}}`), uint8(0), false)
	f.Add([]byte("k8s\x00\n\x0c\n\x02v1\x12\x03Pod\x12\x00"), uint8(2), false)
	f.Fuzz(func(t *testing.T, data []byte, ct uint8, strict bool) {
		contentType := bodyContentTypes[int(ct)%len(bodyContentTypes)]
		js, err := toJSON(data, contentType, strict, podKind)
		if err != nil {
			requireStatus(t, err)
			return
		}
		mode := validationWarn
		if strict {
			mode = validationStrict
		}
		pod := &corev1.Pod{}
		if _, err := decodeStrict(js, mode, podKind, pod); err != nil {
			requireStatus(t, err)
			return
		}
		_ = checkTypeMeta(pod.GetObjectKind(), podKind)
		if pod.Namespace == "" {
			pod.Namespace = "default"
		}
		_ = (*convert.PriorityClasses)(nil).AdmitPod(pod)
		convert.DefaultPod(pod)
		pod.UID = types.UID("0b7a6c1e-1d2f-4c3b-9a8e-7f6e5d4c3b2a")
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: convert.QOSClass(pod)}
		valid := len(convert.ValidatePod(pod)) == 0
		p, _ := convert.PodToPB(pod)
		data, err = proto.Marshal(p)
		if err != nil {
			t.Fatalf("marshal the stored form: %v", err)
		}
		stored := &pb.Pod{}
		if err := proto.Unmarshal(data, stored); err != nil {
			t.Fatalf("unmarshal the stored form: %v", err)
		}
		back := convert.PodFromPB(stored, 7)
		if _, err := json.Marshal(back); err != nil {
			t.Fatalf("encode the served pod: %v", err)
		}
		if !valid {
			return
		}
		if errs := convert.ValidatePod(back); len(errs) > 0 {
			t.Fatalf("a valid pod is invalid once stored: %v", errs)
		}
		again, _ := convert.PodToPB(back)
		if !proto.Equal(p, again) {
			t.Fatalf("stored form changed by a round trip:\n%v\n%v", p, again)
		}
	})
}

// FuzzPatchPod applies a patch of each type to a stored pod as PATCH does: nothing may panic, errors
// are Statuses, and no result is over the object limit.
func FuzzPatchPod(f *testing.F) {
	f.Add(uint8(0), []byte(`[{"op":"add","path":"/metadata/labels/x","value":"y"},{"op":"copy","from":"/metadata/labels","path":"/metadata/annotations/z"}]`))
	f.Add(uint8(0), []byte(doublingPatch(40)))
	f.Add(uint8(0), []byte(`[{"op":"move","from":"/spec/containers/0","path":"/spec/containers/-"},{"op":"test","path":"/kind","value":"Pod"}]`))
	f.Add(uint8(1), []byte(`{"metadata":{"labels":{"app":null,"x":"y"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`))
	f.Add(uint8(2), []byte(`{"spec":{"containers":[{"name":"c","image":"busybox"}],"$setElementOrder/containers":[{"name":"c"}]}}`))
	f.Add(uint8(2), []byte(`{"metadata":{"labels":{"$patch":"replace","a":"b"}},"spec":{"tolerations":[{"$patch":"delete","key":"k"}]}}`))
	f.Add(uint8(2), []byte(`{"$retainKeys":["spec"],"spec":{"$deleteFromPrimitiveList/finalizers":["x"]}}`))
	types := []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"}
	lim := Limits{}.withDefaults()
	f.Fuzz(func(t *testing.T, kind uint8, patch []byte) {
		apply, err := patcherWith(lim, types[int(kind)%len(types)], patch, corev1.Pod{}, grPods)
		if err != nil {
			requireStatus(t, err)
			return
		}
		out, err := apply([]byte(fuzzPodJSON))
		if err != nil {
			requireStatus(t, err)
			return
		}
		if len(out) > lim.MaxObjectBytes {
			t.Fatalf("patched object of %d bytes over the limit", len(out))
		}
		pod := &corev1.Pod{}
		if _, err := decodeStrict(out, validationWarn, podKind, pod); err != nil {
			requireStatus(t, err)
		}
	})
}

// FuzzSelectors parses label and field selectors as LIST and WATCH do and matches a pod with them.
func FuzzSelectors(f *testing.F) {
	for _, s := range [][2]string{
		{"app=web", "metadata.name=p"},
		{"app in (web,db),!canary,tier notin (x)", "spec.nodeName!=,status.phase==Running"},
		{"a.b/c-d_e", "metadata.namespace=default,spec.schedulerName=x"},
		{"x>1,y<2", `metadata.name=a\,b`},
		{"!", "=,=="},
		{"app=(", "unknown.field=x"},
	} {
		f.Add(s[0], s[1])
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal([]byte(fuzzPodJSON), pod); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, label, field string) {
		m, err := newMatcher(url.Values{"labelSelector": {label}, "fieldSelector": {field}}, podKind)
		if err != nil {
			requireStatus(t, err)
			return
		}
		_ = m.matches(podKind, pod)
		_ = m.fieldValue("metadata.name")
		_ = eventFilter("default", m)
	})
}

// FuzzResourceVersion parses resourceVersion parameters: a version is a revision, and what parses
// prints back the same.
func FuzzResourceVersion(f *testing.F) {
	for _, s := range []string{"", "0", "1", "18446744073709551615", "18446744073709551616", "-1", "+1", " 1", "1e3", "0x10", "007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseRV(s)
		if err != nil {
			var se *apierrors.StatusError
			if !errors.As(err, &se) || se.Status().Code != http.StatusBadRequest {
				t.Fatalf("parseRV(%q): %v, want a 400 Status", s, err)
			}
			return
		}
		if s == "" {
			return
		}
		if again, err := parseRV(strconv.FormatUint(v, 10)); err != nil || again != v {
			t.Fatalf("parseRV(%q) = %d, which reparses as %d, %v", s, v, again, err)
		}
	})
}

// FuzzAccept parses Accept headers for the Table media type and answers a pod as GET would.
func FuzzAccept(f *testing.F) {
	for _, s := range [][2]string{
		{"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", ""},
		{"application/json;as=Table;g=meta.k8s.io;v=v1", "Object"},
		{"application/json;as=Table;g=meta.k8s.io;v=v1", "None"},
		{"application/vnd.kubernetes.protobuf, */*", ""},
		{";;;=,,as=Table", "Metadata"},
		{"application/json;as=Table;v=v1;g=meta.k8s.io;as=List", ""},
	} {
		f.Add(s[0], s[1])
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal([]byte(fuzzPodJSON), pod); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, accept, includeObject string) {
		req := request{table: parseTableAccept(accept, url.Values{"includeObject": {includeObject}})}
		rec := httptest.NewRecorder()
		writeObject(rec, http.StatusOK, req, podKind, pod)
		if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	})
}

// requireStatus fails unless err is a Kubernetes Status error of a client-error code.
func requireStatus(t *testing.T, err error) {
	t.Helper()
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		t.Fatalf("error is not a Status: %v", err)
	}
	if c := se.Status().Code; c < 400 || c >= 500 {
		t.Fatalf("status %d for a client's bytes: %v", c, err)
	}
}
