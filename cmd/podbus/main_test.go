package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// help in any of its spellings prints the commands and exits 0; an unknown command names itself and
// exits 2, as a usage error; version names the build.
func TestHelpAndVersion(t *testing.T) {
	if arg, ok := os.LookupEnv("PODBUS_MAIN_TEST_ARG"); ok {
		os.Args = []string{"podbus", arg}
		main()
		return
	}
	tests := []struct {
		arg  string
		code int
		want string
	}{
		{"help", 0, "usage: podbus <command>"},
		{"-h", 0, "usage: podbus <command>"},
		{"--help", 0, "loadtest"},
		{"nope", 2, `unknown command "nope"`},
		{"version", 0, "podbus "},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelpAndVersion$")
			cmd.Env = append(os.Environ(), "PODBUS_MAIN_TEST_ARG="+tt.arg)
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(string(out), tt.want) {
				t.Errorf("podbus %s: exit %d, %q; want exit %d and %q", tt.arg, code, out, tt.code, tt.want)
			}
		})
	}
}
