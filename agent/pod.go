package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/internal/ctxtime"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// podWorker owns one pod on the node: its sandbox, its containers, their restarts and probes, and
// its status reports. Its state is guarded by mu; runtime calls and publishes happen without it.
type podWorker struct {
	// requests caches podutil.PodRequests(pod) for admission; written and read with a.mu held.
	requests *pb.Resources
	a        *Agent
	uid      string
	pod      *pb.Pod // as bound; never modified

	started   chan struct{} // closed once the pod's start has settled (see markStarted)
	startOnce sync.Once
	// reporting is closed when the worker sends its first report: from then on the binding need not
	// report ContainerCreating on its own, the worker's report is newer.
	reporting   chan struct{}
	reportingOn sync.Once

	done chan struct{} // closed when the pod's goroutines have all returned
	// live counts the pod's goroutines: the one that starts it, its containers' loops, probes and
	// network checks. The last of them to return ends the pod (end), so none is kept only to wait for
	// the others. Each is started by one already counted, so the count reaches zero once.
	live atomic.Int64
	end  func()

	reportMu sync.Mutex // reports are published one at a time, in seq order

	mu          sync.Mutex
	rejected    bool
	finished    bool // every container done, sandbox removed
	evicted     bool // stopped under node pressure: Failed, whatever the exit codes
	terminating bool
	reason      string
	message     string
	startTime   time.Time
	sandbox     *Sandbox
	ip          string
	initDone    bool
	netReady    bool   // the last CNI CHECK of the sandbox passed (none yet: false)
	netErr      string // why the last CNI CHECK failed, "" when it passed
	init        []*ctr
	ctrs        []*ctr
	conds       map[string]condState
	events      []*pb.EventNote
	vol         volumeState
	// cancel ends the context run gave the pod's goroutines; stopped records a stop that may have
	// come before run did.
	cancel  context.CancelFunc
	stopped bool
}

// ctr is one container of the pod (init or app) across its restarts.
type ctr struct {
	spec        *pb.Container
	init        bool
	id          ContainerID // current runtime container; "" when it must be (re)started
	prevID      ContainerID // the previous attempt, kept for its logs
	idURI       string      // "<runtime>://<id>" as Kubernetes shows it
	imageRef    string
	hasRun      bool
	restarts    int32
	state       *pb.ContainerState
	last        *pb.ContainerStateTerminated
	ready       bool
	started     bool
	done        bool          // exited and will not be restarted
	backoff     time.Duration // next restart delay; 0: the next restart is immediate
	retryIn     time.Duration // delay before the next start attempt
	probeCancel context.CancelFunc
}

type condState struct {
	status string
	at     time.Time
}

func newPodWorker(a *Agent, pod *pb.Pod) *podWorker {
	w := &podWorker{
		a:         a,
		uid:       pod.GetMetadata().GetUid(),
		pod:       pod,
		started:   make(chan struct{}),
		reporting: make(chan struct{}),
		done:      make(chan struct{}),
		conds:     map[string]condState{},
		startTime: time.Now(),
	}
	// As the kubelet: with init containers, every container not yet started waits in PodInitializing.
	waiting := "ContainerCreating"
	if len(pod.GetSpec().GetInitContainers()) > 0 {
		waiting = "PodInitializing"
	}
	for _, c := range pod.GetSpec().GetInitContainers() {
		w.init = append(w.init, &ctr{spec: c, init: true, state: waitingState(waiting, "")})
	}
	if len(w.init) == 0 {
		w.initDone = true
	}
	for _, c := range pod.GetSpec().GetContainers() {
		w.ctrs = append(w.ctrs, &ctr{spec: c, state: waitingState(waiting, "")})
	}
	return w
}

func waitingState(reason, msg string) *pb.ContainerState {
	return &pb.ContainerState{Waiting: &pb.ContainerStateWaiting{Reason: reason, Message: msg}}
}

