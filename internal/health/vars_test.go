package health

import (
	"encoding/json"
	"expvar"
	"net/http/httptest"
	"testing"
)

// The command line (expvar's "cmdline", which holds flags such as --tokens) is never served; the
// other variables are.
func TestVarsHandlerHidesCmdline(t *testing.T) {
	// A process publishes a name once: a second run of the test (-count) takes the first run's variable.
	v, _ := expvar.Get("health_test_counter").(*expvar.Int)
	if v == nil {
		v = expvar.NewInt("health_test_counter")
	}
	v.Set(7)
	for name, h := range map[string]func() *httptest.ResponseRecorder{
		"health port": func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			VarsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/vars", nil))
			return rec
		},
		"debug handler": func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			DebugHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/vars", nil))
			return rec
		},
	} {
		t.Run(name, func(t *testing.T) {
			rec := h()
			var vars map[string]json.RawMessage
			if err := json.Unmarshal(rec.Body.Bytes(), &vars); err != nil {
				t.Fatalf("decode %s: %v", rec.Body, err)
			}
			if _, ok := vars["cmdline"]; ok {
				t.Errorf("cmdline served: %s", vars["cmdline"])
			}
			if string(vars["health_test_counter"]) != "7" {
				t.Errorf("health_test_counter = %s, want 7", vars["health_test_counter"])
			}
			if _, ok := vars["memstats"]; !ok {
				t.Error("memstats missing")
			}
		})
	}
}
