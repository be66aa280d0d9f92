// Package backendtest holds any runtime.Backend to the contract
// runtime/backend.go documents, the same suite for Docker
// (runtime/docker), Kubernetes (runtime/kube) and the fake (runtime/fake).
// Where backends differ the suite branches on Caps and on what Start
// answers, never on a backend's name.
package backendtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/runtime"
)

// Program is how a backend runs one behaviour: an image, and arguments or
// environment that choose what it does.
type Program struct {
	Image string
	Cmd   []string
	Env   map[string]string
}

// Harness is a backend under test and how it runs the suite's behaviours.
// runtime/backendtest/testdata/behave is a program with all three.
type Harness struct {
	Backend runtime.Backend
	// Exit prints "line 1", "line 2", "line 3" and exits with the code in
	// $EXIT.
	Exit Program
	// Trap prints "ready"; on SIGTERM it prints "got SIGTERM" and exits 0.
	Trap Program
	// Ignore prints "ready" and ignores SIGTERM: only a kill ends it.
	Ignore Program
	// MissingImage is an image that exists nowhere, for a backend that
	// pulls images itself (Create must fail with runtime.ErrImage); ""
	// where the cluster pulls (the test is skipped).
	MissingImage string
	// Timeout bounds each wait [90s]: generous, it only bounds a failure.
	Timeout time.Duration
}

// Run runs the suite, one subtest per rule, in parallel.
func Run(t *testing.T, h Harness) {
	if h.Timeout <= 0 {
		h.Timeout = 90 * time.Second
	}
	t.Run("ExitIsAnEventWithItsCode", func(t *testing.T) { t.Parallel(); exitEvent(t, h) })
	t.Run("StopSendsATermination", func(t *testing.T) { t.Parallel(); stopGraceful(t, h) })
	t.Run("StopKillsAfterTheGrace", func(t *testing.T) { t.Parallel(); stopKills(t, h) })
	t.Run("PauseUnpause", func(t *testing.T) { t.Parallel(); pause(t, h) })
	t.Run("RestartAStopped", func(t *testing.T) { t.Parallel(); restart(t, h) })
	t.Run("UnknownImage", func(t *testing.T) { t.Parallel(); unknownImage(t, h) })
	t.Run("GoneIsNotAnError", func(t *testing.T) { t.Parallel(); gone(t, h) })
	t.Run("VolumeDeletedInSteps", func(t *testing.T) { t.Parallel(); volumeSteps(t, h) })
}

// run is one subtest's instance and what it has seen of the backend.
type run struct {
	t   *testing.T
	h   Harness
	b   runtime.Backend
	ctx context.Context
	id  string

	mu   sync.Mutex
	evs  []runtime.Event // every instance's: filtered by id when read
	more chan struct{}
	errs []error
}

func unique(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// create subscribes to the events, then creates an instance of p with
// Berth's worker labels; the instance is removed when the test ends.
func create(t *testing.T, h Harness, p Program, env map[string]string) *run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*h.Timeout)
	t.Cleanup(cancel)
	r := &run{t: t, h: h, b: h.Backend, ctx: ctx, more: make(chan struct{})}
	evs, errc := h.Backend.Events(ctx)
	go r.follow(evs, errc)

	e := map[string]string{}
	for k, v := range p.Env {
		e[k] = v
	}
	for k, v := range env {
		e[k] = v
	}
	worker := unique("w")
	spec := runtime.Spec{
		Name:  unique("berth-bt-"),
		Image: p.Image, Cmd: p.Cmd, Env: e,
		Labels: map[string]string{runtime.LabelKind: runtime.KindWorker, runtime.LabelWorker: worker,
			runtime.LabelEndpoint: "backendtest", runtime.LabelVersion: "1"},
		StopGrace: 10 * time.Second,
	}
	c, err := h.Backend.Create(ctx, spec, nil)
	if err != nil {
		t.Fatalf("Create %s: %v", p.Image, err)
	}
	r.mu.Lock()
	r.id = c.ID
	r.mu.Unlock()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
		defer cancel()
		if err := h.Backend.Remove(ctx, c.ID); err != nil {
			t.Errorf("Remove at the end: %v", err)
		}
	})
	return r
}

