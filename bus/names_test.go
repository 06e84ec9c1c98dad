package bus

import (
	"strconv"
	"strings"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"plain", "node-1", "node-1"},
		{"dots", "web.v1.example", "web_v1_example"},
		{"underscore is escaped", "a_b", "a=5Fb"},
		{"wildcards are escaped", "a*b>c", "a=2Ab=3Ec"},
		{"space", "a b", "a=20b"},
		{"empty", "", "="},
		{"upper", "Node-A", "Node-A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Token(tt.in)
			if got != tt.want {
				t.Fatalf("Token(%q) = %q, want %q", tt.in, got, tt.want)
			}
			back, ok := Untoken(got)
			if !ok || back != tt.in {
				t.Fatalf("Untoken(%q) = %q, %v; want %q", got, back, ok, tt.in)
			}
		})
	}
}

func TestSplitAgentSubject(t *testing.T) {
	tests := []struct {
		subject   string
		node      string
		terminate bool
		ok        bool
	}{
		{SubjPodBound("n1.example.com"), "n1_example_com", false, true},
		{SubjPodTerminate("n1"), "n1", true, true},
		{"pod.bound.", "", false, false},
		{"pod.bound.a.b", "", false, false},
		{SubjPodScheduled, "", false, false},
		{SubjPodStatus("n1"), "", false, false},
	}
	for _, tt := range tests {
		node, terminate, ok := SplitAgentSubject(tt.subject)
		if node != tt.node || terminate != tt.terminate || ok != tt.ok {
			t.Errorf("SplitAgentSubject(%q) = %q, %v, %v; want %q, %v, %v", tt.subject, node, terminate, ok, tt.node, tt.terminate, tt.ok)
		}
	}
}

// SubjAgent matches a node's bound and terminate subjects and, for the nodes AgentFilterOK accepts, no
// other subject of the pipeline.
func TestSubjAgent(t *testing.T) {
	others := []string{SubjPodCreate, SubjPodUpdate, SubjPodDelete, SubjPodPending, SubjPodScheduled, SubjPodDeleted}
	for i := range PendingPartitions {
		others = append(others, SubjPodPendingGroup(i))
	}
	for _, node := range []string{"node-1", "n1.example.com", "any", "create", "g3", "g", "gx", "anything"} {
		f := SubjAgent(node)
		if !SubjectMatches(f, SubjPodBound(node)) || !SubjectMatches(f, SubjPodTerminate(node)) {
			t.Errorf("%s does not match %s's agent subjects", f, node)
		}
		clash := false
		for _, o := range others {
			clash = clash || SubjectMatches(f, o)
		}
		if clash == AgentFilterOK(node) {
			t.Errorf("node %q: filter %s matches another pipeline subject: %v, AgentFilterOK %v", node, f, clash, AgentFilterOK(node))
		}
	}
}

// A token that escapes nothing is its own value: caches keep the names they split off their keys, and
// a copy of each would be one more object per pod.
func TestUntokenPlainIsNotCopied(t *testing.T) {
	const key = "default.web-7d9f8-abcde"
	var ns, name string
	if n := testing.AllocsPerRun(100, func() { ns, name, _ = SplitPodKey(key) }); n != 0 {
		t.Errorf("SplitPodKey(%q): %v allocations, want 0", key, n)
	}
	if ns != "default" || name != "web-7d9f8-abcde" {
		t.Errorf("SplitPodKey(%q) = %q, %q", key, ns, name)
	}
	if got, ok := Untoken("a_b"); !ok || got != "a.b" {
		t.Errorf("Untoken(a_b) = %q, %v; want a.b", got, ok)
	}
}

func TestUntokenRejectsGarbage(t *testing.T) {
	for _, s := range []string{"a=4", "a=ZZ", "a.b", "a*"} {
		if _, ok := Untoken(s); ok {
			t.Errorf("Untoken(%q) accepted", s)
		}
	}
}

