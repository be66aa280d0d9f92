package runtime

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"berth/queue"
)

// Worker states reported by Status and Workers.
const (
	StateInitializing = "initializing" // container starting, or started but not yet in contact with Berth
	StateIdle         = "idle"
	StateRunning      = "running"
	StateDraining     = "draining" // finishing its jobs before it stops
	StateFrozen       = "frozen"   // FlashBoot: container paused, thawed by the next job
)

// WorkerStateCounts counts an endpoint's workers by state.
type WorkerStateCounts struct {
	Initializing int `json:"initializing"`
	Idle         int `json:"idle"`
	Running      int `json:"running"`
	// Throttled: workers the autoscaler wants but cannot start because the
	// GPUs they need are held by other workers or pods.
	Throttled int `json:"throttled"`
	// Unhealthy: workers that cannot be kept running (image that fails to
	// start, crash loop, no GPU runtime).
	Unhealthy int `json:"unhealthy"`
	Draining  int `json:"draining"`
	// Frozen: FlashBoot workers whose container is paused.
	Frozen int `json:"frozen"`
}

// EndpointStatus is the runtime's view of an endpoint.
type EndpointStatus struct {
	Workers WorkerStateCounts `json:"workers"`
	// Desired is how many workers the autoscaler wants (within workersMin
	// and workersMax).
	Desired   int  `json:"desired"`
	Unhealthy bool `json:"unhealthy"`
	// Reason says why work is held back or failing, "" when nothing is.
	Reason string `json:"reason,omitempty"`
	// Warning is a standing condition that does not stop work (a GPU
	// endpoint running on CPU, a network volume not mounted).
	Warning   string `json:"warning,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// Failures counts failed starts in a row; Crashes recent crashes.
	Failures int `json:"failures"`
	Crashes  int `json:"crashes"`
	// Attempts counts worker containers launched since the Supervisor started.
	Attempts int `json:"attempts"`
	// NextAttempt is when a start held back by back-off may happen.
	NextAttempt time.Time `json:"nextAttempt,omitzero"`
}

// WorkerInfo is one worker container, for includeWorkers.
type WorkerInfo struct {
	WorkerID       string    `json:"id"`
	EndpointID     string    `json:"endpointId"`
	ContainerID    string    `json:"containerId,omitempty"`
	State          string    `json:"state"`
	Version        int       `json:"version"`
	GPUs           []string  `json:"gpus,omitempty"`
	GPUTypeID      string    `json:"gpuTypeId,omitempty"`
	Image          string    `json:"image,omitempty"` // what the container runs
	VCPUs          int       `json:"vcpus,omitempty"` // its CPU request
	JobsInProgress int       `json:"jobsInProgress"`
	StartedAt      time.Time `json:"startedAt,omitzero"` // zero while it is created
	DrainReason    string    `json:"drainReason,omitempty"`
}

// Status reports an endpoint's workers by state and why work is held back.
func (s *Supervisor) Status(endpointID string) EndpointStatus {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var st EndpointStatus
	live, ready := 0, 0
	for _, ws := range s.workers {
		if ws.endpointID != endpointID || ws.state == wsExited {
			continue
		}
		switch ws.publicState() {
		case StateDraining:
			st.Workers.Draining++
			continue
		case StateFrozen:
			st.Workers.Frozen++
		case StateIdle:
			st.Workers.Idle++
			ready++
		case StateRunning:
			st.Workers.Running++
			ready++
		default:
			// One waiting for a node is counted in Throttled (the plan).
			if ws.waiting != WaitingUnschedulable {
				st.Workers.Initializing++
			}
		}
		live++
	}
	es := s.eps[endpointID]
	if es == nil {
		return st
	}
	// Recent crashes make the endpoint unhealthy only while no worker
	// serves (a job that kills its worker does not make a serving
	// endpoint unhealthy).
	crashLoop := es.crashes >= s.cfg.MaxStartFailures && now.Sub(es.lastCrash) <= s.cfg.CrashReset && ready == 0
	st.Desired = es.want
	st.Unhealthy = es.unhealthy || es.configErr != "" || crashLoop
	st.Warning = es.warning
	st.LastError = es.lastError
	st.Failures, st.Crashes, st.Attempts = es.failures, es.crashes, es.attempts
	if now.Before(es.nextStart) {
		st.NextAttempt = es.nextStart
	}
	st.Workers.Throttled = es.throttled
	if st.Unhealthy {
		st.Workers.Unhealthy = max(es.want-live, 1)
	}
	var reasons []string
	switch {
	case es.configErr != "":
		reasons = append(reasons, "unhealthy: "+es.configErr)
	case es.unhealthy:
		reasons = append(reasons, fmt.Sprintf("unhealthy: %d failed start(s) in a row; last: %s", es.failures, es.lastError))
	case crashLoop:
		reasons = append(reasons, fmt.Sprintf("unhealthy: crash loop (%d crashes); last: %s", es.crashes, es.lastError))
	}
	if now.Before(es.nextStart) && es.want > live {
		reasons = append(reasons, fmt.Sprintf("next start in %s (back-off after: %s)", es.nextStart.Sub(now).Round(100*time.Millisecond), es.lastError))
	}
	if es.throttle != "" {
		reasons = append(reasons, es.throttle)
	}
	if es.models != "" && es.configErr == "" {
		reasons = append(reasons, es.models)
	}
	if es.maxReason != "" {
		reasons = append(reasons, es.maxReason)
	}
	if es.pull != "" {
		reasons = append(reasons, es.pull)
	}
	st.Reason = strings.Join(reasons, "; ")
	return st
}

// publicState is the worker's state as Status and Workers report it: the
// lifecycle's states folded into the few a user sees. A worker being
// thawed already counts as serving.
func (ws *workerState) publicState() string {
	switch {
	case ws.state.stopping():
		return StateDraining
	case ws.state.frozen():
		return StateFrozen
	case ws.state == wsIdle, ws.state == wsThawing && ws.running == 0:
		return StateIdle
	case ws.state == wsRunning, ws.state == wsThawing:
		return StateRunning
	}
	return StateInitializing
}

// WorkerCounts is the runtime's share of /health: workers initializing,
// throttled and unhealthy, and Ready (in contact with Berth, idle or
// running). Idle, Running and Frozen are left to the queue's own counts.
func (s *Supervisor) WorkerCounts(endpointID string) queue.WorkerCounts {
	st := s.Status(endpointID)
	return queue.WorkerCounts{
		Initializing: st.Workers.Initializing,
		Throttled:    st.Workers.Throttled,
		Unhealthy:    st.Workers.Unhealthy,
		Ready:        st.Workers.Idle + st.Workers.Running,
	}
}

// Workers lists an endpoint's worker containers ("" for all endpoints).
func (s *Supervisor) Workers(endpointID string) []WorkerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []WorkerInfo
	for _, ws := range s.workers {
		if (endpointID != "" && ws.endpointID != endpointID) || ws.state == wsExited {
			continue
		}
		var reason string
		if ws.state.stopping() {
			reason = ws.drain.reason
		}
		out = append(out, WorkerInfo{
			WorkerID: ws.id, EndpointID: ws.endpointID, ContainerID: ws.instanceID, State: ws.publicState(),
			Version: ws.version, GPUs: slices.Clone(ws.gpus), GPUTypeID: ws.gpuType, Image: ws.image, VCPUs: ws.vcpus,
			JobsInProgress: ws.running, StartedAt: ws.startedAt, DrainReason: reason,
		})
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int {
		if c := cmp.Compare(a.EndpointID, b.EndpointID); c != 0 {
			return c
		}
		return cmp.Compare(a.WorkerID, b.WorkerID)
	})
	return out
}
