package admission

import (
	"net/url"
	"testing"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

func TestStreamOptions(t *testing.T) {
	tests := []struct {
		name, query string
		want        remotecommand.Options
		wantErr     bool
	}{
		{"kubectl exec", "stdout=true&stderr=true", remotecommand.Options{Stdout: true, Stderr: true}, false},
		{"a terminal merges stderr", "stdin=true&stdout=true&stderr=true&tty=true", remotecommand.Options{Stdin: true, Stdout: true, TTY: true}, false},
		{"no stream", "tty=true", remotecommand.Options{}, true},
		{"not a bool", "stdin=yes", remotecommand.Options{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			got, err := streamOptions(q)
			if (err != nil) != tt.wantErr {
				t.Fatalf("streamOptions(%q) error %v, want error %v", tt.query, err, tt.wantErr)
			}
			if err == nil && *got != tt.want {
				t.Errorf("streamOptions(%q) = %+v, want %+v", tt.query, *got, tt.want)
			}
		})
	}
}
