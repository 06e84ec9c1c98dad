package agent

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseThresholds(t *testing.T) {
	tests := []struct {
		in      string
		want    []Threshold
		wantErr bool
	}{
		{in: "", want: nil},
		{in: DefaultEvictionHard, want: []Threshold{
			{Signal: SignalMemoryAvailable, Quantity: 100 << 20},
			{Signal: SignalNodeFSAvailable, Percent: 10},
			{Signal: SignalNodeFSInodesFree, Percent: 5},
			{Signal: SignalImageFSAvailable, Percent: 15},
		}},
		{in: " pid.available<1000 , memory.available<1.5Gi", want: []Threshold{
			{Signal: SignalPIDAvailable, Quantity: 1000},
			{Signal: SignalMemoryAvailable, Quantity: 1536 << 20},
		}},
		{in: "memory.available>100Mi", wantErr: true},
		{in: "swap.available<1Gi", wantErr: true},
		{in: "nodefs.available<150%", wantErr: true},
		{in: "nodefs.available<0%", wantErr: true},
		{in: "memory.available<lots", wantErr: true},
		{in: "memory.available<-1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseThresholds(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrThreshold) {
					t.Fatalf("err = %v, want ErrThreshold", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got, cmpopts.IgnoreUnexported(Threshold{})); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestEvaluate(t *testing.T) {
	th, err := ParseThresholds("memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,pid.available<1000")
	if err != nil {
		t.Fatal(err)
	}
	healthy := Signals{
		MemoryAvailable: 2 << 30, MemoryCapacity: 8 << 30,
		NodeFSAvailable: 50 << 30, NodeFSCapacity: 100 << 30,
		InodesFree: 900, Inodes: 1000,
		PIDAvailable: 30000, PIDCapacity: 32768,
	}
	tests := []struct {
		name   string
		change func(*Signals)
		want   []string // conditions, in threshold order
	}{
		{"healthy", func(*Signals) {}, nil},
		{"memory just above", func(s *Signals) { s.MemoryAvailable = 100 << 20 }, nil},
		{"memory below", func(s *Signals) { s.MemoryAvailable = 99 << 20 }, []string{CondMemoryPressure}},
		{"disk below 10%", func(s *Signals) { s.NodeFSAvailable = 9 << 30 }, []string{CondDiskPressure}},
		{"inodes below 5%", func(s *Signals) { s.InodesFree = 49 }, []string{CondDiskPressure}},
		{"pids below", func(s *Signals) { s.PIDAvailable = 999 }, []string{CondPIDPressure}},
		{"unmeasured never fires", func(s *Signals) { s.PIDAvailable, s.PIDCapacity = 0, 0 }, nil},
		{"all", func(s *Signals) { s.MemoryAvailable, s.NodeFSAvailable, s.PIDAvailable = 0, 0, 0 },
			[]string{CondMemoryPressure, CondDiskPressure, CondPIDPressure}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := healthy
			tt.change(&s)
			var got []string
			for _, b := range Evaluate(s, th) {
				got = append(got, b.Condition)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
