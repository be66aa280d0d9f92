package apptest

import (
	"context"
	"testing"

	"berth/app"
	"berth/gpu"
	"berth/runtime/fake"
)

// OnFake runs cfg's Berth on a new in-memory backend (runtime/fake) with
// devs as its GPUs and each of images running fake.Idle: pods and workers
// go through Berth's own supervisor and pod adapter, as on Docker, without
// a daemon. An image not listed fails to pull (register more with Image).
// What is left on the backend when the test ends is removed.
func OnFake(tb testing.TB, cfg *app.Config, devs []gpu.Device, images ...string) *fake.Backend {
	tb.Helper()
	fb := fake.New(fake.Config{Devices: devs})
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
