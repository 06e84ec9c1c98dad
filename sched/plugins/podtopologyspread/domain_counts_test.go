package podtopologyspread

import (
	"fmt"
	"maps"
	"testing"
)

// domainCounts must add up like a map, below and beyond the list's size (zones, then hostnames).
func TestDomainCounts(t *testing.T) {
	for _, domains := range []int{1, 10, maxListedDomains, maxListedDomains + 1, 500} {
		var d domainCounts
		want := map[string]int{}
		for i := range 3 * domains {
			v := fmt.Sprintf("d%d", (i*7)%domains)
			d.add(v, i%3)
			want[v] += i % 3
		}
		got := map[string]int{"other": 5}
		d.into(got)
		want["other"] = 5
		if !maps.Equal(got, want) {
			t.Errorf("%d domains: counts differ from a map's", domains)
		}
	}
}

// into adds the counts to m.
func (d *domainCounts) into(m map[string]int) {
	for i, v := range d.vals {
		m[v] += d.cnts[i]
	}
	for v, c := range d.m {
		m[v] += c
	}
}
