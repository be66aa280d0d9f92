// Package queue is the job lifecycle: states, the per-endpoint FIFO, the
// ttl / executionTimeout / retention timers, worker registry and loss
// detection, retries, stream buffers, the webhook outbox and the long-poll
// wake-ups. It knows nothing of HTTP or Docker.
package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/store"
)

// Errors a caller maps to client responses.
var (
	ErrNotFound     = errors.New("job not found")
	ErrNotRetryable = errors.New("only FAILED or TIMED_OUT jobs can be retried")
	ErrStopped      = errors.New("queue stopped")
)

// Limits of the service specification.
const (
	MinExecutionTimeout = 5 * time.Second
	MaxExecutionTimeout = 7 * 24 * time.Hour
	MinTTL              = 10 * time.Second
	MaxTTL              = 7 * 24 * time.Hour
	DefaultTTL          = 24 * time.Hour
	DefaultExecTimeout  = 10 * time.Minute
	MaxStreamChunk      = 1 << 20
)

// Store is what the queue needs from persistence.
type Store interface {
	// Enqueue writes what is not in memory yet (dropped on failure);
	// EnqueueState and WriteAsync write changes already made in memory
	// (kept and written again after a failure). See store's writer.
	Enqueue(ops ...store.Op) <-chan error
	EnqueueState(ops ...store.Op) <-chan error
	WriteAsync(ops ...store.Op)
	// Admit waits for room in the write queue (back-pressure).
	Admit(ctx context.Context) error
	// Pending: a failed write of bucket/key waits to be written again.
	Pending(bucket, key string) bool
	Scan(bucket string, fn func(key string, raw []byte) error) error
	// ScanJobIndex yields every job's index entry in submission order;
	// load reads that job's record and input in the same transaction.
	// damaged is told the id of each job whose entry is damaged.
	ScanJobIndex(fn func(e store.JobEntry, load func() (store.Job, json.RawMessage, error)) error, damaged func(id string, err error)) error
	// LoadJob reads a job's record and input.
	LoadJob(id string) (store.Job, json.RawMessage, error)
}

