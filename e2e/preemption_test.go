package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/up"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/binder"
)

func priorityPodJSON(name, cpu, class string) []byte {
	cls := ""
	if class != "" {
		cls = fmt.Sprintf(`"priorityClassName":%q,`, class)
	}
	return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"labels":{"app":"e2e"}},`+
		`"spec":{%s"terminationGracePeriodSeconds":1,"containers":[{"name":"app","image":"example.local/app:1","resources":{"requests":{"cpu":%q,"memory":"64Mi"}}}]}}`,
		name, cls, cpu)
}

// Two nodes full of priority-0 pods. A pod of the same priority waits (never preempts); a
// system-cluster-critical pod evicts exactly one of them (the minimum), with reason Preempted, and runs
// on the node it was nominated to, while the equal-priority pod keeps off the room held for it.
func TestPreemption(t *testing.T) {
	cl, conn := startCluster(t, up.Config{Nodes: 2, NodeCPU: "2", NodeMemory: "8Gi", MaxPods: 20, StartDelay: time.Millisecond})
	client := apiClient(cl, 30*time.Second)
	createIn := func(ns string, body []byte) {
		t.Helper()
		if code, msg := post(t, client, cl.APIURL, ns, body); code != http.StatusCreated {
			t.Fatalf("HTTP %d: %s", code, msg)
		}
	}
	create := func(body []byte) { t.Helper(); createIn("default", body) }
	for i := range 4 {
		create(priorityPodJSON(fmt.Sprintf("low-%d", i), "1", ""))
	}
	waitAll(t, conn, 4, time.Minute, isReady)

	create(priorityPodJSON("same", "1", ""))
	all := waitAll(t, conn, 1, time.Minute, isUnschedulable)
	same := all["default/same"]
	wantMsg := "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
	if msg := podCondMessage(same); msg != wantMsg {
		t.Errorf("equal priority pod: message %q\nwant %q", msg, wantMsg)
	}

	// The system classes are admitted in kube-system only.
	createIn("kube-system", priorityPodJSON("crit", "1", "system-cluster-critical"))
	waitAll(t, conn, 1, time.Minute, func(p *pb.Pod) bool { return p.GetMetadata().GetName() == "crit" && isReady(p) })
	all = waitAll(t, conn, 4, time.Minute, isReady) // 3 low + crit
	crit := all["kube-system/crit"]
	if crit == nil || !isReady(crit) {
		t.Fatalf("critical pod not running: %v", crit)
	}
	if crit.GetSpec().GetPriority() != 2000000000 {
		t.Errorf("critical pod priority = %d", crit.GetSpec().GetPriority())
	}
	node := crit.GetSpec().GetNodeName()
	var gone []string
	for i := range 4 {
		if _, ok := all[fmt.Sprintf("default/low-%d", i)]; !ok {
			gone = append(gone, fmt.Sprintf("low-%d", i))
		}
	}
	if len(gone) != 1 {
		t.Fatalf("evicted %v, want exactly one low pod", gone)
	}
	if s := all["default/same"]; s == nil || s.GetSpec().GetNodeName() != "" {
		t.Errorf("equal priority pod was placed: %v", s.GetSpec().GetNodeName())
	}

	// The victim's trail: a Preempted event naming the critical pod and the node, and a termination
	// with reason Preempted.
	victim := gone[0]
	ev := events(t, conn, "default", victim)
	want := fmt.Sprintf("Preempted by pod %s on node %s", crit.GetMetadata().GetUid(), node)
	if !hasEvent(ev, "Preempted", want) {
		t.Errorf("victim %s events %v, want Preempted %q", victim, eventSummary(ev), want)
	}
	term := terminations(t, conn, node)
	if r := term[victim]; r != "Preempted" {
		t.Errorf("termination of %s: reason %q (all on %s: %v)", victim, r, node, term)
	}
	// The critical pod was nominated before it was bound (its FailedScheduling came first) and is
	// bound on that node; the nomination is gone once it runs.
	if !hasEvent(events(t, conn, "kube-system", "crit"), "FailedScheduling", "") {
		t.Errorf("critical pod has no FailedScheduling event")
	}
	if crit.GetStatus().GetNominatedNodeName() != "" {
		t.Errorf("bound pod keeps nominatedNodeName %q", crit.GetStatus().GetNominatedNodeName())
	}
	checkInvariants(t, conn)
	b, err := bus.OpenBuckets(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := binder.ReadAllocation(context.Background(), b.Alloc, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.GetNominated()) != 0 {
		t.Errorf("alloc/%s still holds nominations %v", node, a.GetNominated())
	}
}

func podCondMessage(p *pb.Pod) string {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == "PodScheduled" {
			return c.GetMessage()
		}
	}
	return ""
}

// events reads the events recorded about one object.
func events(t *testing.T, c *bus.Conn, ns, name string) []*pb.Event {
	t.Helper()
	var out []*pb.Event
	for _, m := range streamMsgs(t, c, bus.StreamEvents, bus.SubjEvent(ns, name)) {
		e := &pb.Event{}
		if proto.Unmarshal(m.Data, e) == nil {
			out = append(out, e)
		}
	}
	return out
}

func hasEvent(evs []*pb.Event, reason, msg string) bool {
	for _, e := range evs {
		if e.GetReason() == reason && (msg == "" || e.GetMessage() == msg) {
			return true
		}
	}
	return false
}

func eventSummary(evs []*pb.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.GetReason()+": "+e.GetMessage())
	}
	return strings.Join(s, "; ")
}

// terminations maps pod name -> reason of every pod.terminate.<node> message.
func terminations(t *testing.T, c *bus.Conn, node string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range streamMsgs(t, c, bus.StreamPods, bus.SubjPodTerminate(node)) {
		pt := &pb.PodTermination{}
		if proto.Unmarshal(m.Data, pt) == nil {
			out[pt.GetName()] = pt.GetReason()
		}
	}
	return out
}

// streamMsgs reads every message stored on subject in stream so far, the entries of batches included.
func streamMsgs(t *testing.T, c *bus.Conn, stream, subject string) []bus.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := c.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: bus.ReadFilters(subject)})
	if err != nil {
		t.Fatal(err)
	}
	var out []bus.Entry
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			entries, err := bus.Unbatch(m.Subject(), m.Headers(), m.Data())
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if bus.SubjectMatches(subject, e.Subject) {
					out = append(out, e)
				}
			}
			n++
		}
		if n == 0 {
			return out
		}
	}
}
