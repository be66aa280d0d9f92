package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"berth/app"
	"berth/gpu"
	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/runtime"
	"berth/runtime/fake"
	"berth/worker"
)

// A Berth on the fake backend (app.OnBackend) drives it as it drives
// Docker: a job submitted over the HTTP API is run by a worker the
// supervisor launched on the fake — a Go function speaking the worker
// protocol through package worker with the environment Berth gave it —
// and a pod made through the REST API runs through the pod adapter, is
// stopped (its program sees the SIGTERM) and is removed. The same again
// with the fake behaving as a cluster does (no pause, a stop removes the
// instance, Start only accepts it and an EventStart follows): the
// supervisor's other path, without a cluster.
func TestFakeBackendRunsJobsAndPods(t *testing.T) {
	t.Run("LikeDocker", func(t *testing.T) { fakeBackendRuns(t, fake.Config{}) })
	t.Run("LikeACluster", func(t *testing.T) {
		fakeBackendRuns(t, fake.Config{NoPause: true, NoRestart: true, PendingStart: true})
	})
}

func fakeBackendRuns(t *testing.T, fc fake.Config) {
	const key = "fake-key"
	fb := fake.New(fc)
	fb.Image("echo-worker", func(ctx context.Context, p fake.Process) int {
		err := worker.Start(ctx, worker.Config{Env: p.Getenv, Logger: worker.NewLogger(p.Getenv, p.Out),
			Handler: func(_ context.Context, job *worker.Job) (any, error) {
				return map[string]any{"input": job.Input, "worker": p.Getenv("RUNPOD_POD_ID")}, nil
			}})
		if err != nil {
			fmt.Fprintln(p.Out, err)
			return 1
		}
		return 0
	})
	terminated := make(chan string, 1)
	fb.Image("pod-image", func(ctx context.Context, p fake.Process) int {
		fmt.Fprintln(p.Out, "pod up")
		<-ctx.Done()
		terminated <- p.Getenv("RUNPOD_POD_ID")
		return 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	evs := record(ctx, fb)

	cfg := apptest.Config(t, key)
	cfg.Backend, cfg.RemoveContainersOnStop = app.OnBackend(fb), true
	a := apptest.Start(t, cfg)
	if a.Supervisor() == nil {
		t.Fatal("no supervisor on the fake backend")
	}
	call := func(method, path string, body, out any, want ...int) {
		t.Helper()
		apitest.Call(ctx, t, a.URL(), key, method, path, body, out, want...)
	}

	var tpl struct{ ID string }
	call("POST", "/v1/templates", map[string]any{"name": "fake-worker", "imageName": "echo-worker", "isServerless": true}, &tpl)
	var ep struct{ ID string }
	call("POST", "/v1/endpoints", map[string]any{"templateId": tpl.ID, "computeType": "CPU", "workersMax": 1, "idleTimeout": 5}, &ep)
	var done struct {
		Status string
		Output struct {
			Input  map[string]any
			Worker string
		}
	}
	call("POST", "/v2/"+ep.ID+"/runsync?wait=90000", map[string]any{"input": map[string]any{"n": 7}}, &done)
	if done.Status != "COMPLETED" || done.Output.Input["n"] != float64(7) || done.Output.Worker == "" {
		t.Fatalf("runsync: %+v", done)
	}
	list, err := fb.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(list, func(in runtime.Instance) bool {
		return in.Running && in.Labels[runtime.LabelWorker] == done.Output.Worker && in.Labels[runtime.LabelEndpoint] == ep.ID
	}) {
		t.Errorf("worker %s that ran the job is not a running instance of the fake: %+v", done.Output.Worker, list)
	}

	var pod struct{ ID, DesiredStatus string }
	call("POST", "/v1/pods", map[string]any{"name": "fake-pod", "imageName": "pod-image", "computeType": "CPU"}, &pod, 201)
	if pod.DesiredStatus != "RUNNING" {
		t.Fatalf("pod created: %+v", pod)
	}
	podInstance := evs.waitFor(t, "the pod's start", func(ev runtime.Event) bool {
		return ev.Action == runtime.EventStart && ev.Labels[runtime.LabelPod] == pod.ID
	}).ID
	call("POST", "/v1/pods/"+pod.ID+"/stop", nil, &pod)
	select {
	case id := <-terminated:
		if id != pod.ID {
			t.Errorf("the program terminated is pod %q's, want %q's", id, pod.ID)
		}
	case <-ctx.Done():
		t.Fatal("the pod's program never saw its stop")
	}
	call("GET", "/v1/pods/"+pod.ID, nil, &pod)
	if pod.DesiredStatus != "EXITED" {
		t.Errorf("pod after stop: %+v, want EXITED", pod)
	}
	evs.waitFor(t, "the pod's exit", func(ev runtime.Event) bool {
		return ev.Action == runtime.EventDie && ev.ID == podInstance && ev.ExitCode == 0
	})
	call("DELETE", "/v1/pods/"+pod.ID, nil, nil, 204)
	evs.waitFor(t, "the pod's removal", func(ev runtime.Event) bool {
		return ev.Action == runtime.EventDestroy && ev.ID == podInstance
	})
	if _, err := fb.Inspect(ctx, podInstance); !runtime.IsNotFound(err) {
		t.Errorf("the pod's instance after DELETE: %v, want not found", err)
	}
}

// events is what a subscription to a backend's events has seen.
type events struct {
	mu   sync.Mutex
	seen []runtime.Event
	more chan struct{} // closed at the next event
}

// record follows b's events until ctx ends.
func record(ctx context.Context, b runtime.Backend) *events {
	e := &events{more: make(chan struct{})}
	evs, _ := b.Events(ctx)
	go func() {
		for ev := range evs {
			e.mu.Lock()
			e.seen = append(e.seen, ev)
			close(e.more)
			e.more = make(chan struct{})
			e.mu.Unlock()
		}
	}()
	return e
}

// waitFor returns the first event seen that matches, waiting for it.
func (e *events) waitFor(t *testing.T, what string, match func(runtime.Event) bool) runtime.Event {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		e.mu.Lock()
		i := slices.IndexFunc(e.seen, match)
		more := e.more
		var ev runtime.Event
		if i >= 0 {
			ev = e.seen[i]
		}
		e.mu.Unlock()
		if i >= 0 {
			return ev
		}
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// On a given backend the GPUs are its Devices (unless Config.DiscoverGPUs
// says otherwise): a GPU pod gets the fake's device, as its program sees.
func TestFakeBackendGPUs(t *testing.T) {
	const key = "fake-key"
	const typ = "NVIDIA GeForce RTX 4090"
	dev := gpu.Device{UUID: "GPU-fake-0", Name: typ, TypeID: typ, MemoryMiB: 24564}
	fb := fake.New(fake.Config{Devices: []gpu.Device{dev}})
	given := make(chan []gpu.Device, 1)
	fb.Image("gpu-pod", func(ctx context.Context, p fake.Process) int {
		given <- p.GPUs
		<-ctx.Done()
		return 0
	})

	cfg := apptest.Config(t, key)
	cfg.Backend, cfg.RemoveContainersOnStop = app.OnBackend(fb), true
	first := apptest.Start(t, cfg)
	if s := first.GPUs().Snapshot(); len(s) != 0 {
		t.Errorf("with Config.DiscoverGPUs given, the GPUs are %+v, want its (none)", s)
	}
	first.Stop() // one Berth on the fake at a time: both would label theirs alike

	cfg = apptest.Config(t, key)
	cfg.Backend, cfg.RemoveContainersOnStop, cfg.DiscoverGPUs = app.OnBackend(fb), true, nil
	a := apptest.Start(t, cfg)
	if s := a.GPUs().Snapshot(); len(s) != 1 || s[0].UUID != dev.UUID {
		t.Fatalf("the GPUs of a Berth on the fake: %+v, want its device", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var pod struct{ ID, DesiredStatus string }
	apitest.Call(ctx, t, a.URL(), key, "POST", "/v1/pods", map[string]any{"name": "gpu-pod", "imageName": "gpu-pod",
		"gpuTypeIds": []string{typ}, "gpuCount": 1}, &pod, 201)
	select {
	case got := <-given:
		if len(got) != 1 || got[0].UUID != dev.UUID {
			t.Errorf("the pod's program was given GPUs %+v, want the fake's device", got)
		}
	case <-ctx.Done():
		t.Fatal("the GPU pod's program never ran")
	}
}
