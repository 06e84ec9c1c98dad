package intern

import (
	"hash/maphash"
	"slices"
)

// Table and Strings are tables that one cache owns (namespaces, node names, owners, labels,
// tolerations), for the values the process-wide table in intern.go does not cover. Unlike it, they
// forget their values when full.

// Table shares values by key. It forgets them all when it holds limit keys, so that values no
// object has any more do not pile up; the values already shared stay shared. The zero Table holds
// DefaultLimit keys. It is not safe for concurrent use.
type Table[V any] struct {
	m     map[string]V
	limit int
}

// DefaultLimit is the zero Table's.
const DefaultLimit = 1 << 16

// NewTable is a Table forgetting all at limit keys.
func NewTable[V any](limit int) *Table[V] { return &Table[V]{limit: limit} }

// Get is the shared value of key, made by make the first time; a value make reports not ok is
// returned, not kept.
func (t *Table[V]) Get(key string, make func() (V, bool)) (V, bool) {
	if v, ok := t.m[key]; ok {
		return v, true
	}
	v, ok := make()
	if !ok {
		return v, false
	}
	limit := t.limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	if t.m == nil || len(t.m) >= limit {
		t.m = map[string]V{}
	}
	t.m[key] = v
	return v, true
}

// GetBytes is Get(string(key), make), without making the string when the table holds the key.
func (t *Table[V]) GetBytes(key []byte, make func() (V, bool)) (V, bool) {
	if v, ok := t.m[string(key)]; ok {
		return v, true
	}
	return t.Get(string(key), make)
}

// Len is how many keys the table holds.
func (t *Table[V]) Len() int { return len(t.m) }

// Strings shares equal strings.
type Strings struct{ t Table[string] }

// NewStrings is a Strings forgetting all at limit strings.
func NewStrings(limit int) *Strings { return &Strings{t: Table[string]{limit: limit}} }

// Get is the shared string equal to s.
func (s *Strings) Get(v string) string {
	if v == "" {
		return ""
	}
	shared, _ := s.t.Get(v, func() (string, bool) { return v, true })
	return shared
}

// Bytes is Get(string(b)), without making the string when the table holds it already.
func (s *Strings) Bytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if v, ok := s.t.m[string(b)]; ok {
		return v
	}
	return s.Get(string(b))
}

// StringSlices shares equal string slices (a pod's sorted labels, a watch cache's field values), by
// a hash of their contents checked equal. Like Table it forgets all at its limit. It is not safe for
// concurrent use.
type StringSlices struct {
	seed  maphash.Seed
	m     map[uint64][]string
	limit int
}

// NewStringSlices is a StringSlices forgetting all at limit slices.
func NewStringSlices(limit int) *StringSlices {
	return &StringSlices{seed: maphash.MakeSeed(), limit: limit}
}

// Get is the shared slice equal to s: s's own copy the first time, or when another slice of the
// same hash is shared. The result is read-only.
func (t *StringSlices) Get(s []string) []string {
	var h maphash.Hash
	h.SetSeed(t.seed)
	for _, v := range s {
		h.WriteString(v)
		h.WriteByte(0)
	}
	sum := h.Sum64()
	shared, ok := t.m[sum]
	if ok && slices.Equal(shared, s) {
		return shared
	}
	own := slices.Clone(s)
	if ok {
		return own
	}
	limit := t.limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	if t.m == nil || len(t.m) >= limit {
		t.m = map[uint64][]string{}
	}
	t.m[sum] = own
	return own
}
