package admission

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A request NATS gave no answer to is a 504 Timeout, as kube-apiserver answers an etcd timeout: the
// client learns that a change may still be carried out. JetStream turned off is 503, other failures
// 500; Statuses stay theirs.
func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantCode   int32
		wantReason metav1.StatusReason
	}{
		{name: "a Status", err: apierrors.NewNotFound(grPods, "p"), wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound},
		{name: "no answer in time", err: fmt.Errorf("update deployments d: %w", nats.ErrTimeout), wantCode: http.StatusGatewayTimeout, wantReason: metav1.StatusReasonTimeout},
		{name: "answer dropped", err: fmt.Errorf("delete: %w", nats.ErrDisconnected), wantCode: http.StatusGatewayTimeout, wantReason: metav1.StatusReasonTimeout},
		{name: "leader being chosen", err: &jetstream.APIError{Code: 503, ErrorCode: 10008}, wantCode: http.StatusGatewayTimeout, wantReason: metav1.StatusReasonTimeout},
		{name: "JetStream off", err: fmt.Errorf("get: %w", &jetstream.APIError{Code: 503, ErrorCode: 10039}), wantCode: http.StatusServiceUnavailable, wantReason: metav1.StatusReasonServiceUnavailable},
		{name: "anything else", err: errors.New("encode: broken"), wantCode: http.StatusInternalServerError, wantReason: metav1.StatusReasonInternalError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := statusOf(tc.err)
			if st.Code != tc.wantCode || st.Reason != tc.wantReason || st.Kind != "Status" {
				t.Errorf("statusOf(%v) = %d %s (kind %q), want %d %s", tc.err, st.Code, st.Reason, st.Kind, tc.wantCode, tc.wantReason)
			}
		})
	}
}
