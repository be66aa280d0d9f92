package runtime

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"berth/queue"
	"berth/store"
)

// One autoscaler pass over an endpoint is a pure decision, planPass, and
// an executor, Supervisor.scaleEndpoint, that carries the plan out. The
// planner reads a snapshot (the endpoint, its workers with the queue's view
// of each, the queue's stats, what the GPUs allow, the clock) and returns
// every change: workers' new states, drains and kills, freezes and thaws,
// how many workers to start, FlashBoot evictions, and what the endpoint's
// status says. It touches nothing, so each rule is table-tested
// (plan_test.go, autoscaler_test.go) without Docker.

// workerSnap is one worker as the planner sees it: the Supervisor's record
// and the queue's view of it.
type workerSnap struct {
	id        string
	state     wstate
	current   bool // runs the endpoint's current version and spec
	contacted bool
	running   int
	idleSince time.Time
	// launchedAt: its instance was started (or accepted); startedAt: it
	// runs since, zero while it waits for a node or its image.
	launchedAt time.Time
	startedAt  time.Time
	frozenAt   time.Time
	stopsSeen  map[string]time.Time
	drainKind  drainKind // while state.stopping()
	// waiting and waitReason: why its pending instance cannot run
	// (WaitingUnschedulable, WaitingImage).
	waiting, waitReason string
	// adoptSighting: the queue's sighting of a worker adopted before its
	// instance ran (the grace the queue gives every worker it loads at a
	// start): no contact. Only a later sighting is one.
	adoptSighting time.Time

	load  queue.WorkerLoad // the queue's view
	known bool             // the queue lists the worker
	stops []string         // jobs it was told to stop, still pending on its job-stop
}

// workerObs is a worker's record after the queue's view was applied.
type workerObs struct {
	id           string
	state        wstate // a serving state follows the queue; others are kept
	contacted    bool
	firstContact bool // contacted Berth for the first time in this pass
	running      int
	idleSince    time.Time
	stopsSeen    map[string]time.Time
	fault        string // why it must be killed, "" when it need not
}

// observeLimits are the fault thresholds of observeWorker.
type observeLimits struct {
	initTimeout      time.Duration // no contact this long after starting: a failed start
	stopIgnoredAfter time.Duration // a job-stop pending this long: the worker ignores stops
	workerBaseURL    string        // named in the init-timeout fault
}

// observeWorker applies the queue's view to one worker: its first contact,
// its activity (initializing, idle, running: the serving states) and the
// faults that get it killed — it stopped contacting Berth, its image
// cannot be pulled, it never contacted Berth within initTimeout of
// starting (or of its launch, if it never ran; a worker waiting for a node
// is throttled, not late), or it ignored a job's stop for
// stopIgnoredAfter. A worker still starting is not looked at;
// frozen and draining workers keep their state (a frozen worker is silent
// by design, never lost) but their jobs are counted.
func observeWorker(w workerSnap, now time.Time, lim observeLimits) workerObs {
	o := workerObs{id: w.id, state: w.state, contacted: w.contacted, running: w.running,
		idleSince: w.idleSince, stopsSeen: w.stopsSeen}
	if w.state == wsStarting || w.state == wsCancelled || w.state == wsExited {
		return o
	}
	// An instance accepted but not run yet (a Pod waiting for its node or
	// image) cannot have contacted Berth: the queue's sighting is the grace
	// it gives every worker it loads at a start.
	notRunYet := w.startedAt.IsZero() && !w.launchedAt.IsZero()
	// Once it runs, that sighting is still no contact (the queue may even
	// have counted it lost by then): killing it for silence before it
	// could speak would kill a healthy worker.
	sighted := w.known && !w.load.LastSeen.IsZero() && (w.adoptSighting.IsZero() || w.load.LastSeen.After(w.adoptSighting))
	if sighted && !o.contacted && !notRunYet {
		o.contacted, o.firstContact = true, true
	}
	wasIdle := w.contacted && w.running == 0 && w.state != wsInitializing
	activity := wsInitializing
	switch {
	case !o.contacted:
	case w.known && w.load.Running > 0:
		activity, o.running, o.idleSince = wsRunning, w.load.Running, time.Time{}
	default:
		if !wasIdle || o.idleSince.IsZero() {
			o.idleSince = now
		}
		activity, o.running = wsIdle, 0
	}
	if !w.state.serving() {
		return o
	}
	o.state = activity
	fault := ""
	switch {
	case o.contacted && (!w.known || w.load.Lost):
		fault = "the worker stopped contacting Berth (no heartbeat within the worker timeout)"
	case o.contacted:
	case w.waiting == WaitingImage:
		fault = "its container cannot start: " + w.waitReason
	case w.waiting == WaitingUnschedulable:
	case !w.startedAt.IsZero() && now.Sub(w.startedAt) > lim.initTimeout:
		fault = fmt.Sprintf("the worker did not contact Berth within %s of starting; can the container reach %s?",
			lim.initTimeout, lim.workerBaseURL)
	case w.startedAt.IsZero() && !w.launchedAt.IsZero() && now.Sub(w.launchedAt) > lim.initTimeout:
		fault = fmt.Sprintf("the worker did not start within %s of its launch", lim.initTimeout)
		if w.waitReason != "" {
			fault += ": " + w.waitReason
		}
	}
	// Jobs told to stop but never fetched from job-stop (workers older
	// than runpod-python 1.10 have no stop channel).
	seen := map[string]time.Time{}
	for _, id := range w.stops {
		first, ok := w.stopsSeen[id]
		if !ok {
			first = now
		}
		seen[id] = first
		if fault == "" && now.Sub(first) >= lim.stopIgnoredAfter {
			fault = fmt.Sprintf("the worker ignored the stop of job %s for %s", id, lim.stopIgnoredAfter)
		}
	}
	o.stopsSeen = seen
	o.fault = fault
	return o
}