// reject marks the pod as refused by admission; it never runs.
func (w *podWorker) reject(reason, msg string) {
	w.mu.Lock()
	w.rejected, w.reason, w.message = true, reason, msg
	w.eventLocked("Warning", reason, strings.TrimPrefix(msg, "Pod was rejected: "), "")
	w.mu.Unlock()
	w.markStarted()
	close(w.done)
}

// active reports whether the pod holds node resources (for admission).
func (w *podWorker) active() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.rejected && !w.finished
}

func (w *podWorker) markStarted() { w.startOnce.Do(func() { close(w.started) }) }

// run starts the pod in the caller's goroutine and leaves it to the goroutines it started: the last of
// them to return ends the pod, then calls ended. info is the runtime's state when the pod is re-adopted
// after a restart.
func (w *podWorker) run(parent context.Context, info *SandboxInfo, ended func()) {
	ctx, cancel := context.WithCancel(parent)
	w.mu.Lock()
	w.cancel = cancel
	stopped := w.stopped
	w.mu.Unlock()
	if stopped {
		cancel()
	}
	w.end = func() {
		w.endFailed(parent)
		cancel()
		w.markStarted()
		close(w.done)
		ended()
	}
	w.live.Add(1)
	defer w.leave()
	if info != nil && w.adopt(ctx, *info) {
		return
	}
	w.start(ctx)
}

