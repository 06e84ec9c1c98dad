package admission

import (
	"errors"
	"fmt"
	"net/http"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// jsonPatchMaxCopyBytes bounds what the "copy" operations of one JSON patch may add, as
// kube-apiserver's JSONPatchMaxCopyBytes does (its default: the request body limit). Without it each
// copy of the document into itself doubles it.
const jsonPatchMaxCopyBytes = DefaultMaxBodyBytes

func init() {
	// The library keeps its limit in a package variable, which kube-apiserver sets the same way.
	if jsonpatch.AccumulatedCopySizeLimit == 0 {
		jsonpatch.AccumulatedCopySizeLimit = jsonPatchMaxCopyBytes
	}
}

// patcher returns the function applying a PATCH body of the given content type; dataStruct (a
// corev1.Pod{} or corev1.Node{}) gives strategic merge its patch strategies. A JSON patch of more than
// Limits.MaxJSONPatchOperations operations is 413, one that copies more than jsonPatchMaxCopyBytes is
// 413 too, and a result over Limits.MaxObjectBytes is 413 whatever the patch type.
func (s *Service) patcher(contentType string, patch []byte, dataStruct any, gr schema.GroupResource) (func([]byte) ([]byte, error), error) {
	return patcherWith(s.limits.l, contentType, patch, dataStruct, gr)
}

func patcherWith(l Limits, contentType string, patch []byte, dataStruct any, gr schema.GroupResource) (func([]byte) ([]byte, error), error) {
	bounded := func(out []byte) ([]byte, error) {
		if len(out) > l.MaxObjectBytes {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the patched object is %d bytes, the limit is %d", len(out), l.MaxObjectBytes))
		}
		return out, nil
	}
	switch types.PatchType(contentType) {
	case types.StrategicMergePatchType:
		return func(cur []byte) ([]byte, error) {
			out, err := strategicpatch.StrategicMergePatch(cur, patch, dataStruct)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			return bounded(out)
		}, nil
	case types.MergePatchType:
		return func(cur []byte) ([]byte, error) {
			out, err := jsonpatch.MergePatch(cur, patch)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			return bounded(out)
		}, nil
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if len(p) > l.MaxJSONPatchOperations {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", l.MaxJSONPatchOperations, len(p)))
		}
		return func(cur []byte) ([]byte, error) {
			out, err := applyJSONPatch(p, cur)
			var copyErr *jsonpatch.AccumulatedCopySizeError
			if errors.As(err, &copyErr) {
				// kube-apiserver hides this message behind its generic 422; it says what to fix.
				return nil, apierrors.NewRequestEntityTooLargeError(copyErr.Error())
			}
			if err != nil {
				return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", gr, "", err.Error(), 0, false)
			}
			return bounded(out)
		}, nil
	default:
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s",
				types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType),
		}}
	}
}

// errPatchPanicked stands for a JSON patch the library could not apply without panicking (a "test"
// without a value on the whole document is one): it is the request's fault, not the server's.
var errPatchPanicked = errors.New("the JSON patch could not be applied to the object")

// applyJSONPatch is p.Apply, with a panic of the library turned into errPatchPanicked.
func applyJSONPatch(p jsonpatch.Patch, cur []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, errPatchPanicked
		}
	}()
	return p.Apply(cur)
}
