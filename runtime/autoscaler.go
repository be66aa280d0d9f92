package runtime

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"berth/queue"
	"berth/store"
)

// Scaler types of store.Endpoint.ScalerType.
const (
	ScalerQueueDelay   = "QUEUE_DELAY"
	ScalerRequestCount = "REQUEST_COUNT"
)

// defaultIdleTimeout applies when an endpoint's idleTimeout is unset (RunPod's default).
const defaultIdleTimeout = 5 * time.Second

// phase is where a worker is in its life, as the autoscaler sees it.
type phase int

const (
	phaseStarting     phase = iota // container being pulled, created or started
	phaseInitializing              // container running, no request to Berth yet
	phaseIdle                      // contacted Berth, no job in progress
	phaseRunning                   // at least one job in progress
)

func (p phase) String() string {
	switch p {
	case phaseStarting, phaseInitializing:
		return StateInitializing
	case phaseIdle:
		return StateIdle
	default:
		return StateRunning
	}
}

// ready reports whether the worker has contacted Berth (it can take jobs).
func (p phase) ready() bool { return p == phaseIdle || p == phaseRunning }

// workerView is one worker that is not draining, as the planner sees it.
type workerView struct {
	id      string
	current bool // runs the endpoint's current version and spec
	phase   phase
	idleFor time.Duration // time since it was last seen busy (idle phase only)
	running int           // jobs in progress
	// frozen: FlashBoot paused its container (or is pausing it). It holds
	// its memory and GPUs but serves nothing until thawed.
	frozen   bool
	frozenAt time.Time
}

// scaleInput is everything one scaling decision depends on.
type scaleInput struct {
	ep      store.Endpoint
	stats   queue.QueueStats
	workers []workerView
}

// drainOrder asks for one worker to be drained.
type drainOrder struct {
	id     string
	kind   drainKind
	reason string
}

// scalePlan is the outcome of planScale.
type scalePlan struct {
	want   int // workers the scaler wants serving, within [workersMin, workersMax]
	start  int // new workers of the current version to start
	drain  []drainOrder
	freeze []string // FlashBoot: idle workers to pause instead of draining
	thaw   []string // FlashBoot: frozen workers to resume (before starting any)
	reason string   // why demand is held back by workersMax ("" if it is not)
}

