package main

import (
	"flag"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/services/admission"
)

func TestLimitFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want admission.Limits
	}{
		{"defaults", nil, admission.Limits{RequestTimeout: time.Minute, MaxRequestsInflight: 400, MaxMutatingRequestsInflight: 200, MaxWatchesPerUser: 100}},
		{"set", []string{"--request-timeout=5s", "--max-requests-inflight=7", "--max-mutating-requests-inflight=3", "--max-watches-per-user=2"},
			admission.Limits{RequestTimeout: 5 * time.Second, MaxRequestsInflight: 7, MaxMutatingRequestsInflight: 3, MaxWatchesPerUser: 2}},
		{"zero is no limit", []string{"--max-requests-inflight=0", "--max-mutating-requests-inflight=0", "--max-watches-per-user=0"},
			admission.Limits{RequestTimeout: time.Minute, MaxRequestsInflight: -1, MaxMutatingRequestsInflight: -1, MaxWatchesPerUser: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			l := limitFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, l.get(), cmp.AllowUnexported(admission.Limits{})); d != "" {
				t.Errorf("limits (-want +got):\n%s", d)
			}
		})
	}
}