// gpuInput is what the GPUs allow an endpoint's new workers.
type gpuInput struct {
	need    bool   // the workers get GPUs (a GPU endpoint on a machine with GPUs)
	warning string // a GPU endpoint on a machine without GPUs runs on CPU
	typeErr string // the machine can never give these GPUs (unknown type, too few)
	// fit is how many new workers' GPUs are free now; short describes
	// what one worker wants and what is free, for the status.
	fit   int
	short string
	// evictable: stopping frozen (FlashBoot) workers, or evictions under
	// way, would free one worker's GPUs.
	evictable bool
}

// healthInput is the endpoint's start history the planner gates on.
type healthInput struct {
	specKey   string    // spec of the last pass ("" before the first)
	nextStart time.Time // back-off: no start before
	unhealthy bool      // failed starts in a row: one probe at a time
	// exiting: a worker's container has stopped and its exit is being
	// handled; whether it was a failed start or a crash, and so the
	// back-off, is not known yet (the handler notifies when it is).
	exiting bool
}

// passInput is everything one autoscaler pass over an endpoint depends on.
type passInput struct {
	now       time.Time
	ep        store.Endpoint
	specKey   string
	configErr string // the template cannot make workers ("" when it can)
	// models: the endpoint's models are not complete (their progress);
	// modelsOK: Berth can give workers models at all.
	models   string
	modelsOK bool
	// noVolumeDir: the endpoint has a network volume but Berth has no
	// volume directory; diskWarn: containerDiskInGb is not enforced.
	noVolumeDir bool
	diskWarn    string
	gpu         gpuInput
	// canPause: the backend can freeze workers (FlashBoot); runtime is its
	// name, for the status when it cannot.
	canPause bool
	runtime  string
	place    string // Caps.Place
	health   healthInput
	stats    queue.QueueStats
	workers  []workerSnap
	lim      observeLimits
	// drainGrace is the endpoint's drain grace (see Supervisor.drainGrace).
	drainGrace time.Duration
}

// drainPlan asks for one worker to be drained (or killed: kind drainFault).
type drainPlan struct {
	id string
	drain
}

// passPlan is what one pass does.
type passPlan struct {
	// resetHealth: the endpoint's spec changed, so its failures, crashes,
	// back-off and unhealthy mark are cleared (a new configuration
	// deserves a fresh try). contacted: a worker contacted Berth for the
	// first time, which clears failures and the unhealthy mark.
	resetHealth, contacted bool
	configErr, warning     string
	models                 string // starts wait for the models (their progress)
	observed               []workerObs
	drains                 []drainPlan // kills first
	freeze, thaw           []string
	start                  int
	// throttled new workers wait for GPUs; throttle says why. evict asks
	// for the frozen workers holding the GPUs to be evicted.
	throttled int
	throttle  string
	evict     bool
	want      int
	maxReason string
}

