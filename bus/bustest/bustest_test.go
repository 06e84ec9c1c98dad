package bustest

import "testing"

func TestSubjectMatches(t *testing.T) {
	tests := []struct {
		filter, subject string
		want            bool
	}{
		{"pod.bound.n1", "pod.bound.n1", true},
		{"pod.bound.*", "pod.bound.n1", true},
		{"pod.bound.*", "pod.bound", false},
		{"pod.bound.*", "pod.bound.n1.x", false},
		{"pod.>", "pod.bound.n1", true},
		{"pod.>", "pod", false},
		{"dead.pod.cmd.create", "dead.pod.cmd.delete", false},
	}
	for _, tt := range tests {
		if got := SubjectMatches(tt.filter, tt.subject); got != tt.want {
			t.Errorf("SubjectMatches(%q, %q) = %v, want %v", tt.filter, tt.subject, got, tt.want)
		}
	}
}
