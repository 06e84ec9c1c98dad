package admission

import (
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podbus/podbus/bus"
)

// Entries keep their own copy of the stored value, and objects with equal labels share one set.
func TestCacheEntriesShareLabels(t *testing.T) {
	c := fedCache(t)
	buf := mustMarshal(t, smallPod("default", "a", "web"))
	c.apply(bus.PodKey("default", "a"), jetstream.KeyValuePut, buf, 1)
	c.putPod(t, "b", "web", 2)
	c.putPod(t, "c", "db", 3)
	for i := range buf {
		buf[i] = 0 // the message buffer is reused or freed
	}
	a, b, d := c.objects["default/a"], c.objects["default/b"], c.objects["default/c"]
	if reflect.ValueOf(a.labels).UnsafePointer() != reflect.ValueOf(b.labels).UnsafePointer() {
		t.Error("pods with equal labels hold separate sets")
	}
	if d.labels["app"] != "db" || a.labels["app"] != "web" {
		t.Errorf("labels %v and %v, want app=web and app=db", a.labels, d.labels)
	}
	if o, err := c.get("default/a"); err != nil || objectMeta(o).Name != "a" {
		t.Errorf("get after the buffer changed: %v, %v", o, err)
	}
}

func everything() matcher { return matcher{label: labels.Everything(), field: fields.Everything()} }