func TestSubjectsAndKeys(t *testing.T) {
	tests := []struct{ got, want string }{
		{SubjPodBound("n1.example.com"), "pod.bound.n1_example_com"},
		{SubjPodTerminate("n1"), "pod.terminate.n1"},
		{SubjPodStatus("n1"), "status.pod.n1"},
		{SubjHeartbeat("n1"), "node.heartbeat.n1"},
		{SubjEvent("default", "web.v1"), "event.default.web_v1"},
		{SubjEvent("", "node-1"), "event.=.node-1"},
		{SubjEventsFor("kube-system"), "event.kube-system.*"},
		{PodKey("default", "web.v1"), "default.web_v1"},
		{PodKeyPrefix("default"), "default.>"},
		{ConsumerAgent("n1.x"), "agent-n1_x"},
		{ConsumerAgentHost("sim.a"), "agenthost-sim_a"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	ns, name, ok := SplitPodKey(PodKey("default", "web.v1"))
	if !ok || ns != "default" || name != "web.v1" {
		t.Fatalf("SplitPodKey = %q %q %v", ns, name, ok)
	}
}

func TestPendingSubjects(t *testing.T) {
	if got := PendingSubject(""); got != SubjPodPending {
		t.Errorf("unconstrained pod on %q, want %q", got, SubjPodPending)
	}
	seen := map[string]bool{}
	for i := range 200 {
		g := "ns\x00group-" + strconv.Itoa(i)
		s := PendingSubject(g)
		if s != PendingSubject(g) || s != SubjPodPendingGroup(PendingPartition(g)) {
			t.Fatalf("group %q: subject %q is not stable", g, s)
		}
		if p := PendingPartition(g); p < 0 || p >= PendingPartitions {
			t.Fatalf("partition %d out of range", p)
		}
		seen[s] = true
	}
	if len(seen) != PendingPartitions {
		t.Errorf("200 groups used %d of %d partitions", len(seen), PendingPartitions)
	}
	for p := range PendingPartitions {
		if !subjectMatches(SubjPodPendingAll, SubjPodPendingGroup(p)) || subjectMatches(SubjPodPending, SubjPodPendingGroup(p)) {
			t.Errorf("partition %d subject %q", p, SubjPodPendingGroup(p))
		}
	}
	if !subjectMatches(SubjPodPendingAll, SubjPodPending) {
		t.Errorf("%q does not match %q", SubjPodPendingAll, SubjPodPending)
	}
}

// subjectMatches is NATS subject matching for the patterns used here (* and trailing >).
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

func TestSubjectMatches(t *testing.T) {
	tests := []struct {
		filter, subject string
		want            bool
	}{
		{"pod.bound.n1", "pod.bound.n1", true},
		{"pod.bound.*", "pod.bound.n1", true},
		{"pod.bound.*", "pod.bound", false},
		{"pod.bound.*", "pod.bound.n1.x", false},
		{"pod.>", "pod.bound.n1", true},
		{"pod.>", "pod", false},
		{">", "pod", true},
		{"dead.pod.cmd.create", "dead.pod.cmd.delete", false},
		{"event.default", "event.default.web", false},
		{"event.default.web", "event.default", false},
		{"event.*.web", "event.default.web", true},
	}
	for _, tt := range tests {
		if got := SubjectMatches(tt.filter, tt.subject); got != tt.want {
			t.Errorf("SubjectMatches(%q, %q) = %v, want %v", tt.filter, tt.subject, got, tt.want)
		}
	}
}

// Events are grouped per namespace, everything else per subject; a reader of some events also reads
// the batches of their namespaces, once, and never two filters where one covers the other.
func TestGroupSubjectAndReadFilters(t *testing.T) {
	for subject, want := range map[string]string{
		SubjEvent("default", "web.v1"): "event.default",
		SubjEvent("", "node-1"):        "event.=",
		SubjPodDeleted:                 SubjPodDeleted,
		SubjPodBound("n1"):             SubjPodBound("n1"),
		"event.default":                "event.default",
		SubjAllEvents:                  SubjAllEvents,
	} {
		if got := GroupSubject(subject); got != want {
			t.Errorf("GroupSubject(%q) = %q, want %q", subject, got, want)
		}
	}
	for _, tt := range []struct {
		filters []string
		want    string
	}{
		{[]string{SubjEvent("default", "web")}, "event.default.web event.default"},
		{[]string{SubjEventsFor("default")}, "event.default.* event.default"},
		{[]string{SubjAllEvents}, "event.>"},
		{[]string{SubjEvent("a", "x"), SubjEvent("a", "y"), SubjEvent("b", "x")}, "event.a.x event.a event.a.y event.b.x event.b"},
		{[]string{SubjEvent("a", "x"), SubjEventsFor("a")}, "event.a event.a.*"},
		{[]string{SubjAllEvents, SubjEvent("a", "x")}, "event.>"},
		{[]string{SubjPodScheduled, SubjPodPendingAll}, "pod.scheduled pod.pending.>"},
	} {
		if got := strings.Join(ReadFilters(tt.filters...), " "); got != tt.want {
			t.Errorf("ReadFilters(%q) = %q, want %q", tt.filters, got, tt.want)
		}
	}
}

func TestValidSubjectAndReplySubjects(t *testing.T) {
	tests := []struct {
		subject      string
		valid, reply bool
	}{
		{"pod.deleted", true, false},
		{SubjPodBound("node-1.example"), true, false},
		{SubjReply("admission-0", ReplyToken()), true, true},
		{SubjReply("a.b", "tok"), true, true},
		{"podreply.a1", true, false},
		{"podreply.a1.t.u", true, false},
		{"podreply.a1.*", false, false},
		{"podreply.*.t", false, false},
		{"$JS.API.STREAM.DELETE.AUDIT", true, false},
		{"", false, false},
		{"pod..deleted", false, false},
		{"pod.deleted.", false, false},
		{"pod.>", false, false},
		{"pod deleted", false, false},
		{"pod.deleted\r\nPUB x 0", false, false},
	}
	for _, tt := range tests {
		if got := ValidSubject(tt.subject); got != tt.valid {
			t.Errorf("ValidSubject(%q) = %v, want %v", tt.subject, got, tt.valid)
		}
		if got := IsReplySubject(tt.subject); got != tt.reply {
			t.Errorf("IsReplySubject(%q) = %v, want %v", tt.subject, got, tt.reply)
		}
	}
	if a, b := ReplyToken(), ReplyToken(); a == b || len(a) < 26 {
		t.Errorf("reply tokens %q and %q: want distinct, 128 bits", a, b)
	}
}

// Node names may hold dots: a node's alloc keys never match another node's filter.
func TestAllocKeys(t *testing.T) {
	for _, tt := range []struct{ node, uid string }{{"n1", "u1"}, {"a.b", "u1"}, {"a", "b.p.u1"}, {"a.b.p", "c"}, {"n1", ""}} {
		key := AllocPodKey(tt.node, tt.uid)
		if tt.uid == "" {
			key = AllocMetaKey(tt.node)
		}
		node, uid, ok := SplitAllocKey(key)
		if !ok || node != tt.node || uid != tt.uid {
			t.Errorf("SplitAllocKey(%q) = %q, %q, %v; want %q, %q", key, node, uid, ok, tt.node, tt.uid)
		}
		if tok, _, _ := strings.Cut(AllocNodeFilter(tt.node), "."); !strings.HasPrefix(key, tok+".") || strings.Contains(tok, ".") {
			t.Errorf("key %q is not under its node's filter %q", key, AllocNodeFilter(tt.node))
		}
	}
	if _, _, ok := SplitAllocKey(NodeKey("n1")); ok {
		t.Error("a key without a node part was taken for an alloc key")
	}
}
