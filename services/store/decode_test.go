package store

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A create decoded through createMask reads, of every field create uses, what the whole command
// holds; anything else is decoded whole.
func TestDecodeCommandReadsWhatCreateReads(t *testing.T) {
	pod := func(edit func(*pb.Pod)) *pb.Pod {
		p := &pb.Pod{
			Metadata: &pb.ObjectMeta{Name: "web", Namespace: "shop", Uid: "u1", Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{"note": "x"}},
			Spec: &pb.PodSpec{SchedulerName: "default-scheduler", Containers: []*pb.Container{{Name: "app", Image: "nginx",
				Resources: &pb.ResourceRequirements{Requests: map[string]string{"cpu": "100m"}}}}},
			Status:   &pb.PodStatus{Phase: "Pending"},
			Internal: &pb.PodInternal{CorrelationId: "corr-1"},
		}
		if edit != nil {
			edit(p)
		}
		return p
	}
	spread := &pb.PodSpec{
		TopologySpreadConstraints: []*pb.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: "DoNotSchedule",
			LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
		Affinity: &pb.Affinity{PodAntiAffinity: &pb.PodAffinity{Required: []*pb.PodAffinityTerm{{TopologyKey: "kubernetes.io/hostname",
			LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}},
	}
	tests := []struct {
		name    string
		subject string
		cmd     *pb.PodCommand
		pruned  bool // decoded through the mask: the containers are not read
	}{
		{"plain create", bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, Pod: pod(nil), User: "alice", OmitSentPod: true}, true},
		{"spread and anti-affinity", bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, OmitSentPod: true,
			Pod: pod(func(p *pb.Pod) {
				p.Spec.TopologySpreadConstraints, p.Spec.Affinity = spread.TopologySpreadConstraints, spread.Affinity
			})}, true},
		{"node named, deadline", bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, OmitSentPod: true,
			NotAfter: timestamppb.New(time.Unix(1700000000, 5)), Pod: pod(func(p *pb.Pod) { p.Spec.NodeName = "n1" })}, true},
		{"no correlation id", bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, OmitSentPod: true,
			Pod: pod(func(p *pb.Pod) { p.Internal = nil })}, true},
		{"no uid (refused)", bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, OmitSentPod: true,
			Pod: pod(func(p *pb.Pod) { p.Metadata.Uid = "" })}, true},
		{"the pod wanted back", bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, Pod: pod(nil)}, false},
		{"another op on the create subject", bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: pod(nil), OmitSentPod: true}, false},
		{"an update", bus.SubjPodUpdate, &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: pod(nil), ExpectedRevision: 7}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := proto.Marshal(tt.cmd)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeCommand(&bus.Msg{Subject: tt.subject, Data: data})
			if err != nil {
				t.Fatal(err)
			}
			if !tt.pruned {
				if !proto.Equal(got, tt.cmd) {
					t.Errorf("decoded %v, want the whole command %v", got, tt.cmd)
				}
				return
			}
			if len(got.GetPod().GetSpec().GetContainers()) != 0 {
				t.Errorf("a create that omits its pod was decoded whole")
			}
			want, in := tt.cmd, bus.Meta{Correlation: "from-header"}
			if g, w := validate(tt.subject, got), validate(tt.subject, want); (g == nil) != (w == nil) {
				t.Errorf("validate: %v, want %v", g, w)
			}
			gp, wp := got.GetPod(), want.GetPod()
			if g, w := meta(gp, "m", in), meta(wp, "m", in); g != w {
				t.Errorf("meta %+v, want %+v", g, w)
			}
			if g, w := podutil.ConstraintGroup(gp), podutil.ConstraintGroup(wp); g != w {
				t.Errorf("constraint group %q, want %q", g, w)
			}
			if g, w := gp.GetSpec().GetNodeName(), wp.GetSpec().GetNodeName(); g != w {
				t.Errorf("node %q, want %q", g, w)
			}
			if !proto.Equal(got.GetNotAfter(), want.GetNotAfter()) || got.GetOmitSentPod() != want.GetOmitSentPod() ||
				got.GetOp() != want.GetOp() || got.GetUser() != want.GetUser() {
				t.Errorf("command fields %v, want %v", got, want)
			}
		})
	}
}

// Bytes that are not a command are refused as malformed, on the create subject as on any other.
func TestDecodeCommandRefusesGarbage(t *testing.T) {
	for _, subject := range []string{bus.SubjPodCreate, bus.SubjPodUpdate} {
		if _, err := decodeCommand(&bus.Msg{Subject: subject, Data: []byte{0xff, 0xff, 0xff}}); !errors.Is(err, bus.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", subject, err)
		}
	}
}