// throttledEvicting is the status while frozen workers are evicted for a
// start's GPUs.
const throttledEvicting = "waiting for free GPUs: evicting frozen (flashboot) workers that hold them"

// planPass decides one autoscaler pass over an endpoint:
//
//   - the queue's view updates each worker (observeWorker); faulty ones
//     are killed;
//   - planScale decides starts, drains, freezes and thaws;
//   - starts are held back by a configuration error (nothing starts until
//     it changes), by the back-off after failures (and while an exit is
//     being handled, which may set one), and on an unhealthy
//     endpoint to one worker at a time, none while one is still starting;
//   - FlashBoot where the backend cannot pause is off, and the status
//     says so;
//   - starts beyond the free GPUs are throttled: frozen workers holding
//     GPUs are evicted for them, or else, during a rolling update on a
//     full machine, one old worker is drained to make room.
func planPass(in passInput) passPlan {
	var p passPlan
	ep := in.ep
	p.resetHealth = in.health.specKey != in.specKey
	unhealthy, nextStart := in.health.unhealthy, in.health.nextStart
	if p.resetHealth {
		unhealthy, nextStart = false, time.Time{}
	}

	p.configErr = in.configErr
	p.warning = in.gpu.warning
	if in.gpu.need && p.configErr == "" {
		p.configErr = in.gpu.typeErr
	}
	if len(ep.ModelReferences) > 0 && !in.modelsOK && p.configErr == "" {
		p.configErr = "modelReferences: the " + in.runtime + " runtime cannot give workers cached models yet; put the model in the image or on a network volume"
	}
	if len(ep.ModelReferences) > 0 && in.modelsOK {
		p.models = in.models
	}
	if ep.NetworkVolumeID != "" && in.noVolumeDir {
		p.warning = joinNote(p.warning, "network volume "+ep.NetworkVolumeID+" is not mounted: Berth has no volume directory configured")
	}
	if in.diskWarn != "" {
		p.warning = joinNote(p.warning, in.diskWarn)
	}
	if ep.Flashboot && !in.canPause {
		// Said rather than pretended: idle workers stop as without it.
		ep.Flashboot = false
		p.warning = joinNote(p.warning, "flashboot is not available on the "+in.runtime+
			" runtime (it cannot pause a worker): idle workers are stopped instead of frozen")
	}

	workers := slices.SortedFunc(slices.Values(in.workers), func(a, b workerSnap) int { return cmp.Compare(a.id, b.id) })
	var views []workerView
	rollDraining := false
	for _, w := range workers {
		o := observeWorker(w, in.now, in.lim)
		p.observed = append(p.observed, o)
		if o.firstContact {
			p.contacted, unhealthy = true, false
		}
		switch {
		case o.fault != "":
			p.drains = append(p.drains, drainPlan{id: w.id, drain: drain{kind: drainFault, reason: o.fault}})
		case w.state.stopping():
			rollDraining = rollDraining || w.drainKind == drainRoll
		case w.state != wsExited:
			views = append(views, viewOf(w, o, in.now))
		}
	}

	sp := planScale(scaleInput{ep: ep, stats: in.stats, workers: views})
	drained := map[string]bool{}
	for _, d := range sp.drain {
		drained[d.id] = true
		rollDraining = rollDraining || d.kind == drainRoll
		p.drains = append(p.drains, drainPlan{id: d.id, drain: drain{kind: d.kind, reason: d.reason, grace: in.drainGrace, shortIdle: true}})
	}
	p.freeze, p.thaw = sp.freeze, sp.thaw
	p.want, p.maxReason = sp.want, sp.reason

	var old []workerView
	busyStarting := false
	for _, v := range views {
		if drained[v.id] {
			continue
		}
		if !v.current {
			old = append(old, v)
		}
		busyStarting = busyStarting || !v.phase.ready()
	}
	// Workers whose instance no node can take now wait like starts held
	// back for GPUs: throttled.
	unsched, why := 0, ""
	for _, w := range workers {
		if w.state.serving() && !drained[w.id] && w.waiting == WaitingUnschedulable && !w.contacted {
			unsched++
			why = w.waitReason
		}
	}
	start := sp.start
	switch {
	case p.configErr != "":
		start = 0
	case p.models != "":
		start = 0 // no worker before its models are complete
	case in.now.Before(nextStart):
		start = 0
	case in.health.exiting:
		start = 0
	case unhealthy && busyStarting:
		start = 0 // one probe at a time
	case unhealthy:
		start = min(start, 1)
	}
	if in.gpu.need && start > in.gpu.fit {
		p.throttled, p.throttle = start-max(in.gpu.fit, 0), "waiting for free GPUs: "+in.gpu.short
		start = max(in.gpu.fit, 0)
		switch {
		case in.gpu.evictable:
			p.evict, p.throttle = true, throttledEvicting
		case len(old) > 0 && !rollDraining:
			// A rolling update on a full machine: make room by draining
			// one old worker first.
			w := byDrainPreference(old)[0]
			p.drains = append(p.drains, drainPlan{id: w.id, drain: drain{kind: drainRoll,
				reason:    fmt.Sprintf("rolling update to version %d (making room on the GPUs)", ep.Version),
				grace:     in.drainGrace,
				shortIdle: true}})
		}
	}
	if unsched > 0 {
		p.throttled += unsched
		p.throttle = joinNote(p.throttle, fmt.Sprintf("%d worker(s) wait for %s to schedule them: %s", unsched, in.place, why))
	}
	p.start = start
	return p
}

