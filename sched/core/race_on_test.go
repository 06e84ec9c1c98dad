//go:build race

package core

// raceEnabled: the race detector makes sync.Pool drop items, so allocation counts mean nothing.
const raceEnabled = true
