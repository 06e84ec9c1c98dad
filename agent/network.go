package agent

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/podbus/podbus/internal/ctxtime"
)

// networkCheckTimeout bounds one CNI CHECK (plugin executions).
const networkCheckTimeout = 30 * time.Second

// checkNetworkAsync runs the pod's first network check while its containers start, so that the check
// costs the start nothing unless it is the slower of the two. The channel is closed once it is done.
func (w *podWorker) checkNetworkAsync(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	w.goPod(func() {
		defer close(done)
		// With periodic checks off, this is the only one: it checks everything.
		w.checkNetwork(ctx, w.a.cfg.NetworkCheckInterval >= 0)
	})
	return done
}

// networkLoop re-checks the pod's network every NetworkCheckInterval (jittered, so that a node's pods do
// not all run their plugins at once) and retries a failed check sooner, with back-off. It ends with the
// pod: when ctx ends or the pod finished.
func (w *podWorker) networkLoop(ctx context.Context) {
	interval := w.a.cfg.NetworkCheckInterval
	retry := max(time.Duration(0), interval/10)
	if interval < 0 {
		retry = time.Second
	}
	for {
		w.mu.Lock()
		ok, over := w.netReady, w.finished || w.terminating
		w.mu.Unlock()
		var delay time.Duration
		switch {
		case over:
			return
		case ok && interval < 0:
			return // periodic checks are off and the first one passed
		case ok:
			delay = jitter(interval)
			retry = max(time.Duration(0), interval/10)
		default:
			delay = retry
			retry = min(2*retry, max(interval, time.Second))
		}
		if !ctxtime.Sleep(ctx, delay) {
			return
		}
		if w.checkNetwork(ctx, false) {
			w.reportRetry(ctx)
		}
	}
}

// checkNetwork runs CNI CHECK on the pod's sandbox (only what connectivity rests on when quick, see
// ConnectivityChecker) and records the outcome. It reports whether there is something to report:
// readiness changed, or a failure (with its event).
func (w *podWorker) checkNetwork(ctx context.Context, quick bool) bool {
	w.mu.Lock()
	sb := w.sandbox
	w.mu.Unlock()
	if sb == nil {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, networkCheckTimeout)
	err := w.a.sandboxCheck(quick)(cctx, *sb)
	cancel()
	if ctx.Err() != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// A sandbox being removed (pod finished or terminating) fails its check for good reason.
	if w.sandbox == nil || w.sandbox.ID != sb.ID || w.finished || w.terminating {
		return false
	}
	if err == nil {
		changed := !w.netReady
		if w.netErr != "" {
			w.a.log.Info("pod network check passes again", "pod", w.key())
		}
		w.netReady, w.netErr = true, ""
		return changed
	}
	w.a.log.Warn("pod network check failed", "pod", w.key(), "sandbox", sb.ID, "err", err)
	w.netReady, w.netErr = false, err.Error()
	w.eventLocked("Warning", "FailedCNICheck", "Pod network check (CNI CHECK) failed: "+err.Error(), "")
	return true
}

// jitter spreads d by ±10 %.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	spread := d / 5
	if spread <= 0 {
		return d
	}
	return d - spread/2 + rand.N(spread)
}
