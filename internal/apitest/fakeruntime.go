package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"berth/gpu"
	"berth/mgmt"
)

// Berth's runtime extensions (GET /v1/gpus, the log routes, the runtime's
// status on endpoints and /health) without Docker: FakeRuntime stands in
// for the supervisor's side of them.

// FakeRuntime is the runtime's side of the extensions: GPUs, container
// logs by "endpoint/worker" or pod id, and endpoint statuses.
type FakeRuntime struct {
	mu     sync.Mutex
	Logs   map[string]string         // container → its log so far
	live   map[string]*io.PipeReader // container → what it writes next (follow)
	Status map[string]any            // endpoint → EndpointStatus
	Fail   error                     // the runtime's next answer
	calls  []string
}

// NewFakeRuntime is a FakeRuntime with no container.
func NewFakeRuntime() *FakeRuntime {
	return &FakeRuntime{Logs: map[string]string{}, live: map[string]*io.PipeReader{}, Status: map[string]any{}}
}

// FakeGPUs are the GPUs WithFakeRuntime's Berth finds.
var FakeGPUs = []gpu.Device{
	{Index: 0, UUID: "GPU-0000", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564, PCIBusID: "00000000:01:00.0"},
	{Index: 1, UUID: "GPU-0001", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564, PCIBusID: "00000000:02:00.0"},
}

// WithFakeRuntime gives the API f's WorkerLogs, PodLogs and
// EndpointStatus (Berth has no runtime of its own without Docker), and
// Berth two GPUs found at start, the first held by worker wkr1.
func WithFakeRuntime(f *FakeRuntime) Option {
	return func(e *Env) {
		e.Cfg.DiscoverGPUs = func() ([]gpu.Device, error) { return FakeGPUs, nil }
		e.Holders = map[string][]string{"wkr1": {FakeGPUs[0].UUID}}
		c := &e.Cfg.HTTP
		c.WorkerLogs = func(ctx context.Context, ep, w string, follow bool, tail int, job string) (io.ReadCloser, error) {
			return f.open(fmt.Sprintf("worker %s/%s follow=%v tail=%d job=%s", ep, w, follow, tail, job), ep+"/"+w, follow, tail, job,
				fmt.Errorf("worker %s: %w", w, mgmt.ErrNoSuchWorker))
		}
		c.PodLogs = func(ctx context.Context, id string, follow bool, tail int) (io.ReadCloser, error) {
			return f.open(fmt.Sprintf("pod %s follow=%v tail=%d", id, follow, tail), id, follow, tail, "",
				fmt.Errorf("pod %s: %w", id, mgmt.ErrNoSuchPod))
		}
		c.EndpointStatus = func(ep string) any {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.Status[ep]
		}
	}
}

// open is a container's log: its last tail lines (0: all), only job's
// runpod JSON lines when job is set, then with follow what is written to
// its live pipe.
func (f *FakeRuntime) open(call, key string, follow bool, tail int, job string, unknown error) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if err := f.Fail; err != nil {
		f.Fail = nil
		return nil, err
	}
	text, ok := f.Logs[key]
	if !ok {
		return nil, unknown
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if tail > 0 && tail < len(lines) {
		lines = lines[len(lines)-tail:]
	}
	if job != "" {
		var kept []string
		for _, l := range lines {
			var v struct {
				RequestID *string `json:"requestId"`
			}
			if json.Unmarshal([]byte(l), &v) == nil && v.RequestID != nil && *v.RequestID == job {
				kept = append(kept, l)
			}
		}
		lines = kept
	}
	past := strings.NewReader(strings.Join(lines, ""))
	if pr := f.live[key]; follow && pr != nil {
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(past, pr), pr}, nil
	}
	return io.NopCloser(past), nil
}

// TakeCalls returns the calls made since the last TakeCalls.
func (f *FakeRuntime) TakeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// follow makes key's container go on logging: the test writes to the
// returned pipe; closing it ends the container's log.
func (f *FakeRuntime) Follow(key string) *io.PipeWriter {
	pr, pw := io.Pipe()
	f.mu.Lock()
	f.live[key] = pr
	f.mu.Unlock()
	return pw
}

// Set changes f under its lock.
func (f *FakeRuntime) Set(fn func(f *FakeRuntime)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

// WorkerLog is what runpod-python prints: JSON lines with requestId, and
// plain lines from the image.
const WorkerLog = `starting handler
{"requestId": null, "message": "Started.", "level": "INFO"}
{"requestId": "job-a", "message": "working on a", "level": "INFO"}
{"requestId": "job-b", "message": "working on b", "level": "INFO"}
plain print from the handler
{"requestId": "job-a", "message": "a done", "level": "INFO"}
`

// FakeStart is a fixed start time for worker views a test plants.
var FakeStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
