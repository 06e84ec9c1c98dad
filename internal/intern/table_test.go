package intern

import (
	"strings"
	"testing"
	"unsafe"
)

func TestStringsShare(t *testing.T) {
	s := NewStrings(3)
	a := s.Get(strings.Repeat("a", 2))
	b := s.Get(strings.Repeat("a", 2))
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("equal strings not shared")
	}
	if s.Get("") != "" {
		t.Errorf("empty string changed")
	}
	s.Get("b")
	s.Get("c")
	if s.t.Len() != 3 {
		t.Fatalf("table holds %d, want 3", s.t.Len())
	}
	s.Get("d") // full: forgets all
	if s.t.Len() != 1 {
		t.Errorf("table holds %d after filling up, want 1", s.t.Len())
	}
	if got := s.Get(strings.Repeat("a", 2)); got != "aa" {
		t.Errorf("Get after forgetting = %q", got)
	}
}

func TestTableMakesOnce(t *testing.T) {
	var tb Table[[]int]
	made := 0
	mk := func() ([]int, bool) { made++; return []int{made}, true }
	x, _ := tb.Get("k", mk)
	y, _ := tb.Get("k", mk)
	if made != 1 || &x[0] != &y[0] {
		t.Errorf("made %d times, shared %v", made, &x[0] == &y[0])
	}
	if _, ok := tb.Get("bad", func() ([]int, bool) { return nil, false }); ok {
		t.Errorf("a value made not ok is ok")
	}
	if _, ok := tb.Get("bad", func() ([]int, bool) { return []int{1}, true }); !ok || tb.Len() != 2 {
		t.Errorf("a value made not ok was kept")
	}
}

func TestStringSlices(t *testing.T) {
	s := NewStringSlices(2)
	buf := []string{"app", "web"}
	a := s.Get(buf)
	buf[1] = "db" // the caller's buffer is its own again
	if b := s.Get([]string{"app", "web"}); &a[0] != &b[0] || a[1] != "web" {
		t.Errorf("equal slices not shared: %v %v", a, b)
	}
	if d := s.Get(buf); d[1] != "db" || &d[0] == &a[0] {
		t.Errorf("another slice shared: %v", d)
	}
	if e := s.Get(nil); len(e) != 0 {
		t.Errorf("empty slice: %v", e)
	}
	// Full: the table forgets, and what it shared stays as it was.
	if f := s.Get([]string{"app", "web"}); f[1] != "web" || a[1] != "web" {
		t.Errorf("after forgetting: %v, %v", f, a)
	}
}

// Strings.Bytes gives the string Get gives, and allocates nothing for one the table holds.
func TestStringsBytes(t *testing.T) {
	s := NewStrings(8)
	b := []byte("node-1")
	v := s.Bytes(b)
	if v != "node-1" || s.Get("node-1") != v || s.Bytes(nil) != "" {
		t.Fatalf("Bytes(%q) = %q", b, v)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.Bytes(b) }); n != 0 {
		t.Errorf("%v allocations for a held string", n)
	}
}

func TestTableGetBytes(t *testing.T) {
	var tb Table[[]int]
	made := 0
	mk := func() ([]int, bool) { made++; return []int{made}, true }
	key := []byte("tolerations")
	x, _ := tb.GetBytes(key, mk)
	key[0] = 'T' // the table keeps its own copy of the key
	y, _ := tb.Get("tolerations", mk)
	if made != 1 || &x[0] != &y[0] {
		t.Fatalf("made %d times, shared %v", made, &x[0] == &y[0])
	}
	key[0] = 't'
	if n := testing.AllocsPerRun(100, func() { _, _ = tb.GetBytes(key, mk) }); n != 0 {
		t.Errorf("%v allocations for a held key", n)
	}
}
