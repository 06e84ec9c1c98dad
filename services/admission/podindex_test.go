package admission

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/podbus/podbus/internal/podfields"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The watch cache indexes a stored pod without converting it; the labels and selectable fields must be
// those of the API object the pod converts to.
func TestPodIndexMatchesDecode(t *testing.T) {
	tests := []struct {
		name string
		pod  *pb.Pod
	}{
		{name: "empty", pod: &pb.Pod{}},
		{name: "new", pod: &pb.Pod{Metadata: &pb.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "x"}},
			Spec: &pb.PodSpec{RestartPolicy: "Always", SchedulerName: "default-scheduler", ServiceAccountName: "default"}}},
		{name: "running", pod: &pb.Pod{Metadata: &pb.ObjectMeta{Name: "b", Namespace: "ns"},
			Spec:   &pb.PodSpec{NodeName: "node-1", HostNetwork: true, RestartPolicy: "Never"},
			Status: &pb.PodStatus{Phase: "Running", PodIp: "10.0.0.1", NominatedNodeName: "node-2"}}},
		{name: "every field set, beside others the index skips", pod: &pb.Pod{
			Metadata: &pb.ObjectMeta{Name: "c", Namespace: "ns", Uid: "u", Labels: map[string]string{"app": "x", "tier": "y"},
				Annotations: map[string]string{"a": "b"}},
			Spec: &pb.PodSpec{NodeName: "node-1", HostNetwork: true, RestartPolicy: "OnFailure", SchedulerName: "s",
				ServiceAccountName: "sa", Containers: []*pb.Container{{Name: "c", Image: "busybox"}}},
			Status: &pb.PodStatus{Phase: "Pending", PodIp: "10.0.0.2", NominatedNodeName: "node-3",
				Conditions: []*pb.PodCondition{{Type: "PodScheduled", Status: "True"}}},
			Internal: &pb.PodInternal{CorrelationId: "c", ReportSeq: 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := proto.Marshal(tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			o, err := podKind.decodeEntry("", data, 7)
			if err != nil {
				t.Fatal(err)
			}
			lbls, fs, err := podKind.storage.index(data)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(map[string]string(podKind.fieldSet(o)), map[string]string(fs)); d != "" {
				t.Errorf("fields (-decoded +indexed):\n%s", d)
			}
			if len(lbls) != 0 || len(objectMeta(o).Labels) != 0 {
				if d := cmp.Diff(objectMeta(o).Labels, lbls); d != "" {
					t.Errorf("labels (-decoded +indexed):\n%s", d)
				}
			}
		})
	}
	if _, _, err := podKind.storage.index([]byte{0xff}); err == nil {
		t.Error("an undecodable pod indexed")
	}
}

// indexedPod is a pod with every field the watch cache indexes set.
func indexedPod() *pb.Pod {
	p := smallPod("default", "web-0", "web")
	p.Metadata.Labels["tier"] = "front"
	p.Metadata.Annotations = map[string]string{"a": "b"}
	p.Spec.NodeName, p.Spec.RestartPolicy, p.Spec.SchedulerName = "node-1", "Always", "default-scheduler"
	p.Spec.ServiceAccountName, p.Spec.HostNetwork = "default", true
	p.Status = &pb.PodStatus{Phase: "Running", PodIp: "10.0.0.7", NominatedNodeName: "node-2",
		Conditions: []*pb.PodCondition{{Type: "Ready", Status: "True"}}}
	p.Internal = &pb.PodInternal{CorrelationId: "c-1"}
	return p
}

// A pod's labels and fields read from the wire are those the decoder reads, whichever fields it has.
func TestWireIndexMatchesDecode(t *testing.T) {
	for name, change := range map[string]func(p *pb.Pod){
		"every field":        func(*pb.Pod) {},
		"a pending pod":      func(p *pb.Pod) { p.Spec.NodeName, p.Status = "", &pb.PodStatus{Phase: "Pending"} },
		"no labels":          func(p *pb.Pod) { p.Metadata.Labels = nil },
		"an empty label":     func(p *pb.Pod) { p.Metadata.Labels = map[string]string{"": ""} },
		"no host network":    func(p *pb.Pod) { p.Spec.HostNetwork = false },
		"no status":          func(p *pb.Pod) { p.Status = nil },
		"no spec":            func(p *pb.Pod) { p.Spec = nil },
		"no metadata":        func(p *pb.Pod) { p.Metadata = nil },
		"an empty pod":       func(p *pb.Pod) { proto.Reset(p) },
		"unicode everywhere": func(p *pb.Pod) { p.Metadata.Name, p.Spec.NodeName = "под-0", "ノード" },
	} {
		t.Run(name, func(t *testing.T) {
			p := indexedPod()
			change(p)
			data := mustMarshal(t, p)
			labels, f, ok := wireIndex(data)
			if !ok {
				t.Fatal("not read from the wire")
			}
			wantLabels, wantFields, err := decodeIndex(data)
			if err != nil {
				t.Fatal(err)
			}
			if !sameIndex(labels, f, wantLabels, wantFields) {
				t.Errorf("from the wire %v %v\ndecoded       %v %v", labels, f, wantLabels, wantFields)
			}
		})
	}
}

// Forms an encoder does not write go to the decoder, which reads them as it always has.
func TestWireIndexLeavesOddFormsToTheDecoder(t *testing.T) {
	data := mustMarshal(t, indexedPod())
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	spec := mustMarshal(t, &pb.PodSpec{NodeName: "node-9"})
	for _, tc := range []struct {
		name      string
		data      []byte
		malformed bool
	}{
		{"spec twice (merged)", append(append([]byte{}, data...), field(podfields.PodSpec, spec)...), false},
		{"a name that is not UTF-8", append(append([]byte{}, data...), field(podfields.PodMeta, field(podfields.MetaName, []byte{0xff}))...), true},
		{"a truncated pod", data[:len(data)-2], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, ok := wireIndex(tc.data); ok {
				t.Fatal("read from the wire")
			}
			labels, f, err := indexPod(tc.data)
			wantLabels, wantFields, wantErr := decodeIndex(tc.data)
			if (err != nil) != tc.malformed || (wantErr != nil) != tc.malformed || !sameIndex(labels, f, wantLabels, wantFields) {
				t.Errorf("indexPod %v %v %v, the decoder %v %v %v", labels, f, err, wantLabels, wantFields, wantErr)
			}
		})
	}
}

// Whatever the bytes, what is read from the wire is what the decoder reads.
func FuzzWireIndex(f *testing.F) {
	data, err := proto.Marshal(indexedPod())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(append(append([]byte{}, data...), data...))
	f.Fuzz(func(t *testing.T, data []byte) {
		labels, fs, ok := wireIndex(data)
		if !ok {
			return
		}
		wantLabels, wantFields, err := decodeIndex(data)
		if err != nil || !sameIndex(labels, fs, wantLabels, wantFields) {
			t.Fatalf("from the wire %v %v\ndecoded       %v %v (%v)", labels, fs, wantLabels, wantFields, err)
		}
	})
}

func sameIndex(labels map[string]string, f fields.Set, wantLabels map[string]string, wantFields fields.Set) bool {
	return maps.Equal(labels, wantLabels) && (labels == nil) == (wantLabels == nil) && maps.Equal(f, wantFields)
}

// go test -run XXX -bench WireIndex ./services/admission/: a running pod indexed from the wire and
// through the decoder.
func BenchmarkWireIndex(b *testing.B) {
	data, err := proto.Marshal(indexedPod())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := wireIndex(data); !ok {
				b.Fatal("not read")
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decodeIndex(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
