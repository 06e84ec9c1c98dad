package agent

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/internal/usage"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// qosPod builds a pod of one container with the given requests and limits (cpu, memory; "" unset).
func qosPod(name string, priority int32, reqCPU, reqMem, limCPU, limMem string) *pb.Pod {
	res := &pb.ResourceRequirements{Requests: map[string]string{}, Limits: map[string]string{}}
	set := func(m map[string]string, k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set(res.Requests, "cpu", reqCPU)
	set(res.Requests, "memory", reqMem)
	set(res.Limits, "cpu", limCPU)
	set(res.Limits, "memory", limMem)
	return &pb.Pod{Metadata: &pb.ObjectMeta{Name: name, Uid: "uid-" + name},
		Spec: &pb.PodSpec{Priority: &priority, Containers: []*pb.Container{{Name: "c", Resources: res}}}}
}

func TestQOSClass(t *testing.T) {
	tests := []struct {
		pod  *pb.Pod
		want string
	}{
		{qosPod("be", 0, "", "", "", ""), QOSBestEffort},
		{qosPod("burst", 0, "100m", "", "", ""), QOSBurstable},
		{qosPod("burst-lim", 0, "100m", "64Mi", "200m", "64Mi"), QOSBurstable},
		{qosPod("guar", 0, "", "", "1", "1Gi"), QOSGuaranteed},
		{qosPod("guar-eq", 0, "1", "1Gi", "1", "1Gi"), QOSGuaranteed},
		{&pb.Pod{Status: &pb.PodStatus{QosClass: QOSBurstable}}, QOSBurstable}, // admission's word wins
	}
	for _, tt := range tests {
		if got := QOSClass(tt.pod); got != tt.want {
			t.Errorf("QOSClass(%s) = %s, want %s", tt.pod.GetMetadata().GetName(), got, tt.want)
		}
	}
}

// Eviction order: BestEffort, then Burstable over its memory request, then Burstable within it, then
// Guaranteed; lower priority first within a class, then the most memory over request.
func TestRankForEviction(t *testing.T) {
	const mi = 1 << 20
	cands := []Candidate{
		{Pod: qosPod("guaranteed", 0, "1", "100Mi", "1", "100Mi"), Memory: 90 * mi},
		{Pod: qosPod("burstable-under", 0, "100m", "100Mi", "", ""), Memory: 50 * mi},
		{Pod: qosPod("burstable-over-small", 0, "100m", "100Mi", "", ""), Memory: 110 * mi},
		{Pod: qosPod("burstable-over-big", 0, "100m", "100Mi", "", ""), Memory: 300 * mi},
		{Pod: qosPod("besteffort-high", 1000, "", "", "", ""), Memory: 500 * mi},
		{Pod: qosPod("besteffort-low", 0, "", "", "", ""), Memory: 1 * mi},
		{Pod: qosPod("burstable-over-low-prio", -10, "100m", "100Mi", "", ""), Memory: 101 * mi},
	}
	RankForEviction(cands)
	var got []string
	for _, c := range cands {
		got = append(got, c.Pod.GetMetadata().GetName())
	}
	want := []string{"besteffort-low", "besteffort-high", "burstable-over-low-prio", "burstable-over-big",
		"burstable-over-small", "burstable-under", "guaranteed"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("eviction order (-want +got):\n%s", d)
	}
}

func TestEvictionMessage(t *testing.T) {
	th, _ := ParseThresholds("memory.available<100Mi")
	b := Breach{Threshold: th[0], Available: 50 << 20, Condition: CondMemoryPressure}
	c := Candidate{Pod: qosPod("p", 0, "", "64Mi", "", "")}
	msg := evictionMessage(b, c, []usage.Container{{Name: "c", MemoryBytes: 200 << 20}})
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
		"Container c was using 200Mi, request is 64Mi, has larger consumption of memory."
	if msg != want {
		t.Errorf("message:\n%s\nwant:\n%s", msg, want)
	}
	th, _ = ParseThresholds("nodefs.available<10%")
	disk := evictionMessage(Breach{Threshold: th[0], Available: 1 << 30}, c, nil)
	if !strings.HasPrefix(disk, "The node was low on resource: ephemeral-storage. Threshold quantity: 10%, available: 1Gi.") {
		t.Errorf("disk message: %s", disk)
	}
}