// Config tunes a Service. Zero values take the defaults in brackets.
type Config struct {
	Clock  clockwork.Clock // [real clock]
	Logger *slog.Logger    // [slog.Default]

	TakeHold       time.Duration // job-take / job-stop long poll [30s]
	WorkerTimeout  time.Duration // no request from a worker this long: lost [60s]
	ReconcileGrace time.Duration // a ping that omits a job taken this long ago requeues it [30s]
	MaxAttempts    int           // takes per job before worker loss fails it [3]
	// DrainHold bounds a job-take of a draining worker (see DrainWorker):
	// it never gets a job, and a worker that keeps polling after its stop
	// is answered this often rather than at once, which would be a busy
	// loop (the SDK re-polls a 204 at once) [500ms; at most TakeHold].
	// Under a second: the SDK's job-stop loop sleeps a second after an
	// empty answer anyway, so this does not delay its exit.
	DrainHold     time.Duration
	RunRetention  time.Duration // results of /run jobs [30m]
	SyncRetention time.Duration // results of /runsync jobs [1m]
	// RecentJobs: finished jobs per endpoint still listed (id, status,
	// times, worker) once their results expire [DefaultRecentJobs];
	// negative: none (recent.go).
	RecentJobs int

	// Worker identities nobody uses are forgotten (see ExpireWorkers):
	// those the operator's key created on the fly after WorkerRetention
	// without a request [1h], those with their own key (worker-env, the
	// runtime's) with their key after KeyedWorkerRetention [24h].
	WorkerRetention      time.Duration
	KeyedWorkerRetention time.Duration

	// Unread stream chunks are capped per job and in all [16 MiB, 256 MiB]
	// (see streams.go).
	StreamBufferPerJob int
	StreamBufferTotal  int

	WebhookClient     *http.Client  // [the default WebhookPolicy, 10s timeout]
	WebhookAttempts   int           // [3: the first and 2 retries]
	WebhookRetryDelay time.Duration // [10s]
	WebhookWorkers    int           // concurrent deliveries [4]

	// OnStopPod is told when a worker reports stopPod, so the runtime can
	// recycle its container. Optional.
	OnStopPod func(endpointID, workerID string)
	// OnQueueChange is told when an endpoint's queue grows, so the
	// autoscaler can react without polling. Optional; called after the
	// queue's lock is released, but it should not block.
	OnQueueChange func(endpointID string)
	// OnJobFinished is told when a job that a worker started ends (any
	// terminal status), with its delayTime and executionTime, for
	// metrics. Optional; called after the queue's lock is released.
	OnJobFinished func(endpointID string, status store.JobStatus, delay, execution time.Duration)
	// OnJobEnded is told when any job ends (COMPLETED, FAILED, TIMED_OUT,
	// CANCELLED; a ttl's removal is no end), started saying whether a
	// worker took it (delay and execution are zero when not), for the
	// dashboard's series. Optional; called after the lock is released.
	OnJobEnded func(endpointID string, status store.JobStatus, started bool, delay, execution time.Duration)
	// OnWebhook is told the outcome of each webhook delivery attempt:
	// "delivered", "retry" (failed, will be retried) or "failed" (gave
	// up). Optional; must not block.
	OnWebhook func(endpointID, result string)
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TakeHold <= 0 {
		c.TakeHold = 30 * time.Second
	}
	if c.WorkerTimeout <= 0 {
		c.WorkerTimeout = 60 * time.Second
	}
	if c.ReconcileGrace <= 0 {
		c.ReconcileGrace = 30 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.DrainHold <= 0 {
		c.DrainHold = 500 * time.Millisecond
	}
	c.DrainHold = min(c.DrainHold, c.TakeHold)
	if c.RunRetention <= 0 {
		c.RunRetention = 30 * time.Minute
	}
	if c.SyncRetention <= 0 {
		c.SyncRetention = time.Minute
	}
	if c.RecentJobs == 0 {
		c.RecentJobs = DefaultRecentJobs
	}
	if c.WorkerRetention <= 0 {
		c.WorkerRetention = time.Hour
	}
	if c.KeyedWorkerRetention <= 0 {
		c.KeyedWorkerRetention = 24 * time.Hour
	}
	if c.StreamBufferPerJob <= 0 {
		c.StreamBufferPerJob = 16 << 20
	}
	if c.StreamBufferTotal <= 0 {
		c.StreamBufferTotal = 256 << 20
	}
	if c.WebhookClient == nil {
		g, _ := NewWebhookGuard(WebhookPolicy{}) // the default policy cannot fail
		c.WebhookClient = g.Client(10 * time.Second)
	}
	if c.WebhookAttempts <= 0 {
		c.WebhookAttempts = 3
	}
	if c.WebhookRetryDelay <= 0 {
		c.WebhookRetryDelay = 10 * time.Second
	}
	if c.WebhookWorkers <= 0 {
		c.WebhookWorkers = 4
	}
}

// SubmitRequest is a validated job submission.
type SubmitRequest struct {
	EndpointID       string
	Input            json.RawMessage
	Webhook          string
	S3Config         json.RawMessage
	Policy           json.RawMessage // stored and handed to the worker as sent
	ExecutionTimeout time.Duration
	TTL              time.Duration
	LowPriority      bool
	Sync             bool // /runsync: "sync-" id and the short retention
}

// StatusResponse is the body of /status, /status-sync, /runsync and the
// webhook call: RunPod's shape, integer milliseconds, error as a string.
type StatusResponse struct {
	ID            string          `json:"id"`
	Status        store.JobStatus `json:"status"`
	DelayTime     *int64          `json:"delayTime,omitempty"`
	ExecutionTime *int64          `json:"executionTime,omitempty"`
	Input         json.RawMessage `json:"input,omitempty"`
	Output        json.RawMessage `json:"output,omitempty"`
	Error         *string         `json:"error,omitempty"`
	WorkerID      string          `json:"workerId,omitempty"`
	Retries       int             `json:"retries,omitempty"`
}

// StreamResponse is the body of /stream: always carries stream, even empty.
type StreamResponse struct {
	ID     string            `json:"id"`
	Status store.JobStatus   `json:"status"`
	Stream []json.RawMessage `json:"stream"`
	Error  *string           `json:"error,omitempty"`
}

// Health is an endpoint's job and worker counts.
type Health struct {
	Jobs    JobCounts    `json:"jobs"`
	Workers WorkerCounts `json:"workers"`
}

// JobCounts are the counts of /health. completed and failed count results
// still retained; retried counts requeues and explicit retries since start.
type JobCounts struct {
	Completed  int `json:"completed"`
	Failed     int `json:"failed"`
	InProgress int `json:"inProgress"`
	InQueue    int `json:"inQueue"`
	Retried    int `json:"retried"`
}

// WorkerCounts are the worker states of /health.
type WorkerCounts struct {
	Idle         int `json:"idle"`
	Running      int `json:"running"`
	Initializing int `json:"initializing"`
	Ready        int `json:"ready"`
	Throttled    int `json:"throttled"`
	Unhealthy    int `json:"unhealthy"`
	// Frozen: FlashBoot workers whose container is paused; the next job
	// thaws one (a Berth extension; they are not counted as idle or ready).
	Frozen int `json:"frozen"`
}

// TakenJob is the job JSON handed to a worker.
type TakenJob struct {
	ID       string          `json:"id"`
	Input    json.RawMessage `json:"input"`
	Webhook  *string         `json:"webhook"`
	S3Config json.RawMessage `json:"s3Config,omitempty"`
	Policy   json.RawMessage `json:"policy,omitempty"`
}

// DoneReport is a parsed job-done body.
type DoneReport struct {
	Progress bool // status IN_PROGRESS: a progress update
	Output   json.RawMessage
	Error    string
	Failed   bool
	StopPod  bool
	IsStream bool
}

// ParseDone interprets a job-done body the way RunPod does: a status of
// IN_PROGRESS is a progress update, a non-empty error fails the job,
// anything else completes it.
func ParseDone(body []byte, isStream bool) (DoneReport, error) {
	var m struct {
		Status  json.RawMessage `json:"status"`
		Output  json.RawMessage `json:"output"`
		Error   json.RawMessage `json:"error"`
		StopPod json.RawMessage `json:"stopPod"`
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &m) != nil {
		return DoneReport{}, errors.New("job-done body must be a JSON object")
	}
	r := DoneReport{IsStream: isStream, Output: m.Output}
	if m.Status != nil {
		var st string
		if json.Unmarshal(m.Status, &st) == nil && st == string(store.InProgress) {
			r.Progress = true
			return r, nil
		}
	}
	if e := m.Error; e != nil {
		var s string
		switch {
		case string(e) == "null":
		case json.Unmarshal(e, &s) == nil:
			if s != "" {
				r.Failed, r.Error = true, s
			}
		default:
			// A non-string error is kept as its JSON text: the error of a
			// status body is always a string.
			r.Failed, r.Error = true, string(e)
		}
	}
	r.StopPod = string(m.StopPod) == "true"
	return r, nil
}
