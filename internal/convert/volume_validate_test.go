package convert

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestValidateVolumeSources(t *testing.T) {
	mode := func(m int32) *int32 { return &m }
	tests := []struct {
		name string
		src  corev1.VolumeSource
		sub  string
		want []string
	}{
		{"configMap with items", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, DefaultMode: mode(0o644),
			Items: []corev1.KeyToPath{{Key: "k", Path: "dir/k", Mode: mode(0o600)}}}}, "", nil},
		{"secret without name, bad mode, escaping path", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			DefaultMode: mode(0o1777), Items: []corev1.KeyToPath{{Key: "k", Path: "../k"}}}}, "",
			[]string{"FieldValueRequired spec.volumes[0].secret.secretName", "FieldValueInvalid spec.volumes[0].secret.defaultMode",
				"FieldValueInvalid spec.volumes[0].secret.items[0].path", "FieldValueInvalid spec.volumes[0].secret.items[0].path"}},
		{"two sources", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}, HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}, "",
			[]string{"FieldValueForbidden spec.volumes[0]"}},
		{"downwardAPI fields", corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "app", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}},
			{Path: "ip", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}},
			{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}},
		}}}, "", []string{"FieldValueNotSupported spec.volumes[0].downwardAPI.items[2].fieldRef.fieldPath"}},
		{"projected duplicate path", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "a", Path: "x"}}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Items: []corev1.KeyToPath{{Key: "b", Path: "x"}}}},
		}}}, "", []string{"FieldValueDuplicate spec.volumes[0].projected.sources[1]"}},
		{"memory medium", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}, "", nil},
		{"subPath escapes", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, "a/../../b",
			[]string{"FieldValueInvalid spec.containers[0].volumeMounts[0].subPath"}},
		{"subPath absolute", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, "/etc",
			[]string{"FieldValueInvalid spec.containers[0].volumeMounts[0].subPath"}},
	}
	for _, tt := range tests {
		p := validPod()
		p.Spec.Volumes[0].VolumeSource = tt.src
		p.Spec.Containers[0].VolumeMounts[0].SubPath = tt.sub
		if d := cmp.Diff(tt.want, errKeys(ValidatePod(p))); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, d)
		}
		// The source survives the trip through the stored form.
		pbPod, _ := PodToPB(p)
		if back := PodFromPB(pbPod, 1); !cmp.Equal(back.Spec.Volumes[0], p.Spec.Volumes[0]) {
			t.Errorf("%s: volume after the round trip %+v", tt.name, back.Spec.Volumes[0])
		}
	}
}
