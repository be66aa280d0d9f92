package runtime

// The worker lifecycle is an explicit state machine, in the manner of
// dstack's shim: a worker is in exactly one wstate, the moves allowed are
// the table workerMoves, and every change goes through
// Supervisor.setStateLocked, which refuses (and logs) a move the table
// does not allow. What is not the lifecycle is recorded beside the state as
// facts: whether the worker has contacted Berth, whether the kernel
// OOM-killed its container, its jobs in progress.
//
//	Starting ──► Initializing ──► Idle ◄─────────► Running
//	   │                          │  ▲ (pause failed)  ▲
//	   │                          ▼  │                 │
//	   │                       Freezing ──► ThawAsked  │
//	   │                          │            │       │
//	   │                          ▼            │       │
//	   │        (resumed by hand) Frozen ◄─────┘       │
//	   │                          │                    │
//	   │                          ▼                    │
//	   │                       Thawing ──► Idle ───────┘
//	   ▼
//	Cancelled ──► Draining ◄──► Stopping    (every live state may be drained)
//	                 │             │
//	                 ▼             ▼
//	               Exited ◄── every state: the container is gone (terminal)
//
// Who moves a worker: launch (out of Starting and Cancelled), the autoscaler pass
// (serving states from the queue's view; drains, freezes, thaws), the
// FlashBoot goroutines (pause and unpause results), stopAsync (Stopping
// and back to Draining when a stop failed) and the exit handlers (Exited).

import (
	"log/slog"
	"slices"
	"strconv"
	"time"
)

// wstate is where a worker is in its life.
type wstate int

const (
	// wsStarting: the identity is registered and GPUs held; launch is
	// pulling the image, creating or starting the container.
	wsStarting wstate = iota
	// wsCancelled: drained while starting; launch removes the container,
	// or stops it once started.
	wsCancelled
	// wsInitializing: the container runs but has not contacted Berth.
	wsInitializing
	wsIdle    // in contact with Berth, no job in progress
	wsRunning // at least one job in progress
	// wsFreezing: FlashBoot's pause of an idle worker is in flight.
	wsFreezing
	// wsThawAsked: a thaw was asked while the pause was in flight; the
	// worker is resumed as soon as the pause completes.
	wsThawAsked
	wsFrozen   // container paused (FlashBoot): holds memory and GPUs, serves nothing
	wsThawing  // unpause in flight
	wsDraining // to be stopped (see drain); no stop under way yet, or the last one failed
	wsStopping // a stop (SIGTERM, SIGKILL after the grace) is under way
	wsExited   // the container ended and its exit was handled: terminal
)

var wstateNames = [...]string{
	wsStarting: "starting", wsCancelled: "cancelled", wsInitializing: "initializing", wsIdle: "idle",
	wsRunning: "running", wsFreezing: "freezing", wsThawAsked: "thaw-asked", wsFrozen: "frozen",
	wsThawing: "thawing", wsDraining: "draining", wsStopping: "stopping", wsExited: "exited",
}

func (s wstate) String() string {
	if s >= 0 && int(s) < len(wstateNames) {
		return wstateNames[s]
	}
	return "wstate(" + strconv.Itoa(int(s)) + ")"
}

// workerMoves is the lifecycle: the states each state may move to. There
// are no self-moves.
var workerMoves = map[wstate][]wstate{
	wsStarting: {wsInitializing, wsCancelled, wsExited},
	// Cancelled → Draining: launch started the container after all and
	// hands it over to be stopped.
	wsCancelled:    {wsDraining, wsExited},
	wsInitializing: {wsIdle, wsRunning, wsDraining, wsExited},
	wsIdle:         {wsRunning, wsFreezing, wsDraining, wsExited},
	wsRunning:      {wsIdle, wsDraining, wsExited},
	// A failed pause leaves the worker serving (idle, or running when a
	// job reached its job-take meanwhile).
	wsFreezing:  {wsFrozen, wsThawAsked, wsIdle, wsRunning, wsDraining, wsExited},
	wsThawAsked: {wsFrozen, wsIdle, wsRunning, wsDraining, wsExited},
	// Frozen → Idle: resumed behind Berth's back (docker unpause by hand).
	wsFrozen:   {wsThawing, wsIdle, wsDraining, wsExited},
	wsThawing:  {wsIdle, wsRunning, wsDraining, wsExited},
	wsDraining: {wsStopping, wsExited},
	// Stopping → Draining: the stop failed; the next pass tries again.
	wsStopping: {wsDraining, wsExited},
	wsExited:   nil,
}