// follow keeps the backend's events (every instance's: the id is known
// only once Create returns).
func (r *run) follow(evs <-chan runtime.Event, errc <-chan error) {
	for ev := range evs {
		r.mu.Lock()
		r.evs = append(r.evs, ev)
		close(r.more)
		r.more = make(chan struct{})
		r.mu.Unlock()
	}
	if err, ok := <-errc; ok && err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		close(r.more)
		r.more = make(chan struct{})
		r.mu.Unlock()
	}
}

// event waits for the instance's first event after the n-th for which
// match holds, and returns it with its index.
func (r *run) event(what string, after int, match func(runtime.Event) bool) (runtime.Event, int) {
	r.t.Helper()
	deadline := time.NewTimer(r.h.Timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		var evs []runtime.Event
		for _, ev := range r.evs {
			if ev.ID == r.id && r.id != "" {
				evs = append(evs, ev)
			}
		}
		more, errs := r.more, slices.Clone(r.errs)
		r.mu.Unlock()
		for i := after; i < len(evs); i++ {
			if match(evs[i]) {
				return evs[i], i + 1
			}
		}
		if len(errs) > 0 {
			r.t.Fatalf("waiting for %s: the event stream ended: %v", what, errs)
		}
		select {
		case <-more:
		case <-deadline.C:
			r.t.Fatalf("no %s event in %v; the instance's events: %+v", what, r.h.Timeout, evs)
		}
	}
}

// ended waits for the instance's end after a Stop: an EventDie with its
// exit code (known true), or, where stopping removes the instance (no
// Caps.Restart), its EventDestroy when the removal was reported before
// the exit could be (known false: a Pod deleted right after its program
// ended).
func (r *run) ended(after int) (code int, known bool, n int) {
	r.t.Helper()
	restart := r.b.Caps().Restart
	ev, n := r.event("die", after, func(ev runtime.Event) bool {
		return ev.Action == runtime.EventDie || !restart && ev.Action == runtime.EventDestroy
	})
	if ev.Action != runtime.EventDie {
		r.t.Log("the removal was reported before the exit: its exit code is not checked")
	}
	return ev.ExitCode, ev.Action == runtime.EventDie, n
}

func action(a string) func(runtime.Event) bool {
	return func(ev runtime.Event) bool { return ev.Action == a }
}

// start starts the instance and, where Start only accepts it, waits for
// its EventStart.
func (r *run) start(after int) int {
	r.t.Helper()
	running, err := r.b.Start(r.ctx, r.id)
	if err != nil {
		r.t.Fatalf("Start: %v", err)
	}
	_, n := r.event("start", after, action(runtime.EventStart))
	if !running {
		in := r.inspect()
		if !in.Running {
			r.t.Fatalf("after its EventStart the instance is not running: %+v", in)
		}
	}
	return n
}

func (r *run) inspect() runtime.Instance {
	r.t.Helper()
	in, err := r.b.Inspect(r.ctx, r.id)
	if err != nil {
		r.t.Fatalf("Inspect: %v", err)
	}
	return in
}

