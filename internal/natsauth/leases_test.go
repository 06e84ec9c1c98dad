package natsauth

import (
	"slices"
	"testing"

	"github.com/podbus/podbus/bus"
)

// The status service alone renews node leases; no other service role may write them.
func TestLeasesWrittenByStatusOnly(t *testing.T) {
	renew := bus.SubjKV(bus.BucketLeases) + bus.LeaseKey("n1")
	read := "$JS.API.DIRECT.GET." + bus.KVStream(bus.BucketLeases)
	for _, role := range ServiceRoles {
		if role == RoleAdmin {
			continue
		}
		p, err := Permissions(role)
		if err != nil {
			t.Fatal(err)
		}
		allowed := func(s string) bool {
			return slices.ContainsFunc(p.PubAllow, func(f string) bool { return bus.SubjectMatches(f, s) }) &&
				!slices.ContainsFunc(p.PubDeny, func(f string) bool { return bus.SubjectMatches(f, s) })
		}
		if got, want := allowed(renew), role == RoleStatus; got != want {
			t.Errorf("%s may write leases: %v, want %v", role, got, want)
		}
		if role == RoleStatus && !allowed(read) {
			t.Errorf("%s may not read leases", role)
		}
	}
}