// stop ends the pod's goroutines (terminate, fail): at once when the pod runs, as it starts otherwise.
func (w *podWorker) stop() {
	w.mu.Lock()
	w.stopped = true
	cancel := w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// goPod runs f in a new goroutine of the pod. Only the pod's goroutines may call it.
func (w *podWorker) goPod(f func()) {
	w.live.Add(1)
	w.goCounted(f)
}

// goCounted runs f in a new goroutine that takes over a count already added to live.
func (w *podWorker) goCounted(f func()) {
	go func() {
		defer w.leave()
		f()
	}()
}

// leave ends one of the pod's goroutines; the last one ends the pod.
func (w *podWorker) leave() {
	if w.live.Add(-1) == 0 {
		w.end()
	}
}

// start runs the pod from scratch: sandbox, init containers in order, then the containers.
func (w *podWorker) start(ctx context.Context) {
	if !w.runSandbox(ctx) || !w.mountVolumes(ctx) {
		return
	}
	// The pod is not Ready before its network passed a check; the check runs while containers start.
	checked := w.checkNetworkAsync(ctx)
	for _, c := range w.init {
		if !w.runInit(ctx, c) {
			return
		}
	}
	w.mu.Lock()
	w.initDone = true
	w.mu.Unlock()
	for _, c := range w.ctrs {
		if err := w.startContainer(ctx, c); err != nil && ctx.Err() != nil {
			return
		}
	}
	select {
	case <-checked:
	case <-ctx.Done():
		return
	}
	w.reportRetry(ctx)
	w.markStarted()
	w.loops(ctx)
}

func (w *podWorker) loops(ctx context.Context) {
	w.goPod(func() { w.networkLoop(ctx) })
	w.goPod(func() { w.volumeLoop(ctx) })
	for _, c := range w.ctrs {
		w.goPod(func() { w.loop(ctx, c) })
	}
}

// runSandbox creates the sandbox, retrying with back-off while reporting the failure.
func (w *podWorker) runSandbox(ctx context.Context) bool {
	delay := w.a.cfg.BackoffBase / 10
	for {
		sb, err := w.a.rt.RunSandbox(ctx, w.pod)
		if err == nil {
			w.mu.Lock()
			w.sandbox, w.ip = &sb, sb.IP
			w.mu.Unlock()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.a.log.Warn("create pod sandbox failed", "pod", w.key(), "err", err)
		if !w.backOff(ctx, "FailedCreatePodSandBox", "Failed to create pod sandbox: "+err.Error(), &delay) {
			return false
		}
	}
}

// runInit runs one init container to successful completion, restarting it as the policy says.
// It returns false when the pod cannot go on (stopped, or failed for good).
func (w *podWorker) runInit(ctx context.Context, c *ctr) bool {
	for {
		if !w.retryWait(ctx, c) {
			return false
		}
		if err := w.startContainer(ctx, c); err != nil {
			if ctx.Err() != nil {
				return false
			}
			w.reportRetry(ctx)
			w.markStarted()
			continue
		}
		w.removePrevious(ctx, c)
		w.reportRetry(ctx)
		w.markStarted()
		st, ok := w.wait(ctx, c)
		if !ok {
			return false
		}
		restart := w.onExit(c, st)
		if st.ExitCode == 0 {
			w.mu.Lock()
			c.done = true
			w.mu.Unlock()
			return true
		}
		if !restart {
			w.finish(ctx)
			return false
		}
		w.scheduleRestart(c)
		w.reportRetry(ctx)
	}
}

// loop watches one app container: exits, restarts with back-off, and the pod's end.
func (w *podWorker) loop(ctx context.Context, c *ctr) {
	for {
		w.mu.Lock()
		id, done := c.id, c.done
		w.mu.Unlock()
		if done {
			return
		}
		if id == "" {
			if !w.retryWait(ctx, c) {
				return
			}
			err := w.startContainer(ctx, c)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				w.removePrevious(ctx, c)
			}
			w.reportRetry(ctx)
			if err != nil {
				continue
			}
		}
		if w.waitDetached(ctx, c) {
			return
		}
		st, ok := w.wait(ctx, c)
		if !ok || !w.exited(ctx, c, st) {
			return
		}
	}
}

// exited takes in an app container's exit and says whether its loop goes on (a restart).
func (w *podWorker) exited(ctx context.Context, c *ctr, st ContainerStatus) bool {
	if !w.onExit(c, st) {
		if w.allDone() {
			w.finish(ctx)
		} else {
			w.reportRetry(ctx)
		}
		return false
	}
	w.scheduleRestart(c)
	w.reportRetry(ctx)
	return true
}

// waitDetached hands the wait for c's exit to a runtime that calls back (ExitNotifier), so that no
// goroutine is parked while the container runs: the exit resumes c's loop in a goroutine of its own,
// and the pod's end (ctx) lets the wait go. The wait counts as one of the pod's goroutines until then.
// It returns false when the runtime cannot, and the caller waits itself.
func (w *podWorker) waitDetached(ctx context.Context, c *ctr) bool {
	n, ok := w.a.rt.(ExitNotifier)
	if !ok {
		return false
	}
	w.mu.Lock()
	id := c.id
	w.mu.Unlock()
	// Exactly one of the exit and the pod's end takes the wait over.
	var taken atomic.Bool
	w.live.Add(1)
	stop := context.AfterFunc(ctx, func() {
		if taken.CompareAndSwap(false, true) {
			w.leave()
		}
	})
	err := n.NotifyExit(id, func(st ContainerStatus) {
		if !taken.CompareAndSwap(false, true) {
			return
		}
		stop()
		w.goCounted(func() {
			if w.exited(ctx, c, st) {
				w.loop(ctx, c)
			}
		})
	})
	if err != nil && stop() {
		// The caller, still counted, waits itself: wait takes a vanished container as a failed exit.
		w.live.Add(-1)
		return false
	}
	return true
}

// wait blocks until the container exits (false when ctx ends first).
func (w *podWorker) wait(ctx context.Context, c *ctr) (ContainerStatus, bool) {
	w.mu.Lock()
	id := c.id
	w.mu.Unlock()
	ch, err := w.a.rt.WaitContainer(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return ContainerStatus{}, false
		}
		// The container vanished under us: treat it as a failed exit so the policy decides.
		return ContainerStatus{ID: id, State: StateExited, ExitCode: 128, Reason: "ContainerStatusUnknown",
			Message: err.Error(), FinishedAt: time.Now()}, true
	}
	select {
	case st := <-ch:
		return st, true
	case <-ctx.Done():
		return ContainerStatus{}, false
	}
}

