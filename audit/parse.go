package audit

import (
	"fmt"
	"strings"
	"time"
)

// ParseTime reads a point in time for --since/--until: RFC 3339 ("2026-11-30T15:00:00Z"), or a
// duration meaning that long before now ("15m", "2h"). Empty gives the zero time.
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(strings.TrimSuffix(s, " ago")); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-11-30T15:00:00Z) or a duration before now (15m)", s)
}

// ParsePodRef reads "namespace/name" or "name" (namespace default).
func ParsePodRef(s string) (namespace, name string, err error) {
	ns, n, found := strings.Cut(s, "/")
	if !found {
		ns, n = "default", s
	}
	if ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("pod %q: want namespace/name", s)
	}
	return ns, n, nil
}
