package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Field validation modes (?fieldValidation=), as in kube-apiserver. The default is Warn.
const (
	validationStrict = "Strict"
	validationWarn   = "Warn"
	validationIgnore = "Ignore"
)

func fieldValidation(r *http.Request) (string, error) {
	switch v := r.URL.Query().Get("fieldValidation"); v {
	case "":
		return validationWarn, nil
	case validationStrict, validationWarn, validationIgnore:
		return v, nil
	default:
		return "", badRequest("fieldValidation must be one of Ignore, Warn or Strict, got %q", v)
	}
}

// readBody reads the whole request body, bounded by MaxBodyBytes (413 beyond).
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	data, err := io.ReadAll(body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", s.cfg.MaxBodyBytes))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, errBodyTimeout
	}
	if err != nil {
		return nil, badRequest("read request body: %v", err)
	}
	return data, nil
}

// toJSON turns a JSON, YAML or Kubernetes protobuf body into JSON. Strict YAML conversion rejects
// duplicate keys.
func toJSON(data []byte, contentType string, strict bool, k *kind) ([]byte, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == contentTypeProtobuf {
		return protobufToJSON(data, k)
	}
	if !strings.Contains(mt, "yaml") {
		return data, nil
	}
	conv := yaml.YAMLToJSON
	if strict {
		conv = yaml.YAMLToJSONStrict
	}
	out, err := conv(data)
	if err != nil {
		return nil, badRequest("%s in version %q cannot be handled as a %s: yaml: %v", k.kind, k.version, k.kind, err)
	}
	return out, nil
}

const contentTypeProtobuf = "application/vnd.kubernetes.protobuf"

// protobufMagic starts every Kubernetes protobuf message, followed by a runtime.Unknown envelope.
var protobufMagic = []byte("k8s\x00")

// protobufToJSON decodes a protobuf body, which kubectl's typed clients send (kubectl create configmap,
// kubectl run), into the kind's object and returns its JSON: decoding then goes on as for JSON, so
// unknown fields cannot occur.
func protobufToJSON(data []byte, k *kind) ([]byte, error) {
	obj := k.newObject()
	u, ok := obj.(interface{ Unmarshal([]byte) error })
	if !ok {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
		}}
	}
	if !bytes.HasPrefix(data, protobufMagic) {
		return nil, badRequest("%s in version %q cannot be handled as a %s: provided data does not appear to be a protobuf message, expected prefix %v", k.kind, k.version, k.kind, protobufMagic)
	}
	var env runtime.Unknown
	if err := env.Unmarshal(data[len(protobufMagic):]); err != nil {
		return nil, badRequest("%s in version %q cannot be handled as a %s: %v", k.kind, k.version, k.kind, err)
	}
	if err := u.Unmarshal(env.Raw); err != nil {
		return nil, badRequest("%s in version %q cannot be handled as a %s: %v", k.kind, k.version, k.kind, err)
	}
	if env.APIVersion != "" || env.Kind != "" {
		obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(env.APIVersion, env.Kind))
	}
	return json.Marshal(obj)
}

// decodeStrict decodes JSON into obj following the field validation mode: Strict rejects unknown and
// duplicate fields (400), Warn returns them as warnings, Ignore drops them.
func decodeStrict(data []byte, mode string, k *kind, obj any) (warnings []string, err error) {
	strictErrs, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, badRequest("%s in version %q cannot be handled as a %s: %v", k.kind, k.version, k.kind, err)
	}
	if len(strictErrs) == 0 || mode == validationIgnore {
		return nil, nil
	}
	msgs := make([]string, len(strictErrs))
	for i, e := range strictErrs {
		msgs[i] = e.Error()
	}
	if mode == validationStrict {
		return nil, badRequest("%s in version %q cannot be handled as a %s: strict decoding error: %s", k.kind, k.version, k.kind, strings.Join(msgs, ", "))
	}
	return msgs, nil
}

// checkTypeMeta rejects a body of another kind or version.
func checkTypeMeta(ok schema.ObjectKind, k *kind) error {
	gvk := ok.GroupVersionKind()
	if v := gvk.GroupVersion().String(); v != "" && v != k.apiVersion() {
		return badRequest("the API version in the data (%s) does not match the expected API version (%s)", v, k.apiVersion())
	}
	if gvk.Kind != "" && gvk.Kind != k.kind {
		return badRequest("the kind in the data (%s) does not match the expected kind (%s)", gvk.Kind, k.kind)
	}
	return nil
}

// addWarnings sends warnings as HTTP Warning headers, which kubectl prints as "Warning: ...".
func addWarnings(w http.ResponseWriter, warnings []string) {
	for _, msg := range warnings {
		w.Header().Add("Warning", "299 - "+strconv.Quote(msg))
	}
}