// onExit records a container's exit and says whether the restart policy restarts it.
func (w *podWorker) onExit(c *ctr, st ContainerStatus) (restart bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.probeCancel != nil {
		c.probeCancel()
		c.probeCancel = nil
	}
	reason := st.Reason
	if reason == "" {
		reason = "Error"
		if st.ExitCode == 0 {
			reason = "Completed"
		}
	}
	term := &pb.ContainerStateTerminated{
		ExitCode: st.ExitCode, Reason: reason, Message: st.Message, ContainerId: c.idURI,
		StartedAt: tsOrNil(st.StartedAt), FinishedAt: tsOrNil(st.FinishedAt),
	}
	c.state = &pb.ContainerState{Terminated: term}
	c.ready, c.started = false, false
	if w.terminating {
		c.done = true
		return false
	}
	switch w.pod.GetSpec().GetRestartPolicy() {
	case "Never":
		restart = false
	case "OnFailure":
		restart = st.ExitCode != 0
	default:
		restart = true
	}
	if c.init && st.ExitCode == 0 {
		restart = false
	}
	if !restart {
		c.done = true
		return false
	}
	// Back-off resets once a container ran long enough, as the kubelet's does.
	if !st.StartedAt.IsZero() && st.FinishedAt.Sub(st.StartedAt) > 2*w.a.cfg.BackoffMax {
		c.backoff = 0
	}
	return true
}

// scheduleRestart moves an exited container to waiting (CrashLoopBackOff when delayed).
func (w *podWorker) scheduleRestart(c *ctr) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.last = c.state.GetTerminated()
	c.prevID, c.id = c.id, ""
	// The first restart is immediate; then base, doubling up to max (kubelet's doBackOff).
	delay := c.backoff
	if c.backoff == 0 {
		c.backoff = w.a.cfg.BackoffBase
	} else {
		c.backoff = min(2*c.backoff, w.a.cfg.BackoffMax)
	}
	c.retryIn = delay
	if delay > 0 {
		msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", delay, c.spec.GetName(), w.podRef())
		c.state = waitingState("CrashLoopBackOff", msg)
		w.eventLocked("Warning", "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s", c.spec.GetName(), w.podRef()), fieldPath(c))
	}
}

// retryWait waits c.retryIn before the container's next start. A failed pull shows ErrImagePull first,
// then ImagePullBackOff for the rest of the wait, as the kubelet's statuses do.
func (w *podWorker) retryWait(ctx context.Context, c *ctr) bool {
	w.mu.Lock()
	delay := c.retryIn
	pullFailed := c.state.GetWaiting().GetReason() == "ErrImagePull"
	w.mu.Unlock()
	if !pullFailed || delay <= 0 {
		return ctxtime.Sleep(ctx, delay)
	}
	if !ctxtime.Sleep(ctx, delay/4) {
		return false
	}
	w.mu.Lock()
	if c.state.GetWaiting().GetReason() == "ErrImagePull" {
		image := c.spec.GetImage()
		c.state = waitingState("ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q: %s", image, c.state.GetWaiting().GetMessage()))
		w.eventLocked("Normal", "BackOff", fmt.Sprintf("Back-off pulling image %q", image), fieldPath(c))
	}
	w.mu.Unlock()
	w.reportRetry(ctx)
	return ctxtime.Sleep(ctx, delay-delay/4)
}

// removePrevious removes the previous attempt once its successor started: until then it is the
// container `kubectl logs` reads; after, its log file is read as --previous of the running one.
func (w *podWorker) removePrevious(ctx context.Context, c *ctr) {
	w.mu.Lock()
	prev := c.prevID
	w.mu.Unlock()
	if prev == "" {
		return
	}
	if err := w.a.rt.RemoveContainer(ctx, prev); err != nil && !errors.Is(err, ErrNotFound) {
		w.a.log.Warn("remove dead container", "pod", w.key(), "container", prev, "err", err)
	}
}

