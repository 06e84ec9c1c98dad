package bus

import (
	"sync"
	"sync/atomic"
)

// unbound counts the consumers of this process that Consume is creating or re-binding after a failed
// pull: while any is, the process does not take all the work it is meant to, and is not ready.
var unbound atomic.Int64

// Unbound is how many of this process's consumers are not bound to their durable consumer right now.
func Unbound() int64 { return unbound.Load() }

// binding counts a consumer as unbound until the returned func is called (once; later calls do nothing).
func binding() (bound func()) {
	unbound.Add(1)
	return sync.OnceFunc(func() { unbound.Add(-1) })
}