// planScale decides how many workers to start and which ones to drain. It is
// a pure function of its input so the policy can be tested without a backend:
//
//   - workers above workersMax are drained, the least busy first (each
//     version counts apart, so a rolling update may briefly run both);
//   - idle workers (no job for idleTimeout) are drained while more than
//     workersMin remain and no normal-priority job is waiting;
//   - want = workersMin, raised by the scaler: QUEUE_DELAY adds one worker
//     when the oldest normal-priority job has waited more than scalerValue
//     seconds and no worker is still starting, and starts one at once when
//     there is none at all; REQUEST_COUNT wants
//     ceil((inQueue − lowPriority + inProgress) / scalerValue) while
//     normal-priority jobs wait. lowPriority jobs never raise want;
//   - a rolling update starts current-version workers first and drains old
//     ones only as new ones become ready;
//   - FlashBoot (ep.Flashboot): an idle worker past idleTimeout is frozen
//     instead of drained. Frozen workers count towards workersMax but not
//     towards workersMin or demand; when the scaler wants a worker, a
//     frozen one is thawed (the most recently frozen first) before any is
//     started, and a frozen worker that was handed a job (its pending
//     job-take) is thawed at once. Frozen workers of an old version, or
//     of an endpoint whose flashboot is now off, are drained.
func planScale(in scaleInput) scalePlan {
	ep := in.ep
	maxW := max(ep.WorkersMax, 0)
	minW := min(max(ep.WorkersMin, 0), maxW)
	idleTO := time.Duration(ep.IdleTimeout) * time.Second
	if idleTO <= 0 {
		idleTO = defaultIdleTimeout
	}
	sv := max(ep.ScalerValue, 1)
	normal := max(in.stats.InQueue-in.stats.LowPriority, 0)

	var p scalePlan
	alive := slices.Clone(in.workers)
	drain := func(w workerView, kind drainKind, reason string) {
		p.drain = append(p.drain, drainOrder{id: w.id, kind: kind, reason: reason})
		alive = slices.DeleteFunc(alive, func(x workerView) bool { return x.id == w.id })
	}

	// 1. Above workersMax (lowered by an update): drain the extras. Each
	// version counts apart: a rolling update may briefly run both.
	for _, isCur := range []bool{false, true} {
		var gen []workerView
		for _, w := range alive {
			if w.current == isCur {
				gen = append(gen, w)
			}
		}
		if n := len(gen) - maxW; n > 0 {
			for _, w := range byDrainPreference(gen)[:n] {
				drain(w, drainScale, fmt.Sprintf("workersMax is %d", maxW))
			}
		}
	}

	// 1b. Frozen workers: thaw one that holds a job; drain the ones
	// FlashBoot would no longer keep.
	for _, w := range slices.Clone(alive) {
		switch {
		case !w.frozen:
		case !ep.Flashboot:
			drain(w, drainScale, "flashboot is off: the frozen worker is stopped")
		case !w.current:
			drain(w, drainScale, "a frozen worker of an old version")
		case w.running > 0:
			p.thaw = append(p.thaw, w.id)
			alive[slices.IndexFunc(alive, func(x workerView) bool { return x.id == w.id })].frozen = false
		}
	}
	active := func() []workerView {
		return slices.DeleteFunc(slices.Clone(alive), func(w workerView) bool { return w.frozen })
	}

	// 2. Idle timeout, down to workersMin. A queued job will be taken by an
	// idle worker at once, so none is stopped while normal jobs wait.
	if normal == 0 {
		var idle []workerView
		for _, w := range alive {
			if !w.frozen && w.phase == phaseIdle && w.idleFor >= idleTO {
				idle = append(idle, w)
			}
		}
		// Old versions first, then the longest idle.
		slices.SortStableFunc(idle, func(a, b workerView) int {
			if a.current != b.current {
				if !a.current {
					return -1
				}
				return 1
			}
			return cmp.Compare(b.idleFor, a.idleFor)
		})
		for _, w := range idle {
			if len(active()) <= minW {
				break
			}
			if ep.Flashboot && w.current {
				p.freeze = append(p.freeze, w.id)
				alive[slices.IndexFunc(alive, func(x workerView) bool { return x.id == w.id })].frozen = true
				continue
			}
			drain(w, drainScale, fmt.Sprintf("idle for %s (idleTimeout %s)", w.idleFor.Round(time.Second), idleTO))
		}
	}
	serving := active()

	// 3. What the scaler wants.
	want := minW
	if normal > 0 {
		switch ep.ScalerType {
		case ScalerRequestCount:
			need := (normal + max(in.stats.InProgress, 0) + sv - 1) / sv
			want = max(want, need)
		default: // QUEUE_DELAY
			pending := 0
			for _, w := range serving {
				if !w.phase.ready() {
					pending++
				}
			}
			switch {
			case len(serving) == 0:
				// Scale from zero at once: waiting scalerValue seconds
				// first would only add to every cold start.
				want = max(want, 1)
			case in.stats.OldestWait > time.Duration(sv)*time.Second && pending == 0:
				want = max(want, len(serving)+1)
			}
		}
	}
	if want > maxW {
		if maxW == 0 {
			p.reason = fmt.Sprintf("workersMax is 0: %d job(s) wait until it is raised", normal)
		} else {
			p.reason = fmt.Sprintf("workersMax (%d) reached: %d job(s) waiting", maxW, normal)
		}
		want = maxW
	}
	p.want = want

	// 4. Start current workers; retire old ones as new ones become ready.
	var cur, old, frozen []workerView
	readyCur := 0
	for _, w := range alive {
		if w.frozen {
			frozen = append(frozen, w) // all current: others were drained in 1b
			continue
		}
		if w.current {
			cur = append(cur, w)
			if w.phase.ready() {
				readyCur++
			}
		} else {
			old = append(old, w)
		}
	}
	// The deployment's size: what the scaler wants, and during a roll at
	// least as many as there were (each old worker gets a successor).
	target := min(max(want, len(cur), len(old)), maxW)
	need := max(target-len(cur), 0)
	// Thaw before starting: the most recently frozen is the warmest, and
	// eviction takes the least recently used.
	slices.SortStableFunc(frozen, func(a, b workerView) int { return b.frozenAt.Compare(a.frozenAt) })
	for _, w := range frozen[:min(need, len(frozen))] {
		p.thaw = append(p.thaw, w.id)
		need--
	}
	// Frozen workers still hold a place under workersMax.
	p.start = max(min(need, maxW-len(cur)-len(frozen)), 0)
	if n := readyCur + len(old) - target; n > 0 && len(old) > 0 {
		for _, w := range byDrainPreference(old)[:min(n, len(old))] {
			drain(w, drainRoll, "rolling update to version "+fmt.Sprint(ep.Version))
		}
	}
	return p
}

// byDrainPreference orders workers by how cheap they are to drain: old
// versions first, then not yet ready, then idle, then fewest jobs.
func byDrainPreference(ws []workerView) []workerView {
	out := slices.Clone(ws)
	rank := func(w workerView) int {
		switch w.phase {
		case phaseStarting, phaseInitializing:
			return 0
		case phaseIdle:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b workerView) int {
		if a.current != b.current {
			if !a.current {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.running, b.running)
	})
	return out
}
