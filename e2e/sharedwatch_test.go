package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
)

// In one process the services that follow the pods, nodes and alloc buckets share one watch of each
// (bus.WatchHub, on the reader's credential): the server feeds one consumer per bucket for all of
// them (the namespace controller watches pods only while a namespace terminates), and pods still go to
// Ready through every service.
func TestServicesShareBucketWatches(t *testing.T) {
	cl, conn := startCluster(t, up.Config{Nodes: 3, StartDelay: 2 * time.Millisecond, NATSAuth: true})
	client := apiClient(cl, 10*time.Second)
	for i := range 20 {
		if code, body := post(t, client, cl.APIURL, "default", podJSON("default", fmt.Sprintf("shared-%d", i), "10m", "16Mi")); code != http.StatusCreated {
			t.Fatalf("create pod: %d %s", code, body)
		}
	}
	waitAll(t, conn, 20, 60*time.Second, isReady)

	want := map[string]int{bus.BucketPods: 1, bus.BucketNodes: 1, bus.BucketAlloc: 1}
	got := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		same := true
		for bucket, n := range want {
			got[bucket] = bustest.Consumers(t, conn, bus.KVStream(bucket))
			same = same && got[bucket] == n
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers per bucket %v, want %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