// startContainer pulls, creates and starts one container, recording events and its state.
func (w *podWorker) startContainer(ctx context.Context, c *ctr) error {
	name, image := c.spec.GetName(), c.spec.GetImage()
	policy := c.spec.GetImagePullPolicy()
	if policy == "" {
		policy = "IfNotPresent"
	}
	fail := func(reason, evReason, evMsg string, err error) error {
		w.mu.Lock()
		c.state = waitingState(reason, err.Error())
		c.retryIn = w.retryDelay(c)
		w.eventLocked("Warning", evReason, evMsg, fieldPath(c))
		w.mu.Unlock()
		return err
	}
	pulled, err := w.a.rt.PullImage(ctx, image, policy)
	if err != nil {
		if errors.Is(err, ErrImageNeverPull) {
			return fail("ErrImageNeverPull", "ErrImageNeverPull",
				fmt.Sprintf("Container image %q is not present with pull policy of Never", image), err)
		}
		return fail("ErrImagePull", "Failed", fmt.Sprintf("Failed to pull image %q: %v", image, err), err)
	}
	w.mu.Lock()
	sb := w.sandbox
	attempt := c.restarts
	if c.hasRun {
		attempt++
	}
	if pulled {
		w.eventLocked("Normal", "Pulling", fmt.Sprintf("Pulling image %q", image), fieldPath(c))
		w.eventLocked("Normal", "Pulled", fmt.Sprintf("Successfully pulled image %q", image), fieldPath(c))
	} else {
		w.eventLocked("Normal", "Pulled", fmt.Sprintf("Container image %q already present on machine", image), fieldPath(c))
	}
	w.mu.Unlock()
	if sb == nil {
		return fail("CreateContainerError", "Failed", "Error: no sandbox", errors.New("no sandbox"))
	}
	id, err := w.a.rt.CreateContainer(ctx, *sb, c.spec, attempt)
	if errors.Is(err, ErrContainerConfig) {
		return fail("CreateContainerConfigError", "Failed", "Error: "+configMessage(err), errors.New(configMessage(err)))
	}
	if err != nil {
		return fail("CreateContainerError", "Failed", "Error: "+err.Error(), err)
	}
	w.mu.Lock()
	w.eventLocked("Normal", "Created", "Created container "+name, fieldPath(c))
	w.mu.Unlock()
	if err := w.a.rt.StartContainer(ctx, id); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = w.a.rt.RemoveContainer(cctx, id)
		cancel()
		return fail("RunContainerError", "Failed", "Error: failed to start container: "+err.Error(), err)
	}
	hookErr := w.postStart(ctx, c, id)
	st, err := w.a.rt.ContainerStatus(ctx, id)
	if err != nil {
		st = ContainerStatus{StartedAt: time.Now(), ImageRef: image}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if hookErr != nil {
		defer func() { c.ready = false }() // killed: the wait that follows sees it exit
	}
	w.eventLocked("Normal", "Started", "Started container "+name, fieldPath(c))
	if c.hasRun {
		c.restarts++
	}
	c.hasRun = true
	c.id, c.idURI, c.imageRef = id, w.a.containerURI(id), st.ImageRef
	c.state = &pb.ContainerState{Running: &pb.ContainerStateRunning{StartedAt: tsOrNil(st.StartedAt)}}
	c.ready = c.spec.GetReadinessProbe() == nil && !c.init
	c.started = c.spec.GetStartupProbe() == nil
	c.retryIn = 0
	w.startProbesLocked(ctx, c, id)
	return nil
}

// retryDelay is the back-off before retrying a container that failed to start. Called with w.mu held.
func (w *podWorker) retryDelay(c *ctr) time.Duration {
	d := c.backoff
	if d == 0 {
		d = w.a.cfg.BackoffBase
	}
	c.backoff = min(2*d, w.a.cfg.BackoffMax)
	return d
}

func (w *podWorker) allDone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.ctrs {
		if !c.done {
			return false
		}
	}
	return !w.finished
}

// finish ends a pod whose containers are all done: Succeeded or Failed, sandbox removed (IP released).
func (w *podWorker) finish(ctx context.Context) {
	w.mu.Lock()
	if w.finished || w.terminating {
		w.mu.Unlock()
		return
	}
	w.finished = true
	w.a.recount()
	sb := w.sandbox
	w.mu.Unlock()
	if sb != nil {
		if err := w.a.rt.RemoveSandbox(ctx, *sb); err != nil {
			w.a.log.Warn("remove sandbox of finished pod", "pod", w.key(), "err", err)
		}
	}
	w.mu.Lock()
	w.sandbox = nil
	w.mu.Unlock()
	w.reportRetry(ctx)
	w.markStarted()
}

