package chaos

import (
	"testing"

	"github.com/podbus/podbus/audit/check"
)

// Only a history whose every violation is of a known kind settles; with no known kinds none does.
func TestOnlyKnown(t *testing.T) {
	surge, lost := check.Violation{Kind: check.KindSurge}, check.Violation{Kind: check.KindOrphan}
	for _, tt := range []struct {
		name  string
		vs    []check.Violation
		known []string
		want  bool
	}{
		{"all known", []check.Violation{surge, surge}, []string{check.KindSurge}, true},
		{"one other", []check.Violation{surge, lost}, []string{check.KindSurge}, false},
		{"none known", []check.Violation{surge}, nil, false},
	} {
		if got := onlyKnown(tt.vs, tt.known); got != tt.want {
			t.Errorf("%s: onlyKnown = %v, want %v", tt.name, got, tt.want)
		}
	}
}
