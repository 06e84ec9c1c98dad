package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// runHealth probes a health endpoint and exits 0 when it answers 200. It exists because the podbus image
// is FROM scratch (no curl, no shell), so compose healthchecks run the podbus binary itself.
func runHealth(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("health", flag.ExitOnError)
	url := fs.String("url", "http://127.0.0.1:8081/readyz", "URL to probe")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	quiet := fs.Bool("quiet", true, "print nothing on success")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", *url, resp.Status, body)
	}
	if !*quiet {
		fmt.Printf("%s\n", body)
	}
	return nil
}

// autoPodCIDR picks the first of a process's n pod /24s (one per simulated node, --nodes) inside
// 10.0.0.0/8 from the last two bytes of its first non-loopback IPv4 address, times n. On a container
// network of /16 or smaller (compose's default networks are /16 or /20) those bytes differ between
// containers, so every scaled-out agent gets ranges of its own without configuration. Without an IPv4
// address it falls back to a hash of the hostname (unique with high probability only).
func autoPodCIDR(n int) string {
	var v uint32
	found := false
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() {
				if ip4 := ipn.IP.To4(); ip4 != nil {
					v, found = uint32(ip4[2])<<8|uint32(ip4[3]), true
					break
				}
			}
		}
	}
	if !found {
		host, _ := os.Hostname()
		h := fnv.New32a()
		_, _ = h.Write([]byte(host))
		v = h.Sum32() & 0xffff
	}
	return autoCIDR(v, n)
}

// autoCIDR is the (v*n)-th /24 of 10.0.0.0/8, wrapping around inside it.
func autoCIDR(v uint32, n int) string {
	i := v * uint32(max(n, 1)) & 0xffff
	return fmt.Sprintf("10.%d.%d.0/24", byte(i>>8), byte(i))
}
