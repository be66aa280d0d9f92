package runtime

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"berth/internal/logtest"
)

// TestWorkerMoves checks every pair of states against the lifecycle as
// it is meant to be, written out here independently of workerMoves.
func TestWorkerMoves(t *testing.T) {
	const (
		S, C, In, Id, R, Fz, TA, F, Th, D, St, X = wsStarting, wsCancelled, wsInitializing, wsIdle,
			wsRunning, wsFreezing, wsThawAsked, wsFrozen, wsThawing, wsDraining, wsStopping, wsExited
	)
	allowed := map[[2]wstate]string{
		{S, In}: "container started", {S, C}: "drained while starting", {S, X}: "launch failed",
		{C, D}: "started after all: stop it", {C, X}: "launch called off",
		{In, Id}: "first contact", {In, R}: "first contact with a job", {In, D}: "drained", {In, X}: "exited",
		{Id, R}: "took a job", {Id, Fz}: "flashboot freeze", {Id, D}: "drained", {Id, X}: "exited",
		{R, Id}: "jobs done", {R, D}: "drained", {R, X}: "exited",
		{Fz, F}: "paused", {Fz, TA}: "thaw asked mid-pause", {Fz, Id}: "pause failed", {Fz, R}: "pause failed, a job came",
		{Fz, D}: "drained", {Fz, X}: "exited",
		{TA, F}: "paused, thaw follows", {TA, Id}: "pause failed", {TA, R}: "pause failed, a job came",
		{TA, D}: "drained", {TA, X}: "exited",
		{F, Th}: "thaw", {F, Id}: "unpaused by hand", {F, D}: "evicted", {F, X}: "exited",
		{Th, Id}: "unpaused", {Th, R}: "unpaused with a job", {Th, D}: "drained", {Th, X}: "exited",
		{D, St}: "stop sent", {D, X}: "exited before the stop",
		{St, D}: "the stop failed", {St, X}: "stopped",
	}
	for from := wsStarting; from <= wsExited; from++ {
		for to := wsStarting; to <= wsExited; to++ {
			_, want := allowed[[2]wstate{from, to}]
			if got := canMove(from, to); got != want {
				t.Errorf("%s → %s: allowed %v, want %v", from, to, got, want)
			}
		}
	}
	for st := range workerMoves {
		if st.String() == "" || strings.HasPrefix(st.String(), "wstate(") {
			t.Errorf("state %d has no name", st)
		}
	}
	if len(workerMoves) != int(wsExited)+1 {
		t.Errorf("workerMoves has %d states, want %d", len(workerMoves), wsExited+1)
	}
}

// TestWorkerLifecycle runs workers through whole lives with
// setStateLocked: every step of a legal life is taken; an illegal one is
// refused, leaves the state as it was, and is logged.
func TestWorkerLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []wstate
		// refused: the index of the step that must be refused (-1: none).
		refused int
	}{
		{name: "scale up, serve, idle drain", steps: []wstate{wsInitializing, wsIdle, wsRunning, wsIdle, wsDraining, wsStopping, wsExited}, refused: -1},
		{name: "crash while running", steps: []wstate{wsInitializing, wsIdle, wsRunning, wsExited}, refused: -1},
		{name: "never contacts Berth: killed", steps: []wstate{wsInitializing, wsDraining, wsStopping, wsExited}, refused: -1},
		{name: "image pull fails", steps: []wstate{wsExited}, refused: -1},
		{name: "drained while starting, removed", steps: []wstate{wsCancelled, wsExited}, refused: -1},
		{name: "drained while starting, started anyway", steps: []wstate{wsCancelled, wsDraining, wsStopping, wsExited}, refused: -1},
		{name: "a stop that failed is retried", steps: []wstate{wsInitializing, wsIdle, wsDraining, wsStopping, wsDraining, wsStopping, wsExited}, refused: -1},
		{name: "flashboot freeze and thaw", steps: []wstate{wsInitializing, wsIdle, wsFreezing, wsFrozen, wsThawing, wsRunning, wsIdle}, refused: -1},
		{name: "thaw asked mid-pause", steps: []wstate{wsInitializing, wsIdle, wsFreezing, wsThawAsked, wsFrozen, wsThawing, wsIdle}, refused: -1},
		{name: "evicted while frozen", steps: []wstate{wsInitializing, wsIdle, wsFreezing, wsFrozen, wsDraining, wsStopping, wsExited}, refused: -1},
		{name: "pause fails", steps: []wstate{wsInitializing, wsIdle, wsFreezing, wsIdle}, refused: -1},
		{name: "serving before it started", steps: []wstate{wsIdle}, refused: 0},
		{name: "a frozen worker cannot run jobs", steps: []wstate{wsInitializing, wsIdle, wsFreezing, wsFrozen, wsRunning}, refused: 4},
		{name: "a running worker is not frozen", steps: []wstate{wsInitializing, wsRunning, wsFreezing}, refused: 2},
		{name: "a drain is never undone", steps: []wstate{wsInitializing, wsIdle, wsDraining, wsIdle}, refused: 3},
		{name: "a stopping worker does not serve again", steps: []wstate{wsInitializing, wsDraining, wsStopping, wsRunning}, refused: 3},
		{name: "exited is terminal", steps: []wstate{wsInitializing, wsExited, wsIdle}, refused: 2},
		{name: "no self-moves", steps: []wstate{wsInitializing, wsInitializing}, refused: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, lines := testSupervisor(t)
			ws := &workerState{id: "w1", endpointID: "ep1", state: wsStarting}
			for i, to := range tc.steps {
				from := ws.state
				ok := s.setStateLocked(ws, to, fmt.Sprintf("step %d", i))
				if want := i != tc.refused; ok != want {
					t.Fatalf("step %d %s → %s: moved %v, want %v", i, from, to, ok, want)
				}
				if !ok {
					if ws.state != from {
						t.Fatalf("a refused move changed the state to %s", ws.state)
					}
					l := lines.Find("worker state change refused")
					if l == nil || l["from"] != from.String() || l["to"] != to.String() || l["worker"] != "w1" || l["endpoint"] != "ep1" {
						t.Fatalf("refusal logged as %v", l)
					}
					return
				}
				if ws.state != to {
					t.Fatalf("step %d: state %s, want %s", i, ws.state, to)
				}
			}
			if l := lines.Find("worker state change refused"); l != nil {
				t.Fatalf("a legal life logged a refusal: %v", l)
			}
		})
	}
}

