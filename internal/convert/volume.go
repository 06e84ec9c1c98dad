package convert

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// volumeToPB keeps the volume's source in the API's JSON: the agent that mounts it is its only reader.
func volumeToPB(v corev1.Volume) *pb.Volume {
	out := &pb.Volume{Name: v.Name, EmptyDir: v.EmptyDir != nil}
	if v.VolumeSource != (corev1.VolumeSource{}) {
		out.Source, _ = json.Marshal(v.VolumeSource) // the API's own types always marshal
	}
	return out
}

// VolumeFromPB is the API volume of a stored one (a source that does not decode: an emptyDir, as
// volumes stored before sources were kept).
func VolumeFromPB(v *pb.Volume) corev1.Volume {
	out := corev1.Volume{Name: v.GetName()}
	if len(v.GetSource()) > 0 && json.Unmarshal(v.GetSource(), &out.VolumeSource) == nil {
		return out
	}
	out.VolumeSource = corev1.VolumeSource{}
	if v.GetEmptyDir() {
		out.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	return out
}
