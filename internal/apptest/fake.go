package apptest

import (
	"context"
	"fmt"
	"testing"

	"berth/app"
	"berth/gpu"
	"berth/runtime/fake"
	"berth/worker"
)

// OnFake runs cfg's Berth on a new in-memory backend (runtime/fake) with
// devs as its GPUs and each of images running fake.Idle: pods and workers
// go through Berth's own supervisor and pod adapter, as on Docker, without
// a daemon. An image not listed fails to pull (register more with Image).
// What is left on the backend when the test ends is removed.
func OnFake(tb testing.TB, cfg *app.Config, devs []gpu.Device, images ...string) *fake.Backend {
	tb.Helper()
	return OnFakeAs(tb, cfg, fake.Config{Devices: devs}, images...)
}

// OnFakeAs is OnFake with the backend's whole configuration (fc: behave
// as a cluster, say).
func OnFakeAs(tb testing.TB, cfg *app.Config, fc fake.Config, images ...string) *fake.Backend {
	tb.Helper()
	fb := fake.New(fc)
	for _, im := range images {
		fb.Image(im, fake.Idle)
	}
	// Registered before the Berth's own: runs after its Stop.
	tb.Cleanup(func() {
		list, _ := fb.List(context.Background())
		for _, in := range list {
			_ = fb.Remove(context.Background(), in.ID)
		}
	})
	cfg.Backend, cfg.DiscoverGPUs = app.OnBackend(fb), nil
	return fb
}

// WorkerProgram is a worker image for the fake backend: package worker
// (Berth's Go SDK, which behaves as runpod-python) in the instance,
// reading its environment and logging to its output, h running each job
// it takes. The program exits 1 when the worker gives up.
func WorkerProgram(h worker.Handler) fake.Program {
	return func(ctx context.Context, p fake.Process) int {
		err := worker.Start(ctx, worker.Config{Env: p.Getenv, Logger: worker.NewLogger(p.Getenv, p.Out), Handler: h})
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(p.Out, err)
			return 1
		}
		return 0
	}
}
