package main

import (
	"flag"

	"github.com/podbus/podbus/services/admission"
)

// apiLimits are the API's request limits as flags, named as kube-apiserver's.
type apiLimits struct {
	l                           admission.Limits
	inflight, mutating, watches int
}

func limitFlags(fs *flag.FlagSet) *apiLimits {
	a := &apiLimits{}
	fs.DurationVar(&a.l.RequestTimeout, "request-timeout", admission.DefaultRequestTimeout, "a request other than a watch or a log stream gets 504 after this")
	fs.IntVar(&a.inflight, "max-requests-inflight", admission.DefaultMaxRequestsInflight, "concurrent read-only requests, watches excepted (429 beyond; 0: no limit)")
	fs.IntVar(&a.mutating, "max-mutating-requests-inflight", admission.DefaultMaxMutatingRequestsInflight, "concurrent writes (429 beyond; 0: no limit)")
	fs.IntVar(&a.watches, "max-watches-per-user", admission.DefaultMaxWatchesPerUser, "concurrent watches and log streams of one user, or of one client address when anonymous (429 beyond; 0: no limit)")
	return a
}

// get returns the limits, 0 ("no limit" on the command line, as kube-apiserver's) as admission's -1.
func (a *apiLimits) get() admission.Limits {
	l := a.l
	unlimited := func(n int) int {
		if n <= 0 {
			return -1
		}
		return n
	}
	l.MaxRequestsInflight = unlimited(a.inflight)
	l.MaxMutatingRequestsInflight = unlimited(a.mutating)
	l.MaxWatchesPerUser = unlimited(a.watches)
	return l
}
