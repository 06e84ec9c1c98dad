package bus

import "testing"

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
