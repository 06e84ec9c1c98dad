package admission

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// footprint is what a hostile client could make the process keep: goroutines and resident memory.
type footprint struct {
	goroutines int
	rss        int64 // bytes
}

func measure(t *testing.T) footprint {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	var rss int64
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			rss = kb << 10
		}
	}
	return footprint{goroutines: runtime.NumGoroutine(), rss: rss}
}

// Each hostile input gets a bounded answer, and once its clients are gone the process is back to its
// baseline of goroutines and resident memory: nothing a client did stays behind.
func TestHostileInputLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const pods = 2000
	e := start(t, func(c *Config) {
		c.Limits.BodyReadTimeout = 300 * time.Millisecond
		c.Limits.MaxWatchesPerUser = -1
		c.Limits.MaxRequestsInflight = 20
		c.Limits.MaxMutatingRequestsInflight = 10
	}, false)
	e.putPods("default", "p", "web", pods)
	e.mustCreate("target")
	// Warm up every path once, so lazily built state (caches, pools) is part of the baseline.
	warm := &http.Client{Transport: &http.Transport{}}
	get := func(c *http.Client, path string) int {
		resp, err := c.Get(e.base + path)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(warm, "/api/v1/pods?limit=500"); code != 200 {
		t.Fatalf("list: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/api/v1/pods?watch=1&timeoutSeconds=1", nil)
	if resp, err := warm.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	cancel()
	warm.CloseIdleConnections()
	base := measure(t)
	t.Logf("baseline: %d goroutines, RSS %d MiB", base.goroutines, base.rss>>20)

	tests := []struct {
		name string
		// run makes the hostile requests with client and checks each got a bounded answer.
		run func(t *testing.T, client *http.Client)
	}{
		{name: "200 concurrent watches", run: func(t *testing.T, client *http.Client) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			opened := make(chan error, 200)
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/api/v1/pods?watch=1", nil)
					resp, err := client.Do(req)
					if err != nil {
						opened <- err
						return
					}
					defer resp.Body.Close()
					if resp.StatusCode != 200 {
						opened <- fmt.Errorf("watch: %d", resp.StatusCode)
						return
					}
					// Read the initial ADDED events of every pod, then hold the watch open.
					sc := bufio.NewScanner(resp.Body)
					sc.Buffer(make([]byte, 1<<20), 1<<20)
					n := 0
					for n < pods+1 && sc.Scan() {
						n++
					}
					if n < pods+1 {
						opened <- fmt.Errorf("watch sent %d events, want %d", n, pods+1)
						return
					}
					opened <- nil
					<-ctx.Done()
				}()
			}
			for range 200 {
				if err := <-opened; err != nil {
					t.Error(err)
				}
			}
			open := measure(t)
			t.Logf("with 200 watches open: %d goroutines, RSS %d MiB", open.goroutines, open.rss>>20)
			// A watch costs what it sends, not a copy of the store: a few goroutines and buffers each.
			if grew := open.rss - base.rss; grew > 200<<20 {
				t.Errorf("200 watches grew RSS by %d MiB", grew>>20)
			}
			cancel()
			wg.Wait()
		}},
		{name: "50 slow bodies", run: func(t *testing.T, _ *http.Client) {
			var wg sync.WaitGroup
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conn, err := net.Dial("tcp", e.svc.Addr())
					if err != nil {
						t.Error(err)
						return
					}
					defer conn.Close()
					fmt.Fprintf(conn, "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
					_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
					resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
					if err != nil {
						t.Errorf("slow body: no answer: %v", err)
						return
					}
					resp.Body.Close()
					// 408 once the body is late; 429 at once beyond the in-flight limit. Either
					// way the connection is not kept for a body that does not come.
					if resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
						t.Errorf("slow body: %d, want 408 or 429", resp.StatusCode)
					}
				}()
			}
			wg.Wait()
		}},
		{name: "20 doubling JSON patches", run: func(t *testing.T, client *http.Client) {
			body := doublingPatch(64)
			var wg sync.WaitGroup
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequest("PATCH", e.base+"/api/v1/namespaces/default/pods/target", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json-patch+json")
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 413 && resp.StatusCode != 429 {
						t.Errorf("doubling patch: %d, want 413 (or 429 beyond the in-flight limit)", resp.StatusCode)
					}
				}()
			}
			wg.Wait()
		}},
		{name: "500 concurrent lists", run: func(t *testing.T, client *http.Client) {
			var wg sync.WaitGroup
			var mu sync.Mutex
			codes := map[int]int{}
			for range 500 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					code := get(client, "/api/v1/pods")
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			if codes[200] == 0 || codes[200]+codes[429] != 500 {
				t.Errorf("answers %v, want only 200 and 429", codes)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 500}}
			tt.run(t, client)
			client.CloseIdleConnections()
			var now footprint
			deadline := time.Now().Add(30 * time.Second)
			for {
				now = measure(t)
				if now.goroutines <= base.goroutines+5 && now.rss <= base.rss+48<<20 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not back to the baseline: %d goroutines (baseline %d), RSS %d MiB (baseline %d MiB)",
						now.goroutines, base.goroutines, now.rss>>20, base.rss>>20)
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("after: %d goroutines, RSS %d MiB", now.goroutines, now.rss>>20)
		})
	}
}
