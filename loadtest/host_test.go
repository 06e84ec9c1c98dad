package loadtest

import "testing"

func TestParseTHP(t *testing.T) {
	tests := []struct{ in, want string }{
		{"always [madvise] never\n", "madvise"},
		{"[always] madvise never\n", "always"},
		{"always madvise [never]", "never"},
		{"", ""},
		{"always madvise never", ""},
		{"[]", ""},
	}
	for _, tt := range tests {
		if got := parseTHP(tt.in); got != tt.want {
			t.Errorf("parseTHP(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