// TestDrainLocked: a starting worker is cancelled, a live one drained (a
// fault counts as a kill); one on its way out is left alone. The queue is
// told of every new drain, there and then, and a job it says the worker
// holds keeps the worker running (the full grace).
func TestDrainLocked(t *testing.T) {
	var actions []string
	s, _ := testSupervisor(t)
	q := &drainQueue{held: 1}
	s.q = q
	s.cfg.OnScale = func(_, action string) { actions = append(actions, action) }
	for _, tc := range []struct {
		from, to wstate
		kind     drainKind
		drained  bool
		action   string
	}{
		{from: wsStarting, to: wsCancelled, drained: true, action: "drain"},
		{from: wsIdle, to: wsDraining, drained: true, action: "drain"},
		{from: wsFrozen, to: wsDraining, kind: drainEvict, drained: true, action: "drain"},
		{from: wsInitializing, to: wsDraining, kind: drainFault, drained: true, action: "kill"},
		{from: wsDraining, to: wsDraining},
		{from: wsStopping, to: wsStopping},
		{from: wsExited, to: wsExited},
	} {
		actions, q.told = nil, nil
		ws := &workerState{id: "w", endpointID: "ep", state: tc.from, drain: drain{reason: "earlier"}}
		got := s.drainLocked(ws, drain{kind: tc.kind, reason: "now"})
		if told := len(q.told) == 1 && q.told[0] == "w"; told != tc.drained || len(q.told) > 1 {
			t.Errorf("%s: queue told %v; want told once: %v", tc.from, q.told, tc.drained)
		}
		if tc.drained && ws.running != q.held {
			t.Errorf("%s: running %d after the drain, want the queue's %d", tc.from, ws.running, q.held)
		}
		if got != tc.drained || ws.state != tc.to {
			t.Errorf("%s: drained %v to %s; want %v to %s", tc.from, got, ws.state, tc.drained, tc.to)
		}
		if want := map[bool]string{true: "now", false: "earlier"}[tc.drained]; ws.drain.reason != want {
			t.Errorf("%s: drain reason %q, want %q", tc.from, ws.drain.reason, want)
		}
		if (tc.action == "") != (len(actions) == 0) || len(actions) > 0 && actions[0] != tc.action {
			t.Errorf("%s: scaling actions %v, want %q", tc.from, actions, tc.action)
		}
	}
}

// drainQueue records DrainWorker calls; the rest of Queue is not used.
type drainQueue struct {
	Queue
	told []string
	held int
}

func (q *drainQueue) DrainWorker(id string) int {
	q.told = append(q.told, id)
	return q.held
}

// testSupervisor is a Supervisor with no daemon, for the lifecycle's unit
// tests; lines holds what it logged.
func testSupervisor(t *testing.T) (*Supervisor, *logtest.Lines) {
	log, lines := logtest.Check(t, nil)
	return &Supervisor{log: log, ctx: context.Background(), q: &drainQueue{}, workers: map[string]*workerState{}, eps: map[string]*endpointState{}}, lines
}
