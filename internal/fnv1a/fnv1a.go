// Package fnv1a is 64-bit FNV-1a over strings, as hash/fnv's New64a computes it, without the hash
// object and byte-slice conversions that make hash/fnv allocate: for hashes taken per pod.
package fnv1a

// Offset64 is the hash of nothing: the value to start from.
const Offset64 uint64 = 14695981039346656037

const prime64 = 1099511628211

// AddString is h followed by the bytes of s.
func AddString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return h
}

// AddByte is h followed by b.
func AddByte(h uint64, b byte) uint64 {
	return (h ^ uint64(b)) * prime64
}
