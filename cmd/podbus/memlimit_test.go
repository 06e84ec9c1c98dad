package main

import (
	"errors"
	"math"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name, spec, env string
		machine         int64
		want            int64
		err             error
	}{
		{"auto on a big machine", "auto", "", 24 * gib, 3584 << 20, nil},
		{"auto on a small machine", "auto", "", 2 * gib, 1 * gib, nil},
		{"auto, machine unknown", "", "", 0, 3584 << 20, nil},
		{"auto keeps GOMEMLIMIT", "auto", "2GiB", 24 * gib, -1, nil},
		{"a size wins over GOMEMLIMIT", "1GiB", "2GiB", 24 * gib, 1 * gib, nil},
		{"quantity", "512Mi", "", 0, 512 << 20, nil},
		{"decimal", "1.5G", "", 0, 1_500_000_000, nil},
		{"bytes", "1048576", "", 0, 1 << 20, nil},
		{"off", "off", "2GiB", 0, 0, nil},
		{"garbage", "lots", "", 0, 0, errMemoryLimit},
		{"negative", "-1GiB", "", 0, 0, errMemoryLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := memoryLimit(tt.spec, tt.env, tt.machine)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && got != tt.want {
				t.Errorf("memoryLimit(%q, %q, %d) = %d, want %d", tt.spec, tt.env, tt.machine, got, tt.want)
			}
		})
	}
}

func TestHugePagesOn(t *testing.T) {
	for _, tt := range []struct {
		spec string
		on   bool
		err  error
	}{
		{"", true, nil},
		{"auto", true, nil},
		{" Off ", false, nil},
		{"false", false, nil},
		{"always", false, errHugePages},
	} {
		on, err := hugePagesOn(tt.spec)
		if on != tt.on || !errors.Is(err, tt.err) {
			t.Errorf("hugePagesOn(%q) = %v, %v; want %v, %v", tt.spec, on, err, tt.on, tt.err)
		}
	}
}

func TestHugePagesSize(t *testing.T) {
	const gib = int64(1) << 30
	for _, tt := range []struct {
		name           string
		limit, machine int64
		want           int64
	}{
		{"the limit", 3584 << 20, 24 * gib, 3584 << 20},
		{"half the machine at most", 3584 << 20, 4 * gib, 2 * gib},
		{"machine unknown", 3 * gib, 0, 3 * gib},
		{"whole huge pages", 3*gib + 12345, 0, 3 * gib},
		{"no limit: a quarter of the machine", math.MaxInt64, 24 * gib, 6 * gib},
		{"limit off: a quarter of the machine", 0, 24 * gib, 6 * gib},
		{"no limit, machine unknown: nothing", math.MaxInt64, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := hugePagesSize(tt.limit, tt.machine); got != tt.want {
				t.Errorf("hugePagesSize(%d, %d) = %d, want %d", tt.limit, tt.machine, got, tt.want)
			}
		})
	}
}
