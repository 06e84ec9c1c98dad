package bus

import "testing"

// A lease's key leads back to its node's key, whatever the node's name holds.
func TestLeaseNodeKey(t *testing.T) {
	for _, tt := range []struct{ key, want string }{
		{LeaseKey("n1"), NodeKey("n1")},
		{LeaseKey("ip-10-0-0-1.ec2.internal"), NodeKey("ip-10-0-0-1.ec2.internal")},
		{ObjectKey("default", "n1"), ""},
		{NodeKey("n1"), ""},
	} {
		if got := LeaseNodeKey(tt.key); got != tt.want {
			t.Errorf("LeaseNodeKey(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}
