package fnv1a

import (
	"hash/fnv"
	"testing"
)

// The hashes are hash/fnv's: ids and seeds made from them must not change with the implementation.
func TestSameAsHashFNV(t *testing.T) {
	for _, parts := range [][]string{{}, {""}, {"a"}, {"u1", "web", "Scheduled"}, {"\x00\xff", "é"}} {
		want := fnv.New64a()
		got := Offset64
		for _, s := range parts {
			_, _ = want.Write([]byte(s))
			_, _ = want.Write([]byte{0})
			got = AddByte(AddString(got, s), 0)
		}
		if got != want.Sum64() {
			t.Errorf("%q: %x, want %x", parts, got, want.Sum64())
		}
	}
}
