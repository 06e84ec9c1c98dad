// Package nodestats reads what a real node's kubelet measures of the machine: CPU time and memory
// from /proc, free space and inodes of a filesystem, the processes running against the PID limit,
// and the node's identity (kernel, OS image, the address of its default-route interface). Every
// reader takes the root of the files it reads, so tests point it at fixtures.
package nodestats

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrFormat is returned for a file whose content is not what the kernel writes.
var ErrFormat = errors.New("nodestats: unexpected format")

// Memory is /proc/meminfo's view of memory, in bytes.
type Memory struct {
	Total, Available uint64
}

// ReadMemory parses root/proc/meminfo.
func ReadMemory(root string) (Memory, error) {
	data, err := os.ReadFile(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	var total, avail bool
	for line := range strings.SplitSeq(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("%w: meminfo %s: %w", ErrFormat, key, err)
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		switch key {
		case "MemTotal":
			m.Total, total = v, true
		case "MemAvailable":
			m.Available, avail = v, true
		}
	}
	if !total || !avail {
		return Memory{}, fmt.Errorf("%w: meminfo without MemTotal or MemAvailable", ErrFormat)
	}
	return m, nil
}

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on every Linux architecture podbus runs on).
const userHZ = 100

// ReadCPUNanos returns the CPU time the machine has spent busy (every state but idle and iowait), in
// nanoseconds of CPU, from the "cpu" line of root/proc/stat.
func ReadCPUNanos(root string) (uint64, error) {
	f, err := os.Open(filepath.Join(root, "proc/stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] != "cpu" {
			continue
		}
		var busy uint64
		// user nice system idle iowait irq softirq steal (guest times are inside user and nice).
		for i, s := range fields[1:min(len(fields), 9)] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: /proc/stat cpu: %w", ErrFormat, err)
			}
			if i != 3 && i != 4 {
				busy += v
			}
		}
		return busy * (1e9 / userHZ), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%w: /proc/stat without a cpu line", ErrFormat)
}

// PIDs are the processes running and how many the kernel allows.
type PIDs struct {
	Running, Max uint64
}

// ReadPIDs reads the number of processes (the fourth field of root/proc/loadavg, "running/total") and
// root/proc/sys/kernel/pid_max.
func ReadPIDs(root string) (PIDs, error) {
	load, err := os.ReadFile(filepath.Join(root, "proc/loadavg"))
	if err != nil {
		return PIDs{}, err
	}
	f := strings.Fields(string(load))
	if len(f) < 4 {
		return PIDs{}, fmt.Errorf("%w: loadavg %q", ErrFormat, load)
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return PIDs{}, fmt.Errorf("%w: loadavg %q", ErrFormat, load)
	}
	var p PIDs
	if p.Running, err = strconv.ParseUint(total, 10, 64); err != nil {
		return PIDs{}, fmt.Errorf("%w: loadavg: %w", ErrFormat, err)
	}
	mx, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/pid_max"))
	if err != nil {
		return PIDs{}, err
	}
	if p.Max, err = strconv.ParseUint(strings.TrimSpace(string(mx)), 10, 64); err != nil {
		return PIDs{}, fmt.Errorf("%w: pid_max: %w", ErrFormat, err)
	}
	return p, nil
}

// FS is a filesystem's capacity and what is left of it for unprivileged use.
type FS struct {
	Bytes, AvailableBytes   uint64
	Inodes, InodesAvailable uint64
}

// ReadFS measures the filesystem holding path.
func ReadFS(path string) (FS, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return FS{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize)
	return FS{Bytes: st.Blocks * bs, AvailableBytes: st.Bavail * bs, Inodes: st.Files, InodesAvailable: st.Ffree}, nil
}

// KernelVersion is root/proc/sys/kernel/osrelease ("6.1.0-28-amd64").
func KernelVersion(root string) string {
	data, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/osrelease"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// OSImage is PRETTY_NAME of root/etc/os-release (then root/usr/lib/os-release), as the kubelet
// reports it; "Linux" when neither says.
func OSImage(root string) string {
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("PRETTY_NAME="))
			if !ok {
				continue
			}
			if s, err := strconv.Unquote(string(v)); err == nil {
				return s
			}
			return strings.Trim(string(v), `"'`)
		}
	}
	return "Linux"
}

// DefaultRouteInterface is the interface of the IPv4 default route in root/proc/net/route ("" if
// there is none).
func DefaultRouteInterface(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "proc/net/route"))
	if err != nil {
		return "", err
	}
	best, bestMetric := "", uint64(1<<63)
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 8 {
			continue // header
		}
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		if f[1] != "00000000" || f[7] != "00000000" {
			continue
		}
		metric, err := strconv.ParseUint(f[6], 10, 64)
		if err != nil {
			return "", fmt.Errorf("%w: route metric %q", ErrFormat, f[6])
		}
		if metric < bestMetric {
			best, bestMetric = f[0], metric
		}
	}
	return best, nil
}

// InternalIP is the first IPv4 address of the default-route interface, as the kubelet picks a node's
// address when none is given; "" when there is no default route.
func InternalIP() (string, error) {
	ifname, err := DefaultRouteInterface("/")
	if err != nil || ifname == "" {
		return "", err
	}
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return "", err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String(), nil
		}
	}
	return "", nil
}