// logs reads the instance's output, without following.
func (r *run) logs(tail int) string {
	r.t.Helper()
	rc, err := r.b.Logs(r.ctx, r.id, false, tail)
	if err != nil {
		r.t.Fatalf("Logs: %v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		r.t.Fatalf("read logs: %v", err)
	}
	return string(b)
}

// follower follows the instance's output from now on.
type follower struct {
	t     *testing.T
	rc    io.ReadCloser
	lines chan string
	done  chan error
}

func (r *run) followLogs() *follower {
	r.t.Helper()
	rc, err := r.b.Logs(r.ctx, r.id, true, 0)
	if err != nil {
		r.t.Fatalf("Logs (follow): %v", err)
	}
	f := &follower{t: r.t, rc: rc, lines: make(chan string, 100), done: make(chan error, 1)}
	r.t.Cleanup(func() { rc.Close() })
	go func() {
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		close(f.lines)
		f.done <- sc.Err()
	}()
	return f
}

// line waits for a line of the output equal to want.
func (f *follower) line(want string, timeout time.Duration) {
	f.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var seen []string
	for {
		select {
		case l, ok := <-f.lines:
			if !ok {
				f.t.Fatalf("the followed output ended before %q; it had %q", want, seen)
			}
			if l == want {
				return
			}
			seen = append(seen, l)
		case <-deadline.C:
			f.t.Fatalf("no line %q in %v; the output had %q", want, timeout, seen)
		}
	}
}

// ends waits for the followed output to end (the instance stopped).
func (f *follower) ends(timeout time.Duration) []string {
	f.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var rest []string
	for {
		select {
		case l, ok := <-f.lines:
			if !ok {
				return rest
			}
			rest = append(rest, l)
		case <-deadline.C:
			f.t.Fatalf("following the output did not end in %v after the instance stopped; it had %q", timeout, rest)
		}
	}
}

// An instance created and started runs; Inspect and List report it with
// Berth's labels and the ones the backend adds; its exit is an EventDie
// with its exit code, Inspect says how it ended, its output is kept
// (with tail); Remove makes it gone (EventDestroy, not found).
func exitEvent(t *testing.T, h Harness) {
	r := create(t, h, h.Exit, map[string]string{"EXIT": "3"})
	in := r.inspect()
	if in.ID != r.id || in.Running || in.Labels[runtime.LabelKind] != runtime.KindWorker ||
		in.Labels[runtime.LabelManaged] != "true" || in.Labels[runtime.LabelDataDir] == "" {
		t.Errorf("Inspect of the created instance: %+v", in)
	}
	if _, err := h.Backend.Start(r.ctx, r.id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	die, _ := r.event("die", 0, action(runtime.EventDie))
	if die.ExitCode != 3 || die.Labels[runtime.LabelWorker] != in.Labels[runtime.LabelWorker] {
		t.Errorf("die event %+v, want exit code 3 and the instance's labels", die)
	}
	in = r.inspect()
	if in.Alive() || in.ExitCode != 3 || in.FinishedAt.IsZero() {
		t.Errorf("Inspect after the exit: %+v, want ended with 3 and its end time", in)
	}
	// After an event of it: a backend that lists from a cache (a
	// cluster's informer) has seen it by then.
	list, err := h.Backend.List(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(x runtime.Instance) bool { return x.ID == r.id })
	if i < 0 {
		t.Fatalf("List lacks the instance %s: %+v", r.id, list)
	}
	if got := list[i].Labels; got[runtime.LabelWorker] != in.Labels[runtime.LabelWorker] || got[runtime.LabelEndpoint] != "backendtest" || got[runtime.LabelDataDir] != in.Labels[runtime.LabelDataDir] {
		t.Errorf("List's labels %v, Inspect's %v", got, in.Labels)
	}

	if got, want := r.logs(0), "line 1\nline 2\nline 3\n"; got != want {
		t.Errorf("Logs: %q, want %q", got, want)
	}
	if got, want := r.logs(2), "line 2\nline 3\n"; got != want {
		t.Errorf("Logs with tail 2: %q, want %q", got, want)
	}

	if err := h.Backend.Remove(r.ctx, r.id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	r.event("destroy", 0, action(runtime.EventDestroy))
	if _, err := h.Backend.Inspect(r.ctx, r.id); !runtime.IsNotFound(err) {
		t.Errorf("Inspect of a removed instance: %v, want ErrNotFound", err)
	}
	if list, err := h.Backend.List(r.ctx); err != nil || slices.ContainsFunc(list, func(x runtime.Instance) bool { return x.ID == r.id }) {
		t.Errorf("List after Remove: %v %+v, want it gone", err, list)
	}
}

// Stop with a grace sends a termination the program observes: it ends on
// its own (exit 0), well before the grace, and following its output ends
// with the instance. With Caps.Restart the stopped instance stays and a
// second Stop is no error; without, stopping removed it.
func stopGraceful(t *testing.T, h Harness) {
	r := create(t, h, h.Trap, nil)
	n := r.start(0)
	f := r.followLogs()
	f.line("ready", h.Timeout)
	begin := time.Now()
	grace := 4 * h.Timeout
	if err := h.Backend.Stop(r.ctx, r.id, grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if code, known, _ := r.ended(n); known && code != 0 {
		t.Errorf("die after a graceful stop: exit code %d, want 0 (the program's own)", code)
	}
	if took := time.Since(begin); took >= grace {
		t.Errorf("the stop took %v, the whole grace", took)
	}
	if rest := f.ends(h.Timeout); !slices.Contains(rest, "got SIGTERM") {
		t.Errorf("the followed output after the stop: %q, want the program's %q", rest, "got SIGTERM")
	}
	if !h.Backend.Caps().Restart {
		r.event("destroy", 0, action(runtime.EventDestroy))
		if _, err := h.Backend.Inspect(r.ctx, r.id); !runtime.IsNotFound(err) {
			t.Errorf("Inspect after a stop without Caps.Restart: %v, want ErrNotFound (stopping removes)", err)
		}
		return
	}
	if in := r.inspect(); in.Alive() || in.ExitCode != 0 {
		t.Errorf("Inspect after the stop: %+v", in)
	}
	if logs := r.logs(0); !strings.Contains(logs, "got SIGTERM\n") {
		t.Errorf("Logs after the stop: %q", logs)
	}
	if err := h.Backend.Stop(r.ctx, r.id, time.Second); err != nil {
		t.Errorf("Stop of a stopped instance: %v, want nil", err)
	}
}

// A program that ignores the termination is killed once the grace is
// over, not before: exit 137.
func stopKills(t *testing.T, h Harness) {
	r := create(t, h, h.Ignore, nil)
	n := r.start(0)
	f := r.followLogs()
	f.line("ready", h.Timeout)
	const grace = 2 * time.Second
	begin := time.Now()
	if err := h.Backend.Stop(r.ctx, r.id, grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	code, known, _ := r.ended(n)
	if took := time.Since(begin); took < grace-100*time.Millisecond {
		t.Errorf("killed after %v, before the %v grace", took, grace)
	}
	if known && code != 137 {
		t.Errorf("die after the grace: exit code %d, want 137 (SIGKILL)", code)
	}
}

// With Caps.Pause a running instance is frozen and thawed, still running
// throughout; once thawed it handles a stop as before. Without, Pause is
// refused.
func pause(t *testing.T, h Harness) {
	r := create(t, h, h.Trap, nil)
	n := r.start(0)
	f := r.followLogs()
	f.line("ready", h.Timeout)
	if !h.Backend.Caps().Pause {
		if err := h.Backend.Pause(r.ctx, r.id); err == nil {
			t.Error("Pause without Caps.Pause succeeded")
		}
		return
	}
	if err := h.Backend.Pause(r.ctx, r.id); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if in := r.inspect(); !in.Paused || !in.Running {
		t.Errorf("Inspect of a paused instance: %+v, want paused and running", in)
	}
	if err := h.Backend.Unpause(r.ctx, r.id); err != nil {
		t.Fatalf("Unpause: %v", err)
	}
	if in := r.inspect(); in.Paused || !in.Running {
		t.Errorf("Inspect after Unpause: %+v, want running", in)
	}
	if err := h.Backend.Stop(r.ctx, r.id, 4*h.Timeout); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if code, known, _ := r.ended(n); known && code != 0 {
		t.Errorf("die after the thawed program's stop: %d, want 0", code)
	}
}

// With Caps.Restart a stopped instance starts again and runs its program
// anew (a second "ready"). Without, it is gone after the stop (see
// StopSendsATermination) and Start of it fails.
func restart(t *testing.T, h Harness) {
	r := create(t, h, h.Trap, nil)
	n := r.start(0)
	f := r.followLogs()
	f.line("ready", h.Timeout)
	if err := h.Backend.Stop(r.ctx, r.id, 4*h.Timeout); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	_, _, n = r.ended(n)
	if !h.Backend.Caps().Restart {
		if _, err := h.Backend.Start(r.ctx, r.id); err == nil {
			t.Error("Start of a stopped instance without Caps.Restart succeeded")
		}
		return
	}
	f.ends(h.Timeout)
	n = r.start(n)
	f = r.followLogs()
	f.line("ready", h.Timeout)
	f.line("ready", h.Timeout) // the second run's

	if err := h.Backend.Stop(r.ctx, r.id, 4*h.Timeout); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if code, _, _ := r.ended(n); code != 0 {
		t.Errorf("die of the second run: %d, want 0", code)
	}
}

// An image that cannot be had fails Create with runtime.ErrImage, where
// the backend pulls.
func unknownImage(t *testing.T, h Harness) {
	if h.MissingImage == "" {
		t.Skip("the backend does not pull images itself (Harness.MissingImage is empty)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	c, err := h.Backend.Create(ctx, runtime.Spec{Name: unique("berth-bt-"), Image: h.MissingImage,
		Labels: map[string]string{runtime.LabelKind: runtime.KindWorker}}, nil)
	if err == nil {
		_ = h.Backend.Remove(ctx, c.ID)
		t.Fatalf("Create of %s succeeded", h.MissingImage)
	}
	if !errors.Is(err, runtime.ErrImage) {
		t.Errorf("Create of %s: %v, want an error matching runtime.ErrImage", h.MissingImage, err)
	}
}

// What does not exist: Inspect and Logs say ErrNotFound; Remove of an
// instance already gone, and RemovePodVolume of a volume never made, are
// not errors.
func gone(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	r := create(t, h, h.Exit, nil)
	if err := h.Backend.Remove(ctx, r.id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	r.event("destroy", 0, action(runtime.EventDestroy))
	if err := h.Backend.Remove(ctx, r.id); err != nil {
		t.Errorf("Remove of an instance already gone: %v, want nil", err)
	}
	if _, err := h.Backend.Inspect(ctx, r.id); !runtime.IsNotFound(err) {
		t.Errorf("Inspect of an instance gone: %v, want ErrNotFound", err)
	}
	if rc, err := h.Backend.Logs(ctx, r.id, false, 0); !runtime.IsNotFound(err) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("Logs of an instance gone: %v, want ErrNotFound", err)
	}
	if err := h.Backend.RemovePodVolume(ctx, unique("nopod")); err != nil {
		t.Errorf("RemovePodVolume of a volume never made: %v, want nil", err)
	}
}

// A network volume's deletion steps (runtime.Volumes): set aside, its
// storage is out of reach and a restore brings it back; removed, it is
// gone; each step on a volume that does not exist, and the removal of a
// registry login never used, is not an error. Where the backend has a
// host directory (VolumeStatus.Path) the suite looks at it.
func volumeSteps(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	b := h.Backend
	id := unique("vol")
	st, err := b.CreateVolume(ctx, id, 10)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	exists := func(when string, want bool) {
		t.Helper()
		if st.Path == "" {
			return
		}
		if _, err := os.Stat(st.Path); (err == nil) != want {
			t.Errorf("%s: volume directory %s: %v, want present %v", when, st.Path, err, want)
		}
	}
	exists("created", true)
	if err := b.GrowVolume(ctx, id, 20); err != nil {
		t.Errorf("GrowVolume: %v", err)
	}
	if err := b.SetAsideVolume(id); err != nil {
		t.Fatalf("SetAsideVolume: %v", err)
	}
	exists("set aside", false)
	if err := b.RestoreVolume(id); err != nil {
		t.Fatalf("RestoreVolume: %v", err)
	}
	exists("restored", true)
	if err := b.SetAsideVolume(id); err != nil {
		t.Fatalf("SetAsideVolume: %v", err)
	}
	if err := b.RemoveVolume(ctx, id); err != nil {
		t.Fatalf("RemoveVolume: %v", err)
	}
	exists("removed", false)
	if st.Path != "" && b.VolumeStatus(id).UsedBytes != 0 {
		t.Errorf("a removed volume holds %d bytes", b.VolumeStatus(id).UsedBytes)
	}
	none := unique("novol")
	for what, err := range map[string]error{
		"RemoveVolume again": b.RemoveVolume(ctx, id), "SetAsideVolume of none": b.SetAsideVolume(none),
		"RestoreVolume of none": b.RestoreVolume(none), "RemoveVolume of none": b.RemoveVolume(ctx, none),
		"RemoveRegistryAuth of a login never used": b.RemoveRegistryAuth(ctx, unique("auth")),
	} {
		if err != nil {
			t.Errorf("%s: %v, want nil", what, err)
		}
	}
}