// terminate stops the pod's goroutines, then its containers within grace, then removes its sandbox.
func (w *podWorker) terminate(ctx context.Context, grace time.Duration) error {
	w.mu.Lock()
	w.terminating = true
	w.mu.Unlock()
	w.stop()
	select {
	case <-w.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.mu.Lock()
	sb := w.sandbox
	var running []*ctr
	for _, c := range append(append([]*ctr{}, w.init...), w.ctrs...) {
		if c.id != "" && c.state.GetRunning() != nil {
			running = append(running, c)
			w.eventLocked("Normal", "Killing", "Stopping container "+c.spec.GetName(), fieldPath(c))
		}
	}
	w.mu.Unlock()
	errs := make([]error, len(running))
	var wg sync.WaitGroup
	for i, c := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.a.rt.StopContainer(ctx, c.id, w.preStop(ctx, c, c.id, grace)); err != nil && !errors.Is(err, ErrNotFound) {
				errs[i] = fmt.Errorf("stop container %s of pod %s: %w", c.spec.GetName(), w.key(), err)
				return
			}
			if st, err := w.a.rt.ContainerStatus(ctx, c.id); err == nil {
				w.onExit(c, st)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if sb != nil {
		if err := w.a.rt.RemoveSandbox(ctx, *sb); err != nil {
			return fmt.Errorf("remove sandbox of pod %s: %w", w.key(), err)
		}
	}
	w.mu.Lock()
	w.sandbox = nil
	w.mu.Unlock()
	return nil
}

// adopt rebuilds the worker from what the runtime still runs after an agent restart. It returns false
// when the pod must start from scratch (the sandbox was broken or init had not completed; both removed).
func (w *podWorker) adopt(ctx context.Context, info SandboxInfo) bool {
	fresh := func(why string, err error) bool {
		w.a.log.Info("restarting pod from scratch", "pod", w.key(), "why", why, "err", err)
		if err := w.a.removeLeftover(ctx, info); err != nil {
			w.a.log.Warn("remove sandbox", "pod", w.key(), "err", err)
		}
		return false
	}
	if err := w.a.rt.CheckSandbox(ctx, info.Sandbox); err != nil {
		return fresh("sandbox check failed", err)
	}
	latest := map[string]ContainerStatus{}
	for _, cs := range info.Containers {
		if old, ok := latest[cs.Name]; !ok || cs.Attempt >= old.Attempt {
			latest[cs.Name] = cs
		}
	}
	for _, c := range w.init {
		if st, ok := latest[c.spec.GetName()]; !ok || st.State != StateExited || st.ExitCode != 0 {
			return fresh("init containers incomplete", nil)
		}
	}
	w.mu.Lock()
	sb := info.Sandbox
	w.sandbox, w.ip, w.initDone, w.netReady = &sb, sb.IP, true, true
	if !sb.CreatedAt.IsZero() {
		w.startTime = sb.CreatedAt
	}
	for _, c := range w.init {
		st := latest[c.spec.GetName()]
		c.done, c.hasRun, c.id, c.idURI, c.imageRef = true, true, st.ID, w.a.containerURI(st.ID), st.ImageRef
		c.state = &pb.ContainerState{Terminated: &pb.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
			StartedAt: tsOrNil(st.StartedAt), FinishedAt: tsOrNil(st.FinishedAt), ContainerId: c.idURI}}
	}
	var stale []ContainerID
	for _, c := range w.ctrs {
		st, ok := latest[c.spec.GetName()]
		if !ok {
			continue // never created: the loop starts it
		}
		c.restarts, c.hasRun = st.Attempt, true
		c.idURI, c.imageRef = w.a.containerURI(st.ID), st.ImageRef
		switch st.State {
		case StateRunning:
			c.id = st.ID
			c.state = &pb.ContainerState{Running: &pb.ContainerStateRunning{StartedAt: tsOrNil(st.StartedAt)}}
			c.ready = c.spec.GetReadinessProbe() == nil
			c.started = c.spec.GetStartupProbe() == nil
			w.startProbesLocked(ctx, c, st.ID)
		case StateExited:
			c.id = st.ID // the loop sees the exit at once and applies the restart policy
		default:
			stale = append(stale, st.ID) // created but never started
			c.hasRun = st.Attempt > 0
			if st.Attempt > 0 {
				c.restarts = st.Attempt - 1
			}
		}
	}
	w.mu.Unlock()
	for _, id := range stale {
		_ = w.a.rt.RemoveContainer(ctx, id)
	}
	w.reportRetry(ctx)
	w.markStarted()
	w.loops(ctx)
	return true
}

// report publishes the pod's current status (and the events gathered since the last report).
func (w *podWorker) report(ctx context.Context, gone bool) error {
	w.reportMu.Lock()
	defer w.reportMu.Unlock()
	w.mu.Lock()
	st := w.statusLocked(time.Now())
	evs := w.events
	w.events = nil
	w.mu.Unlock()
	md := w.pod.GetMetadata()
	rep := &pb.PodStatusReport{
		Uid: w.uid, Namespace: md.GetNamespace(), Name: md.GetName(), Node: w.a.cfg.Node,
		Seq: w.a.nextSeq(), Status: st, Gone: gone, Events: evs,
	}
	if err := w.a.publishReport(ctx, rep, w.pod.GetInternal().GetCorrelationId()); err != nil {
		w.mu.Lock()
		w.events = append(evs, w.events...)
		w.mu.Unlock()
		return err
	}
	return nil
}

// reportRetry reports from the pod's goroutines, retrying until it is stored or ctx ends.
func (w *podWorker) reportRetry(ctx context.Context) {
	w.reportingOn.Do(func() { close(w.reporting) })
	delay := 100 * time.Millisecond
	for {
		err := w.report(ctx, false)
		if err == nil || ctx.Err() != nil {
			return
		}
		w.a.log.Warn("status report failed; retrying", "pod", w.key(), "err", err)
		if !ctxtime.Sleep(ctx, delay) {
			return
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// eventLocked queues an event note for the next report. Called with w.mu held.
func (w *podWorker) eventLocked(typ, reason, msg, fieldPath string) {
	w.events = append(w.events, &pb.EventNote{Type: typ, Reason: reason, Message: msg, FieldPath: fieldPath, At: timestamppb.Now()})
}

func (w *podWorker) key() string {
	return w.pod.GetMetadata().GetNamespace() + "/" + w.pod.GetMetadata().GetName()
}

// podRef is the kubelet's format.Pod: name_namespace(uid).
func (w *podWorker) podRef() string {
	md := w.pod.GetMetadata()
	return fmt.Sprintf("%s_%s(%s)", md.GetName(), md.GetNamespace(), md.GetUid())
}

func fieldPath(c *ctr) string {
	if c.init {
		return "spec.initContainers{" + c.spec.GetName() + "}"
	}
	return "spec.containers{" + c.spec.GetName() + "}"
}

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func podGrace(p *pb.Pod) time.Duration {
	if p.GetSpec().TerminationGracePeriodSeconds != nil {
		return time.Duration(p.GetSpec().GetTerminationGracePeriodSeconds()) * time.Second
	}
	return 30 * time.Second
}

// backOff records a Warning event reason with msg, reports the pod still waiting, and sleeps delay,
// which it then doubles up to BackoffMax; false when ctx ended meanwhile.
func (w *podWorker) backOff(ctx context.Context, reason, msg string, delay *time.Duration) bool {
	w.mu.Lock()
	w.eventLocked("Warning", reason, msg, "")
	w.mu.Unlock()
	w.reportRetry(ctx)
	w.markStarted()
	if !ctxtime.Sleep(ctx, *delay) {
		return false
	}
	*delay = min(2**delay, w.a.cfg.BackoffMax)
	return true
}
