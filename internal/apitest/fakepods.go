package apitest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"berth/mgmt"
	"berth/store"
)

// FakePods is a PodRuntime that records calls and can be told to fail.
type FakePods struct {
	mu         sync.Mutex
	containers map[string]string // pod id → running or stopped
	calls      []string
	failNext   error
}

// NewFakePods is a FakePods with no pod.
func NewFakePods() *FakePods { return &FakePods{containers: map[string]string{}} }

// WithFakePods runs pods on f instead of the runtime (app.Config.Pods).
func WithFakePods(f *FakePods) Option {
	return func(e *Env) { e.Cfg.Pods = f }
}

// FakeStart is when FakePods says every pod started.
var FakeStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (f *FakePods) record(call string) error {
	f.calls = append(f.calls, call)
	err := f.failNext
	f.failNext = nil
	return err
}

// Fail makes the next call answer err.
func (f *FakePods) Fail(err error) {
	f.mu.Lock()
	f.failNext = err
	f.mu.Unlock()
}

// TakeCalls returns the calls made since the last TakeCalls.
func (f *FakePods) TakeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *FakePods) state(p store.Pod) mgmt.PodState {
	st := mgmt.PodState{PortMappings: map[string]int{}, PublicIP: "127.0.0.1", MemoryInGb: 16, StartedAt: FakeStart}
	for i, port := range p.Ports {
		st.PortMappings[strings.Split(port, "/")[0]] = 40000 + i
	}
	if p.ComputeType == "GPU" {
		st.GPU = &store.PodGPU{ID: "NVIDIA GeForce RTX 4090", Count: p.GPUCount, DisplayName: "RTX 4090"}
	}
	return st
}

func (f *FakePods) StartPod(_ context.Context, p store.Pod) (mgmt.PodState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(fmt.Sprintf("start %s v%d", p.ID, p.Version)); err != nil {
		return mgmt.PodState{}, err
	}
	f.containers[p.ID] = "running"
	return f.state(p), nil
}

func (f *FakePods) StopPod(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("stop " + id); err != nil {
		return err
	}
	f.containers[id] = "stopped"
	return nil
}

func (f *FakePods) ResetPod(_ context.Context, p store.Pod) (mgmt.PodState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(fmt.Sprintf("reset %s v%d", p.ID, p.Version)); err != nil {
		return mgmt.PodState{}, err
	}
	f.containers[p.ID] = "running"
	return f.state(p), nil
}

func (f *FakePods) RemovePod(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("remove " + id); err != nil {
		return err
	}
	delete(f.containers, id)
	return nil
}
