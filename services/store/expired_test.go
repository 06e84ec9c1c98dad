package store

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
)

// A controller's create carries the time its claim on the pod stops counting it. Delivered after that
// (a store that was down, a stalled consumer), it must not add the pod; a redelivery of one applied in
// time still answers as the first time did.
func TestCreateAfterNotAfter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		notAfter time.Time
		applied  bool // the same create was applied before its deadline
		want     int32
	}{
		{"in time", fixedNow.Add(time.Second), false, 201},
		{"late", fixedNow.Add(-time.Second), false, 410},
		{"late redelivery of one applied in time", fixedNow.Add(-time.Second), true, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t)
			if tc.applied {
				if res := h.send(create(pod("u1"))); res.GetCode() != 201 {
					t.Fatalf("first create: %d %s", res.GetCode(), res.GetMessage())
				}
			}
			cmd := create(pod("u1"))
			cmd.NotAfter = timestamppb.New(tc.notAfter)
			res := h.send(cmd)
			if res.GetCode() != tc.want {
				t.Fatalf("create: %d %s, want %d", res.GetCode(), res.GetMessage(), tc.want)
			}
			_, _, err := h.get()
			if exists := err == nil; exists != (tc.want == 201) {
				t.Errorf("pod stored: %v (err %v), want %v", exists, err, tc.want == 201)
			}
			if n := len(h.msgs(bus.StreamPods, bus.SubjPodPendingAll)); n != map[bool]int{true: 1, false: 0}[tc.want == 201] {
				t.Errorf("pod.pending messages = %d", n)
			}
		})
	}
}
