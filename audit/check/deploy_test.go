package check

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

var histStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// appsRecord is a record of an apps bucket; obj nil deletes the key.
func appsRecord(bucket, name string, obj any) step {
	return func(seq uint64) *audit.Record {
		h := nats.Header{}
		h.Set("Nats-Stream-Source", fmt.Sprintf("%s %d", bus.KVStream(bucket), seq))
		r := &audit.Record{Seq: seq, Subject: bus.SubjKV(bucket) + bus.ObjectKey("default", name), Header: h}
		if obj == nil {
			h.Set(bus.HdrKVOperation, "DEL")
			return r
		}
		r.Data, _ = workload.Encode(obj, nil)
		return r
	}
}

// at pins a step's copy into the log to a moment; other steps are 10s apart, beyond sourceLag.
func at(d time.Duration, s step) step {
	return func(seq uint64) *audit.Record {
		r := s(seq)
		r.Time = histStart.Add(d)
		return r
	}
}

func template(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
}

// deploy is Deployment web: replicas, maxSurge 1, the template of image, at a revision.
func deploy(replicas int32, image, revision string) step {
	surge := intstr.FromInt32(1)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "dweb",
		Annotations: map[string]string{workload.AnnotationRevision: revision}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: template(image),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge}}}}
	return appsRecord(bus.BucketDeployments, "web", d)
}

// deployGen is deploy at a generation.
func deployGen(replicas int32, image, revision string, gen int64) step {
	s := deploy(replicas, image, revision)
	return func(seq uint64) *audit.Record {
		r := s(seq)
		d := &appsv1.Deployment{}
		_, _ = workload.Decode(r.Data, d)
		d.Generation = gen
		r.Data, _ = workload.Encode(d, nil)
		return r
	}
}

// rset is ReplicaSet web-<hash> of Deployment web with the template of image.
func rset(hash, image string) step {
	t := template(image)
	t.Labels = map[string]string{"app": "web", workload.LabelPodTemplateHash: hash}
	yes := true
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-" + hash, Namespace: "default", Labels: t.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "dweb", Controller: &yes}}},
		Spec: appsv1.ReplicaSetSpec{Template: t}}
	return appsRecord(bus.BucketReplicaSets, "web-"+hash, rs)
}

// owned makes a pod one of ReplicaSet web-<hash>'s.
func owned(hash string) podOpt {
	return func(p *pb.Pod) {
		p.Metadata.Labels = map[string]string{workload.LabelPodTemplateHash: hash}
		p.Metadata.OwnerReferences = []*pb.OwnerReference{{Kind: "ReplicaSet", Name: "web-" + hash, Uid: "rs-" + hash, Controller: proto.Bool(true)}}
	}
}

