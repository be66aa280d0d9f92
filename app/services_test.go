package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"berth/gpu"
)

// The services start in order and stop in reverse; a start that fails
// stops those already started, last first, and returns its error (joined
// with theirs); Stop after that, or a second Stop, does nothing; a second
// Start fails and starts nothing.
func TestServicesOrder(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name       string
		failStart  string // the service whose Start fails
		failStop   string // the service whose Stop fails
		stopFirst  bool   // Stop before any Start
		wantStart  []string
		wantStop   []string // what Start's rollback and then Stop stopped
		wantErrStr string   // in Start's error
	}{
		{name: "all start, stop in reverse", wantStart: []string{"a", "b", "c", "d"}, wantStop: []string{"d", "b", "a"}},
		{name: "the third fails: the first two stop, last first", failStart: "c",
			wantStart: []string{"a", "b", "c"}, wantStop: []string{"b", "a"}, wantErrStr: "boom"},
		{name: "the first fails: nothing to stop", failStart: "a", wantStart: []string{"a"}, wantErrStr: "boom"},
		{name: "a rollback's stop error joins the start's", failStart: "d", failStop: "b",
			wantStart: []string{"a", "b", "c", "d"}, wantStop: []string{"b", "a"}, wantErrStr: "boom\nstop b"},
		{name: "a stop error does not stop the others", failStop: "d",
			wantStart: []string{"a", "b", "c", "d"}, wantStop: []string{"d", "b", "a"}},
		{name: "stop before start: nothing ran", stopFirst: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var started, stopped []string
			mk := func(name string, withStop bool) service {
				sv := service{name: name, start: func(context.Context) error {
					started = append(started, name)
					if name == c.failStart {
						return boom
					}
					return nil
				}}
				if withStop {
					sv.stop = func(context.Context) error {
						stopped = append(stopped, name)
						if name == c.failStop {
							return errors.New("stop " + name)
						}
						return nil
					}
				}
				return sv
			}
			// c has no stop (as app's "before serve"), d no start's undo to
			// skip: every shape of the list.
			s := &services{list: []service{mk("a", true), mk("b", true), mk("c", false), mk("d", true)}}
			ctx := context.Background()
			if c.stopFirst {
				if err := s.Stop(ctx); err != nil {
					t.Fatalf("Stop before Start: %v", err)
				}
				if err := s.Start(ctx); err == nil {
					t.Fatal("Start after Stop succeeded")
				}
			} else {
				err := s.Start(ctx)
				if (err != nil) != (c.wantErrStr != "") || err != nil && err.Error() != c.wantErrStr {
					t.Fatalf("Start: %v, want %q", err, c.wantErrStr)
				}
				if err != nil && !errors.Is(err, boom) {
					t.Errorf("Start's error %v does not wrap the failed start's", err)
				}
				if err := s.Start(ctx); err == nil || !strings.Contains(err.Error(), "already started") {
					t.Errorf("second Start: %v", err)
				}
				err = s.Stop(ctx)
				if c.failStop != "" && c.failStart == "" && (err == nil || err.Error() != "stop "+c.failStop) {
					t.Errorf("Stop: %v, want stop %s", err, c.failStop)
				}
			}
			if err := s.Stop(ctx); err != nil {
				t.Errorf("second Stop: %v", err)
			}
			if !reflect.DeepEqual(started, c.wantStart) || !reflect.DeepEqual(stopped, c.wantStop) {
				t.Errorf("started %v, stopped %v; want %v, %v", started, stopped, c.wantStart, c.wantStop)
			}
		})
	}
}

// A Berth's order: the listeners' drain and the balancer (front) stop
// after the series' last save, which is after the queue, which is after
// the runtime; accepting is last. Stop twice is safe; Start after Stop
// fails; a Start that fails (before serve) has stopped what it started,
// and Stop then releases the file (New opens it again).
func TestAppServicesOrder(t *testing.T) {
	dir := t.TempDir()
	fail := errors.New("before serve failed")
	cfg := Config{DataDir: dir, Addr: "127.0.0.1:0", APIKey: "k", Backend: DockerOff,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil },
		BeforeServe:  func(context.Context, *App) error { return fail }}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"front", "series", "queue", "sampler", "usage repair", "cleaner", "builds", "verify", "before serve", "serve"}
	if got := a.services.names(); !reflect.DeepEqual(got, want) {
		t.Errorf("services %v, want %v", got, want)
	}
	ctx := context.Background()
	if err := a.Start(ctx); !errors.Is(err, fail) {
		t.Fatalf("Start: %v, want the BeforeServe error", err)
	}
	if a.services.up != 0 {
		t.Errorf("%d services still up after a failed start", a.services.up)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("Stop after a failed Start: %v", err)
	}

	cfg.BeforeServe = nil
	if a, err = New(cfg); err != nil {
		t.Fatalf("New after a failed start's Stop: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := a.Start(ctx); err == nil {
		t.Error("Start after Stop succeeded")
	}
}
