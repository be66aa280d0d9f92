package apitest

import (
	"berth/gpu"
	"berth/internal/apptest"
	"berth/runtime"
)

// PodGPUs are two RTX 4090s, the host's GPUs of WithFake's usual Berth.
var PodGPUs = []gpu.Device{
	{Index: 0, UUID: "GPU-4090-0", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564},
	{Index: 1, UUID: "GPU-4090-1", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564},
}

// WithFake runs Berth on the in-memory backend (runtime/fake, e.Fake):
// pods and workers go through Berth's own supervisor and pod adapter, devs
// are the host's GPUs and each of images runs until stopped.
func WithFake(devs []gpu.Device, images ...string) Option {
	return func(e *Env) { e.Fake = apptest.OnFake(e.T, &e.Cfg, devs, images...) }
}

// PodInstance is pod id's instance on e.Fake; none fails the test.
func (e *Env) PodInstance(id string) runtime.Instance {
	e.T.Helper()
	in, ok := e.Fake.Pod(id)
	if !ok {
		e.T.Fatalf("pod %s has no instance on the backend", id)
	}
	return in
}

// WorkerLog is what runpod-python prints: JSON lines with requestId, and
// plain lines from the image (a log-route test's worker prints it).
const WorkerLog = `starting handler
{"requestId": null, "message": "Started.", "level": "INFO"}
{"requestId": "job-a", "message": "working on a", "level": "INFO"}
{"requestId": "job-b", "message": "working on b", "level": "INFO"}
plain print from the handler
{"requestId": "job-a", "message": "a done", "level": "INFO"}
`