// viewOf is a live worker as planScale sees it.
func viewOf(w workerSnap, o workerObs, now time.Time) workerView {
	v := workerView{id: w.id, current: w.current, running: o.running, frozen: o.state.frozen(), frozenAt: w.frozenAt}
	switch {
	case o.state == wsStarting:
		v.phase = phaseStarting
	case !o.contacted:
		v.phase = phaseInitializing
	case o.running > 0:
		v.phase = phaseRunning
	default:
		v.phase = phaseIdle
	}
	if o.state == wsIdle && !o.idleSince.IsZero() {
		v.idleFor = now.Sub(o.idleSince)
	}
	return v
}

// exitFacts is what is known when a worker's container has ended.
type exitFacts struct {
	drain     *drain // how Berth stopped it; nil when it was not drained
	contacted bool   // it contacted Berth at some point
	oom       bool   // the kernel's OOM killer ended it
	exitCode  int
	gone      bool // the container no longer exists (or cannot be inspected)
}

// exitVerdict is how a worker's exit is judged.
type exitVerdict struct {
	reason string // told to the queue (its jobs are requeued with it) and logged
	// expected: Berth stopped it on purpose (a drain that was not a kill).
	expected bool
	// failedStart: it ended without ever contacting Berth (the start
	// back-off counts it); crashed: it ended on its own, or was killed for
	// a fault, after contacting Berth (the crash back-off counts it).
	failedStart, crashed bool
	// keep the container for its logs (the endpoint's last failure);
	// logTail: add its last lines to the reason.
	keep, logTail bool
}

// judgeExit judges a worker's exit: a drain is expected; a kill for a
// fault, an OOM kill, a non-zero exit code or a container that vanished is
// a crash once the worker had contacted Berth, and any unexpected end
// before that is a failed start, whose last output is worth reading.
func judgeExit(f exitFacts) exitVerdict {
	var v exitVerdict
	fault := f.drain != nil && f.drain.kind == drainFault
	v.expected = f.drain != nil && !fault
	switch {
	case f.drain != nil:
		v.reason = "worker stopped: " + f.drain.reason
	case f.oom:
		v.reason = fmt.Sprintf("worker container was killed for lack of memory (OOM, exit code %d)", f.exitCode)
	case f.exitCode != 0:
		v.reason = fmt.Sprintf("worker container exited with code %d", f.exitCode)
	case f.gone:
		v.reason = "worker container disappeared"
	default:
		v.reason = "worker container exited"
	}
	v.failedStart = !v.expected && !f.contacted
	v.crashed = !v.expected && f.contacted && (f.exitCode != 0 || f.oom || fault || f.gone)
	v.logTail = v.failedStart && !f.gone
	v.keep = (v.failedStart || v.crashed) && !f.gone
	return v
}
