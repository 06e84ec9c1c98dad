package metrics

import (
	"encoding/json"
	"expvar"
	"runtime"
	"testing"
)

// The runtime's CPU classes are read and exported: after a collection, some CPU went to the
// collector, and no class exceeds the total.
func TestCPUClasses(t *testing.T) {
	runtime.GC()
	c := ReadCPUClasses()
	if c.Total <= 0 || c.GC <= 0 {
		t.Fatalf("ReadCPUClasses() = %+v, want a total and some GC time after runtime.GC", c)
	}
	if c.GC > c.Total || c.Idle > c.Total {
		t.Errorf("ReadCPUClasses() = %+v: a class above the total", c)
	}
	v := expvar.Get("cpu_classes")
	if v == nil {
		t.Fatal("cpu_classes is not exported")
	}
	var got CPUClasses
	if err := json.Unmarshal([]byte(v.String()), &got); err != nil {
		t.Fatalf("cpu_classes %s: %v", v.String(), err)
	}
	if got.Total < c.Total || got.GC < c.GC {
		t.Errorf("exported %+v, earlier read %+v: the counts went back", got, c)
	}
}
