package agent

import (
	"fmt"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// ReasonPrivilegedDisallowed is the status reason of a pod rejected for asking for a privileged
// container on an agent started without AllowPrivileged.
const ReasonPrivilegedDisallowed = "PrivilegedDisallowed"

// admitPrivileged refuses pods with a privileged container unless the node allows them.
func (a *Agent) admitPrivileged(pod *pb.Pod) (reason, message string) {
	if a.cfg.AllowPrivileged {
		return "", ""
	}
	spec := pod.GetSpec()
	for _, c := range append(append([]*pb.Container{}, spec.GetInitContainers()...), spec.GetContainers()...) {
		if c.GetSecurityContext().GetPrivileged() {
			return ReasonPrivilegedDisallowed, fmt.Sprintf("Pod was rejected: privileged container %q is not allowed on this node (its agent runs without --allow-privileged)", c.GetName())
		}
	}
	return "", ""
}
