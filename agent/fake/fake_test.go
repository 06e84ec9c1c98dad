package fake

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func pod(uid string) *pb.Pod {
	return &pb.Pod{Metadata: &pb.ObjectMeta{Uid: uid, Namespace: "default", Name: "p-" + uid}}
}

func TestIPAllocation(t *testing.T) {
	ctx := context.Background()
	r, err := New(Config{PodCIDR: "10.42.1.0/29"}) // usable: .2 to .6
	if err != nil {
		t.Fatal(err)
	}
	var sbs []agent.Sandbox
	for i := range 5 {
		sb, err := r.RunSandbox(ctx, pod(fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("sandbox %d: %v", i, err)
		}
		if want := fmt.Sprintf("10.42.1.%d", i+2); sb.IP != want {
			t.Errorf("sandbox %d: ip %s, want %s", i, sb.IP, want)
		}
		sbs = append(sbs, sb)
	}
	again, err := r.RunSandbox(ctx, pod("0"))
	if err != nil || again.IP != sbs[0].IP {
		t.Errorf("RunSandbox is not idempotent: %v %v", again, err)
	}
	if _, err := r.RunSandbox(ctx, pod("x")); !errors.Is(err, ErrIPsExhausted) {
		t.Fatalf("sixth sandbox: err %v, want ErrIPsExhausted", err)
	}
	if err := r.RemoveSandbox(ctx, sbs[2]); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveSandbox(ctx, sbs[2]); err != nil {
		t.Fatalf("second removal: %v", err)
	}
	sb, err := r.RunSandbox(ctx, pod("x"))
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	if sb.IP != sbs[2].IP {
		t.Errorf("freed address not reused: got %s, want %s", sb.IP, sbs[2].IP)
	}
	if n := r.IPsInUse(); n != 5 {
		t.Errorf("IPs in use %d, want 5", n)
	}
}

func TestBadCIDR(t *testing.T) {
	for _, c := range []string{"nope", "10.0.0.0/31", "fd00::/64"} {
		if _, err := New(Config{PodCIDR: c}); err == nil {
			t.Errorf("%q accepted", c)
		}
	}
}

func TestContainerBehaviour(t *testing.T) {
	tests := []struct {
		name     string
		cmd      []string
		args     []string
		exits    bool
		wantCode int32
	}{
		{name: "exit 3", cmd: []string{"sh", "-c", "exit 3"}, exits: true, wantCode: 3},
		{name: "exit 0 in args", cmd: []string{"sh"}, args: []string{"-c", "echo hi; exit 0"}, exits: true, wantCode: 0},
		{name: "short sleep", cmd: []string{"sleep", "0.05"}, exits: true, wantCode: 0},
		{name: "long sleep", cmd: []string{"sleep", "3600"}},
		{name: "server", cmd: []string{"nginx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := New(Config{PodCIDR: "10.42.0.0/24"})
			if err != nil {
				t.Fatal(err)
			}
			sb, err := r.RunSandbox(ctx, pod("u"))
			if err != nil {
				t.Fatal(err)
			}
			id, err := r.CreateContainer(ctx, sb, &pb.Container{Name: "c", Image: "busybox", Command: tt.cmd, Args: tt.args}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			ch, err := r.WaitContainer(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.exits {
				if st, _ := r.ContainerStatus(ctx, id); st.State != agent.StateRunning {
					t.Fatalf("state %s, want running", st.State)
				}
				if err := r.StopContainer(ctx, id, time.Second); err != nil {
					t.Fatal(err)
				}
			}
			st := <-ch
			if st.State != agent.StateExited {
				t.Fatalf("state %s, want exited", st.State)
			}
			want := tt.wantCode
			if !tt.exits {
				want = exitTerm
			}
			if st.ExitCode != want {
				t.Errorf("exit code %d, want %d", st.ExitCode, want)
			}
		})
	}
}

func TestStartDelayHonoursContext(t *testing.T) {
	r, err := New(Config{StartDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sb, _ := r.RunSandbox(ctx, pod("u"))
	id, _ := r.CreateContainer(ctx, sb, &pb.Container{Name: "c"}, 0)
	cancel()
	if err := r.StartContainer(ctx, id); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestImages(t *testing.T) {
	ctx := context.Background()
	r, _ := New(Config{Images: []string{"present"}})
	tests := []struct {
		image, policy string
		pulled        bool
		err           error
	}{
		{"present", "IfNotPresent", false, nil},
		{"present", "Never", false, nil},
		{"present", "Always", true, nil},
		{"absent", "Never", false, agent.ErrImageNeverPull},
		{"absent", "IfNotPresent", true, nil},
		{"absent", "IfNotPresent", false, nil}, // pulled by the previous row
	}
	for _, tt := range tests {
		pulled, err := r.PullImage(ctx, tt.image, tt.policy)
		if pulled != tt.pulled || !errors.Is(err, tt.err) {
			t.Errorf("PullImage(%s, %s) = %v, %v; want %v, %v", tt.image, tt.policy, pulled, err, tt.pulled, tt.err)
		}
	}
}

func TestListAndRemove(t *testing.T) {
	ctx := context.Background()
	r, _ := New(Config{})
	sb, _ := r.RunSandbox(ctx, pod("u"))
	id, _ := r.CreateContainer(ctx, sb, &pb.Container{Name: "c"}, 2)
	if err := r.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	list, _ := r.ListSandboxes(ctx)
	if len(list) != 1 || len(list[0].Containers) != 1 || list[0].Containers[0].Attempt != 2 || list[0].PodUID != "u" {
		t.Fatalf("list = %+v", list)
	}
	if err := r.RemoveSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ContainerStatus(ctx, id); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("container survived its sandbox: %v", err)
	}
	if r.Running() != 0 || r.IPsInUse() != 0 {
		t.Errorf("running %d, ips %d", r.Running(), r.IPsInUse())
	}
}

// The load tests run 100 fake nodes of 50 pods in one process: no goroutine per container.
func TestCheapAtScale(t *testing.T) {
	ctx := context.Background()
	before := runtime.NumGoroutine()
	var rts []*Runtime
	for n := range 100 {
		r, err := New(Config{PodCIDR: fmt.Sprintf("10.42.%d.0/24", n)})
		if err != nil {
			t.Fatal(err)
		}
		rts = append(rts, r)
		for i := range 50 {
			sb, err := r.RunSandbox(ctx, pod(fmt.Sprintf("%d-%d", n, i)))
			if err != nil {
				t.Fatal(err)
			}
			id, err := r.CreateContainer(ctx, sb, &pb.Container{Name: "c", Command: []string{"sleep", "3600"}}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, err := r.WaitContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d := runtime.NumGoroutine() - before; d > 10 {
		t.Errorf("%d goroutines for 5000 containers", d)
	}
	for _, r := range rts {
		if r.Running() != 50 || r.IPsInUse() != 50 {
			t.Fatalf("running %d ips %d", r.Running(), r.IPsInUse())
		}
	}
}
