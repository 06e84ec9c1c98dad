package cri

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// MachineCapacity is this machine's cpu (cores) and memory (from /proc/meminfo), as quantities for the
// node's capacity.
func MachineCapacity() (cpu, memory string, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "", "", fmt.Errorf("machine memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// MemTotal:        8129364 kB
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return "", "", fmt.Errorf("machine memory: %q: %w", sc.Text(), err)
			}
			return strconv.Itoa(runtime.NumCPU()), strconv.FormatInt(kb, 10) + "Ki", nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("machine memory: %w", err)
	}
	return "", "", fmt.Errorf("machine memory: no MemTotal in /proc/meminfo")
}