func TestDeployments(t *testing.T) {
	// Three pods of a Deployment of one replica, its scale-up to three copied into the log a minute later.
	scaledUpLate := []step{at(0, deploy(1, "v1", "1")), at(time.Second, rset("h1", "v1")),
		at(2*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(3*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
		at(4*time.Second, podRec("c", pod("uc", "1", owned("h1")))), at(time.Minute, deploy(3, "v1", "1"))}
	type want struct {
		kind, deploy, pod string
		rev               uint64
	}
	tests := []struct {
		name    string
		steps   []step
		end     bool
		want    []want
		origins Origins // samples of the origin streams (step i is origin seq i+1)
	}{
		{
			name: "a roll within replicas + maxSurge, complete at the end",
			steps: []step{deploy(2, "v1", "1"), rset("h1", "v1"),
				podRec("a", pod("ua", "1", owned("h1"), on("n1"), ready)), podRec("b", pod("ub", "1", owned("h1"), on("n1"), ready)),
				deploy(2, "v2", "2"), rset("h2", "v2"),
				podRec("c", pod("uc", "1", owned("h2"), on("n1"), ready)), // 3 = 2 + 1
				podRec("a", pod("ua", "1", owned("h1"), on("n1"), deleting(2))), podDel("a"),
				podRec("d", pod("ud", "1", owned("h2"), on("n1"), ready)),
				podRec("b", pod("ub", "1", owned("h1"), on("n1"), deleting(2))), podDel("b")},
			end: true,
		},
		{
			name: "broken: the new ReplicaSet scaled up before the old one came down",
			steps: []step{deploy(2, "v1", "1"), rset("h1", "v1"),
				podRec("a", pod("ua", "1", owned("h1"))), podRec("b", pod("ub", "1", owned("h1"))),
				deploy(2, "v2", "2"), rset("h2", "v2"),
				podRec("c", pod("uc", "1", owned("h2"))), podRec("d", pod("ud", "1", owned("h2")))},
			want: []want{{KindSurge, "default/web", "default/d", 8}},
		},
		{
			name: "after a scale-down the old bound holds until the pods come down, then the new one",
			steps: []step{deploy(4, "v1", "1"), rset("h1", "v1"),
				podRec("a", pod("ua", "1", owned("h1"))), podRec("b", pod("ub", "1", owned("h1"))),
				podRec("c", pod("uc", "1", owned("h1"))), podRec("d", pod("ud", "1", owned("h1"))),
				deploy(1, "v1", "1"),
				podRec("e", pod("ue", "1", owned("h1"))), // 5: created from the ReplicaSet's older spec
				podDel("a"), podDel("b"), podDel("c"), podDel("d"),
				podRec("f", pod("uf", "1", owned("h1"))),  // 2 = 1 + 1
				podRec("g", pod("ug", "1", owned("h1")))}, // 3
			want: []want{{KindSurge, "default/web", "default/g", 14}},
		},
		{
			name: "a pod claimed before a scale-down lands after the others came down",
			steps: []step{at(0, deploy(4, "v1", "1")), at(time.Second, rset("h1", "v1")),
				at(2*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(3*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
				at(4*time.Second, podRec("c", pod("uc", "1", owned("h1")))), at(5*time.Second, podRec("d", pod("ud", "1", owned("h1")))),
				at(6*time.Second, deploy(1, "v1", "1")), at(7*time.Second, podDel("a")), at(8*time.Second, podDel("b")),
				at(9*time.Second, podRec("e", pod("ue", "1", owned("h1"))))}, // 3 > 1 + 1: decided at 4 replicas
		},
		{
			name: "a scale-up copied into the log just after its pods",
			steps: []step{at(0, deploy(1, "v1", "1")), at(time.Second, rset("h1", "v1")),
				at(2*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(3*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
				at(4*time.Second, podRec("c", pod("uc", "1", owned("h1")))), at(5*time.Second, deploy(3, "v1", "1"))},
		},
		{
			name:  "broken: a scale-up the log shows long after the pods",
			steps: scaledUpLate,
			want:  []want{{KindSurge, "default/web", "default/c", 5}},
		},
		{
			name:    "a scale-up the log shows long after the pods, written before them",
			steps:   scaledUpLate,
			origins: Origins{bus.KVStream(bus.BucketDeployments): {{Time: histStart.Add(500 * time.Millisecond), Seq: 1}, {Time: histStart.Add(1500 * time.Millisecond), Seq: 6}}},
		},
		{
			name:  "a scale-up the log shows long after the pods, its samples cut off before the pods came",
			steps: scaledUpLate,
			// Not written yet at 1.9 s; the next sample, 50 s in, shows it: written at some time between.
			origins: Origins{bus.KVStream(bus.BucketDeployments): {
				{Time: histStart.Add(500 * time.Millisecond), Seq: 1, Until: histStart.Add(1900 * time.Millisecond)},
				{Time: histStart.Add(50 * time.Second), Seq: 6, Until: histStart.Add(50 * time.Second)}}},
		},
		{
			name:  "broken: a scale-up the samples show written after the pods",
			steps: scaledUpLate,
			origins: Origins{bus.KVStream(bus.BucketDeployments): {
				{Time: histStart.Add(500 * time.Millisecond), Seq: 1, Until: histStart.Add(10 * time.Second)},
				{Time: histStart.Add(10200 * time.Millisecond), Seq: 6, Until: histStart.Add(10100 * time.Millisecond)}}},
			want: []want{{KindSurge, "default/web", "default/c", 5}},
		},
		{
			name: "pods the log shows long after a scale-down, written before it",
			steps: []step{at(0, deploy(4, "v1", "1")), at(time.Second, rset("h1", "v1")), at(2*time.Second, deploy(1, "v1", "1")),
				at(40*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(41*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
				at(42*time.Second, podRec("c", pod("uc", "1", owned("h1"))))},
			origins: Origins{bus.KVStream(bus.BucketPods): {{Time: histStart.Add(1200 * time.Millisecond), Seq: 6}}},
		},
		{
			name: "broken: the same without the origins' samples",
			steps: []step{at(0, deploy(4, "v1", "1")), at(time.Second, rset("h1", "v1")), at(2*time.Second, deploy(1, "v1", "1")),
				at(40*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(41*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
				at(42*time.Second, podRec("c", pod("uc", "1", owned("h1"))))},
			want: []want{{KindSurge, "default/web", "default/c", 6}},
		},
		{
			name: "spec versions lost to the log: pods above the first bound seen are not judged",
			steps: []step{at(0, deployGen(1, "v1", "1", 3)), at(time.Second, rset("h1", "v1")),
				at(2*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(3*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
				at(4*time.Second, podRec("c", pod("uc", "1", owned("h1")))), at(5*time.Second, podRec("d", pod("ud", "1", owned("h1"))))},
		},
		{
			// A scale-up and a roll lost between the first record seen and a later one: the pods that
			// came in between are not judged against the first record's bound.
			name: "spec versions lost to the log after the pods came: their count is not judged",
			steps: []step{at(0, deployGen(3, "v1", "1", 1)), at(time.Second, rset("h1", "v1")),
				at(2*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(3*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
				at(4*time.Second, podRec("c", pod("uc", "1", owned("h1")))), at(5*time.Second, podRec("d", pod("ud", "1", owned("h1")))),
				at(6*time.Second, podRec("e", pod("ue", "1", owned("h1")))), // 5 > 3 + 1 by the first record
				at(time.Minute, deployGen(1, "v1", "1", 4))},
		},
		{
			name: "broken: the same with no version lost",
			steps: []step{at(0, deployGen(3, "v1", "1", 1)), at(time.Second, rset("h1", "v1")),
				at(2*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(3*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
				at(4*time.Second, podRec("c", pod("uc", "1", owned("h1")))), at(5*time.Second, podRec("d", pod("ud", "1", owned("h1")))),
				at(6*time.Second, podRec("e", pod("ue", "1", owned("h1")))),
				at(time.Minute, deployGen(1, "v1", "1", 2))},
			want: []want{{KindSurge, "default/web", "default/e", 7}},
		},
		{
			name: "broken: after versions lost to the log the pods came down, then one too many",
			steps: []step{at(0, deployGen(4, "v1", "1", 1)), at(time.Second, rset("h1", "v1")), at(2*time.Second, deployGen(1, "v1", "1", 3)),
				at(3*time.Second, podRec("a", pod("ua", "1", owned("h1")))), at(4*time.Second, podRec("b", pod("ub", "1", owned("h1")))),
				at(5*time.Second, podRec("c", pod("uc", "1", owned("h1")))),
				at(40*time.Second, podDel("c")), at(41*time.Second, podRec("d", pod("ud", "1", owned("h1"))))},
			want: []want{{KindSurge, "default/web", "default/d", 8}},
		},
		{
			name: "broken at the end: no ReplicaSet of the current template",
			steps: []step{deploy(1, "v1", "1"), rset("h1", "v1"), podRec("a", pod("ua", "1", owned("h1"), on("n1"), ready)),
				deploy(1, "v2", "1")},
			end:  true,
			want: []want{{KindRollout, "default/web", "", 0}},
		},
		{
			name: "broken at the end: a pod of the current template not Ready, one of the old left",
			steps: []step{deploy(2, "v1", "1"), rset("h1", "v1"), podRec("a", pod("ua", "1", owned("h1"), on("n1"), ready)),
				deploy(2, "v2", "2"), rset("h2", "v2"),
				podRec("b", pod("ub", "1", owned("h2"), on("n1"), ready)), podRec("c", pod("uc", "1", owned("h2"), on("n1")))},
			end:  true,
			want: []want{{KindRollout, "default/web", "", 0}},
		},
		{
			name: "broken at the end: the roll done but an old pod left",
			steps: []step{deploy(1, "v1", "1"), rset("h1", "v1"), podRec("a", pod("ua", "1", owned("h1"), on("n1"), ready)),
				deploy(1, "v2", "2"), rset("h2", "v2"), podRec("b", pod("ub", "1", owned("h2"), on("n1"), ready))},
			end:  true,
			want: []want{{KindRollout, "default/web", "", 0}},
		},
		{
			name: "a deleted Deployment whose ReplicaSets and pods were collected",
			steps: []step{deploy(1, "v1", "1"), rset("h1", "v1"), podRec("a", pod("ua", "1", owned("h1"))),
				appsRecord(bus.BucketDeployments, "web", nil), podDel("a"), appsRecord(bus.BucketReplicaSets, "web-h1", nil)},
			end: true,
		},
		{
			name: "broken: a deleted Deployment's ReplicaSet and pod left",
			steps: []step{deploy(1, "v1", "1"), rset("h1", "v1"), podRec("a", pod("ua", "1", owned("h1"), on("n1"), ready)),
				appsRecord(bus.BucketDeployments, "web", nil)},
			end:  true,
			want: []want{{KindOrphan, "default/web", "", 0}, {KindOrphan, "default/web", "default/a", 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHistory()
			h.deploys.origins = tt.origins
			for i, s := range tt.steps {
				r := s(uint64(i + 1))
				if r.Time.IsZero() {
					r.Time = histStart.Add(time.Duration(i) * 10 * time.Second)
				}
				if err := h.apply(r); err != nil {
					t.Fatal(err)
				}
			}
			got := h.deploys.surges()
			if tt.end {
				got = append(got, h.deploys.endState(h)...)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("violations:\n%v\nwant:\n%v", got, tt.want)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Kind != w.kind || g.Deployment != w.deploy || g.Pod != w.pod || g.Revision != w.rev {
					t.Errorf("violation %d = %v, want %+v", i, g, w)
				}
			}
		})
	}
}
