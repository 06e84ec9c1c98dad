package health

import (
	"expvar"
	"fmt"
	"net/http"
)

// hiddenVars are expvar variables never served: expvar publishes the command line as "cmdline",
// and flags such as --tokens carry secrets.
var hiddenVars = map[string]bool{"cmdline": true}

// VarsHandler serves /debug/vars as expvar.Handler does, without hiddenVars.
func VarsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprint(w, "{\n")
		first := true
		expvar.Do(func(kv expvar.KeyValue) {
			if hiddenVars[kv.Key] {
				return
			}
			if !first {
				fmt.Fprint(w, ",\n")
			}
			first = false
			fmt.Fprintf(w, "%q: %s", kv.Key, kv.Value)
		})
		fmt.Fprint(w, "\n}\n")
	})
}

// DebugHandler is http.DefaultServeMux (pprof, registered by importers of net/http/pprof) with
// /debug/vars served by VarsHandler.
func DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/debug/vars", VarsHandler())
	mux.Handle("/", http.DefaultServeMux)
	return mux
}
