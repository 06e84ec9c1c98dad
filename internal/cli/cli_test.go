package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

// The environment fills what the command line leaves, never more; a bad value names its variable.
func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantDur time.Duration
		wantErr bool
	}{
		{name: "default", want: "a"},
		{name: "env", env: map[string]string{"PODBUS_NATS_URL": "b", "PODBUS_TIMEOUT": "3s"}, want: "b", wantDur: 3 * time.Second},
		{name: "flag wins", args: []string{"--nats-url", "c"}, env: map[string]string{"PODBUS_NATS_URL": "b"}, want: "c"},
		{name: "bad value", env: map[string]string{"PODBUS_TIMEOUT": "soon"}, want: "a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			url := fs.String("nats-url", "a", "")
			timeout := fs.Duration("timeout", 0, "")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := ApplyEnv(fs, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if (err != nil) != tt.wantErr || (err != nil && !strings.Contains(err.Error(), "PODBUS_TIMEOUT")) {
				t.Fatalf("err %v, want error %v naming PODBUS_TIMEOUT", err, tt.wantErr)
			}
			if *url != tt.want || *timeout != tt.wantDur {
				t.Errorf("got %q %s, want %q %s", *url, *timeout, tt.want, tt.wantDur)
			}
		})
	}
}

// Parse reads the process environment; the flags are listed with their variables.
func TestParse(t *testing.T) {
	t.Setenv("PODBUS_PODS", "7")
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	pods := fs.Int("pods", 1, "pods to submit")
	if err := Parse(fs, nil); err != nil || *pods != 7 {
		t.Fatalf("Parse: %v, pods %d; want 7", err, *pods)
	}
	var out bytes.Buffer
	PrintFlags(&out, fs)
	if !strings.Contains(out.String(), "--pods int") || !strings.Contains(out.String(), "$PODBUS_PODS") {
		t.Errorf("flags %q: want --pods int and $PODBUS_PODS", out.String())
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--nats", "x", "-h"}, true},
		{[]string{"--help"}, true},
		{[]string{"--", "-h"}, false},
	}
	for _, tt := range tests {
		if got := Help(tt.args); got != tt.want {
			t.Errorf("Help(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}
