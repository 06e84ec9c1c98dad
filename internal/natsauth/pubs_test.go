package natsauth

import (
	"slices"
	"testing"

	"github.com/podbus/podbus/bus"
)

// The services that act on pods hold the store's commands and events: the garbage collector deletes a
// deleted Deployment's pods, the DaemonSet and ReplicaSet controllers create and delete their own. A
// role that lost them stops them with no error but a permissions violation in the server's log.
func TestPodControllersPublishCommands(t *testing.T) {
	for _, tt := range []struct {
		role     string
		subjects []string
	}{
		{RoleAdmission, []string{bus.SubjPodCreate, bus.SubjPodUpdate, bus.SubjPodDelete, "event.default.web"}},
		{RoleControllers, []string{bus.SubjPodCreate, bus.SubjPodUpdate, bus.SubjPodDelete, "event.default.web"}},
		{RoleWorkloads, []string{bus.SubjPodCreate, bus.SubjPodUpdate, bus.SubjPodDelete, "event.default.web"}},
		{RoleNodeLife, []string{bus.SubjPodDelete}},
		{RoleNamespaces, []string{bus.SubjPodDelete}},
	} {
		p, err := Permissions(tt.role)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range tt.subjects {
			if !slices.ContainsFunc(p.PubAllow, func(f string) bool { return bus.SubjectMatches(f, s) }) {
				t.Errorf("%s may not publish %s", tt.role, s)
			}
		}
	}
}
