package bus

import "sync"

// binds tracks the consumers of this process for readiness: those Consume is creating or re-binding
// after a failed pull (unbound), and the durables it has bound and still works (bound).
var binds = struct {
	sync.Mutex
	unbound int64
	bound   map[string]int
}{bound: map[string]int{}}

// Unbound is how many of this process's consumers are not bound to their durable consumer right now:
// while any is, the process does not take all the work it is meant to.
func Unbound() int64 {
	binds.Lock()
	defer binds.Unlock()
	return binds.unbound
}

// Bound reports whether Consume in this process has bound every one of durables and still works them.
func Bound(durables ...string) bool {
	binds.Lock()
	defer binds.Unlock()
	for _, d := range durables {
		if binds.bound[d] == 0 {
			return false
		}
	}
	return true
}

// binding counts a consumer as unbound until the returned func is called; with ok it then counts
// durable as bound until the func that returns is called. Each func acts once.
func binding(durable string) (done func(ok bool) (unbind func())) {
	binds.Lock()
	binds.unbound++
	binds.Unlock()
	return func(ok bool) func() {
		binds.Lock()
		defer binds.Unlock()
		binds.unbound--
		if !ok {
			return func() {}
		}
		binds.bound[durable]++
		return sync.OnceFunc(func() {
			binds.Lock()
			defer binds.Unlock()
			if binds.bound[durable]--; binds.bound[durable] == 0 {
				delete(binds.bound, durable)
			}
		})
	}
}
