package mgmt

import (
	"slices"
	"strings"
	"time"

	"berth/queue"
	"berth/store"
)

// WorkerInfo is one worker container of an endpoint as the runtime reports
// it (the composition maps the runtime's view to it).
type WorkerInfo struct {
	ID            string    // worker id (its RUNPOD_POD_ID)
	State         string    // initializing, idle, running, frozen or exited
	ImageName     string    // image the container runs
	Version       int       // endpoint version the container runs
	GPUTypeID     string    // "" for CPU workers
	GPUCount      int       //
	GPUUUIDs      []string  // pinned devices
	VCPUCount     int       // its CPU request
	LastStartedAt time.Time // container start; zero while it is created
	Message       string    // why it is stopping, when it is
}

// Worker is one worker of an endpoint as every surface shows it (v1
// includeWorkers, v2 …/workers, GraphQL's pods of an endpoint): the
// runtime's container merged with the queue's view of the workers that
// talk to it. A worker outside the runtime (berth worker-env) is known to
// the queue only: its container fields are empty.
type Worker struct {
	WorkerInfo
	Name           string // <endpoint name>-<worker id>, Pod-shaped as RunPod shows workers
	DesiredStatus  string // RUNNING, or EXITED once its container exited
	JobsInProgress int
	LastSeenAt     time.Time // its last request to Berth
	External       bool      // outside the runtime (worker-env)
}

// Worker states beyond the runtime's: the queue's judgement of a worker
// that stopped talking to Berth.
const WorkerLost = "lost"

// MergeWorkers is an endpoint's workers, by id: each container the runtime
// runs and each worker the queue knows. The queue decides what it knows
// best and knows first — a lost worker is lost; a worker that talks to it
// is running while it holds jobs and idle otherwise (the runtime learns
// both on its next pass) — and the container the rest: initializing,
// frozen, and the states of workers that never talk to the queue
// (load-balancing workers).
func MergeWorkers(e store.Endpoint, containers []WorkerInfo, loads []queue.WorkerLoad) []Worker {
	byID := map[string]*Worker{}
	add := func(id string) *Worker {
		if w := byID[id]; w != nil {
			return w
		}
		w := &Worker{WorkerInfo: WorkerInfo{ID: id, State: "idle", Version: e.Version}, Name: e.Name + "-" + id, DesiredStatus: store.PodRunning}
		byID[id] = w
		return w
	}
	for _, c := range containers {
		w := add(c.ID)
		w.WorkerInfo = c
		if c.State == "exited" {
			w.DesiredStatus = store.PodExited
		}
	}
	for _, l := range loads {
		w := add(l.WorkerID)
		w.JobsInProgress, w.LastSeenAt, w.External = l.Running, l.LastSeen, l.External
		switch {
		case l.Lost:
			w.State = WorkerLost
		case l.Running > 0:
			w.State = "running"
		case !l.LastSeen.IsZero() && (w.State == "initializing" || w.State == "running"):
			w.State = "idle"
		case w.State == "":
			w.State = "idle"
		}
	}
	out := make([]Worker, 0, len(byID))
	for _, w := range byID {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}
