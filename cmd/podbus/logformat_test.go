package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLogFormat(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        string
		wantArgs   []string
		wantFormat string
		wantErr    bool
	}{
		{"none", []string{"--nodes", "3"}, "", []string{"--nodes", "3"}, "", false},
		{"env", []string{"--nodes", "3"}, "json", []string{"--nodes", "3"}, "json", false},
		{"flag wins", []string{"--log-format=text", "--nodes", "3"}, "json", []string{"--nodes", "3"}, "text", false},
		{"separate value anywhere", []string{"--nodes", "3", "-log-format", "json"}, "", []string{"--nodes", "3"}, "json", false},
		{"after --", []string{"--", "--log-format=json"}, "", []string{"--", "--log-format=json"}, "", false},
		{"missing value", []string{"--log-format"}, "", nil, "", true},
		{"unknown", []string{"--log-format=xml"}, "", nil, "", true},
		{"unknown env", nil, "logfmt", nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, format, err := logFormat(tt.args, tt.env)
			if tt.wantErr {
				if !errors.Is(err, errLogFormat) {
					t.Fatalf("err = %v, want errLogFormat", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantArgs, args); diff != "" || format != tt.wantFormat {
				t.Errorf("format %q, want %q; args (-want +got):\n%s", format, tt.wantFormat, diff)
			}
		})
	}
}

func TestNewLoggerJSON(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, "json", slog.LevelInfo).Info("hello", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "hello" {
		t.Errorf("not a JSON record: %q (%v)", buf.String(), err)
	}
}