// canMove reports whether the lifecycle allows from → to.
func canMove(from, to wstate) bool { return slices.Contains(workerMoves[from], to) }

// serving: the worker's state follows the queue's view of it (its
// activity), and it may be found faulty.
func (s wstate) serving() bool { return s == wsInitializing || s == wsIdle || s == wsRunning }

// frozen: FlashBoot paused it or is pausing it; it serves nothing.
func (s wstate) frozen() bool { return s == wsFreezing || s == wsThawAsked || s == wsFrozen }

// stopping: a drain was decided (Cancelled, Draining, Stopping).
func (s wstate) stopping() bool { return s == wsCancelled || s == wsDraining || s == wsStopping }

// live: neither on its way out nor gone.
func (s wstate) live() bool { return !s.stopping() && s != wsExited }

// drainKind says why a worker is stopped; it decides the metric, the log
// level and how its exit is judged.
type drainKind int

const (
	drainScale   drainKind = iota // scale-down: workersMax, idle timeout, flashboot off, endpoint deleted
	drainRoll                     // rolling update to a new endpoint version
	drainRecycle                  // a job's result asked for stopPod
	drainEvict                    // FlashBoot eviction of a frozen worker
	drainFault                    // killed: lost, never contacted Berth, ignored a stop
)

// drain is how and why a worker is stopped.
type drain struct {
	kind   drainKind
	reason string
	// grace is the SIGTERM-to-SIGKILL grace; shortIdle caps it at
	// Config.IdleStopGrace when the worker has no job at the first stop
	// (there is nothing to finish). A retried stop keeps the first grace.
	grace     time.Duration
	shortIdle bool
}

// setStateLocked moves ws to state to if the lifecycle allows it. A move
// it does not allow is refused — ws is left as it was — and logged as an
// error: it is a bug in the caller, which must check the state where a
// race can change it. The caller holds s.mu.
func (s *Supervisor) setStateLocked(ws *workerState, to wstate, why string) bool {
	if !canMove(ws.state, to) {
		s.wlog(ws).Error("worker state change refused", "from", ws.state.String(), "to", to.String(), "why", why)
		return false
	}
	if s.log.Enabled(s.ctx, slog.LevelDebug) {
		s.wlog(ws).Debug("worker state", "from", ws.state.String(), "to", to.String(), "why", why)
	}
	ws.state = to
	return true
}

// drainLocked decides to stop ws: a starting worker is Cancelled (launch
// stops it), any other live one Draining (stopAsync or the next pass stops
// it). A worker already on its way out is left alone. Reports whether ws
// was drained now.
func (s *Supervisor) drainLocked(ws *workerState, d drain) bool {
	if !ws.state.live() {
		return false
	}
	to := wsDraining
	if ws.state == wsStarting {
		to = wsCancelled
	}
	if !s.setStateLocked(ws, to, d.reason) {
		return false
	}
	ws.drain = d
	// The queue stops offering it work now, before any signal reaches the
	// container; a job handed over since the pass read the queue stays the
	// worker's, to finish within the grace (stopAsync reads running).
	ws.running = max(ws.running, s.q.DrainWorker(ws.id))
	if d.kind == drainFault {
		s.scaled(ws.endpointID, "kill")
		s.wlog(ws).Warn("stopping worker", "reason", d.reason)
	} else {
		s.scaled(ws.endpointID, "drain")
		s.wlog(ws).Info("draining worker", "reason", d.reason)
	}
	return true
}
