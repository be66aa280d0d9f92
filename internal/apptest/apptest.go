// Package apptest is the one test harness over package app: a Berth as
// berth serve composes it (app.New, app.Start), started for a test and
// stopped at its end with its bbolt file checked. Every package's
// end-to-end tests start Berth through it, so none of them composes its
// own product.
package apptest

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"berth/app"
	"berth/gpu"
)

// StopTimeout bounds a Stop (a Berth with containers to remove may take a
// while on a loaded machine).
const StopTimeout = 2 * time.Minute

// Config is the settings the harness starts from: a fresh data folder, a
// loopback port chosen by the kernel, the key given, no Docker, no GPUs
// whatever the host has, and a logger that is quiet unless the test runs
// verbose (then its lines go to the test's log).
func Config(tb testing.TB, key string) app.Config {
	tb.Helper()
	return app.Config{DataDir: tb.TempDir(), Addr: "127.0.0.1:0", Logger: Logger(tb), APIKey: key,
		Backend: app.DockerOff, DiscoverGPUs: NoGPUs}
}

// NoGPUs finds no GPU: tests run without GPUs whatever the host has.
func NoGPUs() ([]gpu.Device, error) { return nil, nil }

// Logger is quiet, or the test's log when it runs verbose (go test -json
// runs verbose). A fuzz target's Berth stays quiet: it serves while the fuzz
// function runs, when testing.F's Log panics.
func Logger(tb testing.TB) *slog.Logger {
	if _, fuzz := tb.(*testing.F); testing.Verbose() && !fuzz {
		return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Berth is one running Berth of a test.
type Berth struct {
	*app.App
	tb  testing.TB
	cfg app.Config
}

// Start starts a Berth with cfg and stops it (file checked) when the test
// ends. A Berth that cannot start fails the test.
func Start(tb testing.TB, cfg app.Config) *Berth {
	tb.Helper()
	b, err := TryStart(tb, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TryStart is Start answering the start's error (for tests of a start
// that must fail) instead of failing the test.
func TryStart(tb testing.TB, cfg app.Config) (*Berth, error) {
	tb.Helper()
	b := &Berth{tb: tb, cfg: cfg}
	if err := b.start(); err != nil {
		return nil, err
	}
	tb.Cleanup(b.Stop)
	return b, nil
}

func (b *Berth) start() error {
	a, err := app.New(b.cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		_ = a.Stop(ctx)
		return err
	}
	b.App = a
	return nil
}

// Config is the settings b was started with.
func (b *Berth) Config() app.Config { return b.cfg }

// Stop checks the bbolt file and stops b; a second Stop does nothing. A
// damaged file or a failed stop fails the test.
func (b *Berth) Stop() {
	if b.App == nil {
		return
	}
	if err := b.Store().Check(); err != nil {
		b.tb.Errorf("berth.db check: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if err := b.App.Stop(ctx); err != nil {
		b.tb.Errorf("stop: %v", err)
	}
	b.App = nil
}

// Restart stops b and starts it again on the same data folder and
// settings (a clean restart; crash tests kill the built binary instead).
func (b *Berth) Restart() {
	b.tb.Helper()
	b.Stop()
	if err := b.start(); err != nil {
		b.tb.Fatal(err)
	}
}
