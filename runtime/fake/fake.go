// Package fake is a runtime.Backend in memory, for tests and embedders:
// Berth's supervisor, pods and workers run on it as on Docker or
// Kubernetes, without either. What an instance runs is a Go function
// registered for its image name (Backend.Image); it gets the instance's
// environment and a writer for its output, and its context is cancelled
// when the instance is stopped (SIGTERM); after the stop's grace it is
// killed (exit 137) whether or not the function returned. Such a function
// can be a real worker of package worker reading the environment Berth
// gives it, so worker and pod tests run without a container runtime.
//
// It keeps the backend's contract (runtime/backendtest runs the same suite
// against it, Docker and Kubernetes): events as Docker sends them (start,
// die with the exit code, destroy), Stop and Remove semantics per Caps,
// logs with tail and follow. What it keeps is bounded: MaxInstances
// instances, MaxLogLines lines of output each, MaxBacklog undelivered
// events per subscription (a subscriber that falls further behind gets an
// error and resubscribes, as after a daemon restart).
package fake

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"berth/gpu"
	"berth/runtime"
)

// Program is what an instance of an image runs. ctx ends when the
// instance is asked to stop (SIGTERM); the return value is its exit code.
// A function still running after the stop's grace is abandoned: the
// instance exits 137 and the function's further output is dropped.
type Program func(ctx context.Context, p Process) int

// Process is one run of an instance, as its Program sees it.
type Process struct {
	ID, Name, Image string
	// Args is the spec's Entrypoint followed by its Cmd.
	Args   []string
	Env    map[string]string
	Labels map[string]string
	GPUs   []gpu.Device
	Mounts []runtime.Mount
	// Out is the instance's output (stdout and stderr merged): Logs
	// returns it by line. A write blocks while the instance is paused.
	Out io.Writer
}

// Getenv reads the process's environment (worker.Config.Env takes it).
func (p Process) Getenv(k string) string { return p.Env[k] }

// Config is a Backend's settings; the zero value behaves as Docker does
// (pause, restart).
type Config struct {
	// Instance is this Berth's LabelDataDir on its instances ["fake"].
	Instance string
	// NoPause and NoRestart turn off Caps.Pause and Caps.Restart (as on
	// Kubernetes: a stop then removes the instance).
	NoPause, NoRestart bool
	// PendingStart makes Start only accept the instance (running false)
	// and an EventStart follow once it runs, as a Pod does.
	PendingStart bool
	// Devices are the GPUs Devices reports (SetDevices changes them).
	Devices []gpu.Device
	// MaxInstances bounds the instances kept (Create fails beyond it)
	// [1000]; MaxLogLines the lines of output kept of each [10000];
	// MaxBacklog the events a subscription may have undelivered [10000].
	MaxInstances, MaxLogLines, MaxBacklog int
}

// Backend is the in-memory runtime.Backend. It is safe for concurrent use.
type Backend struct {
	cfg Config

	mu      sync.Mutex
	cond    *sync.Cond // broadcast when a pause ends or a run is abandoned
	images  map[string]Program
	devices []gpu.Device
	byID    map[string]*instance
	byName  map[string]*instance
	subs    map[*subscription]bool
	podVols map[string]bool
	// vols are the network volumes' sizes (GB), a volume set aside
	// marked; auths the registry logins the instances were made with.
	vols  map[string]*volume
	auths map[string]bool

	failNext map[Op]error // FailNext's errors (inject.go)
}

type volume struct {
	sizeGB int
	aside  bool
}

var _ runtime.Backend = (*Backend)(nil)

// New makes a Backend with no image; register them with Image.
func New(cfg Config) *Backend {
	if cfg.Instance == "" {
		cfg.Instance = "fake"
	}
	if cfg.MaxInstances <= 0 {
		cfg.MaxInstances = 1000
	}
	if cfg.MaxLogLines <= 0 {
		cfg.MaxLogLines = 10000
	}
	if cfg.MaxBacklog <= 0 {
		cfg.MaxBacklog = 10000
	}
	b := &Backend{cfg: cfg, images: map[string]Program{}, devices: slices.Clone(cfg.Devices),
		byID: map[string]*instance{}, byName: map[string]*instance{}, subs: map[*subscription]bool{}, podVols: map[string]bool{},
		vols: map[string]*volume{}, auths: map[string]bool{}}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Image registers what instances of image run; Create fails for an image
// never registered, as a pull of an image that does not exist.
func (b *Backend) Image(image string, p Program) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.images[image] = p
}

// SetDevices replaces the GPUs Devices reports.
func (b *Backend) SetDevices(devs []gpu.Device) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.devices = slices.Clone(devs)
}

// Instance is the LabelDataDir of this backend's instances.
func (b *Backend) Instance() string { return b.cfg.Instance }

// Name implements runtime.Backend.
func (b *Backend) Name() string { return "fake" }

// Caps implements runtime.Backend.
func (b *Backend) Caps() runtime.Caps {
	return runtime.Caps{Pause: !b.cfg.NoPause, Restart: !b.cfg.NoRestart, NetworkVolumes: true, Place: "the fake backend"}
}

// Devices implements runtime.Backend.
func (b *Backend) Devices(context.Context) ([]gpu.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.devices), nil
}

// Ping implements runtime.Backend.
func (b *Backend) Ping(ctx context.Context) error { return ctx.Err() }

// Instance states, Docker's words.
const (
	stateCreated = "created"
	statePending = "pending" // accepted, not running yet (PendingStart)
	stateRunning = "running"
	statePaused  = "paused"
	stateExited  = "exited"
)

type instance struct {
	id   string
	spec runtime.Spec
	prog Program

	state             string
	exitCode          int
	started, finished time.Time
	run               *run // the current run; nil when not running
	logs              logBuf
	readers           int // Logs followers not yet closed (Readers)
}

// run is one execution of an instance's Program.
type run struct {
	cancel context.CancelFunc // SIGTERM
	done   chan struct{}      // closed when the run ended (returned or killed)
}

func newID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func notFound(id string) error {
	return runtime.WithKind(runtime.ErrNotFound, fmt.Errorf("fake: no such instance %s", id))
}

// Create implements runtime.Backend: an image without a Program fails as
// a pull does (runtime.ErrImage).
func (b *Backend) Create(ctx context.Context, spec runtime.Spec, _ func(string)) (runtime.Created, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Created{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.failLocked(OpCreate); err != nil {
		return runtime.Created{}, err
	}
	prog, ok := b.images[spec.Image]
	switch {
	case !ok:
		return runtime.Created{}, runtime.WithKind(runtime.ErrImage,
			fmt.Errorf("pull %s: the fake backend has no such image (register it with Image)", spec.Image))
	case spec.Name != "" && b.byName[spec.Name] != nil:
		return runtime.Created{}, fmt.Errorf("fake: the name %q is already in use by instance %s", spec.Name, b.byName[spec.Name].id)
	case len(b.byID) >= b.cfg.MaxInstances:
		return runtime.Created{}, fmt.Errorf("fake: %d instances exist, the bound (Config.MaxInstances)", len(b.byID))
	}
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[runtime.LabelManaged] = "true"
	spec.Labels[runtime.LabelDataDir] = b.cfg.Instance
	spec.Env = maps.Clone(spec.Env)
	spec.Mounts = slices.Clone(spec.Mounts)
	spec.GPUs = slices.Clone(spec.GPUs)
	for _, m := range spec.Mounts {
		if m.Kind == runtime.MountPod {
			b.podVols[m.ID] = true
		}
	}
	if spec.AuthID != "" {
		b.auths[spec.AuthID] = true
	}
	in := &instance{id: newID(), spec: spec, prog: prog, state: stateCreated}
	in.logs.max = b.cfg.MaxLogLines
	b.byID[in.id] = in
	if spec.Name != "" {
		b.byName[spec.Name] = in
	}
	return runtime.Created{ID: in.id}, nil
}

// Start implements runtime.Backend.
func (b *Backend) Start(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.failLocked(OpStart); err != nil {
		return false, err
	}
	in := b.byID[id]
	switch {
	case in == nil:
		return false, notFound(id)
	case in.run != nil:
		return true, nil // already running: not an error, as Docker
	case in.state == statePending:
		return false, nil
	case in.state == stateExited && b.cfg.NoRestart:
		return false, fmt.Errorf("fake: instance %s has ended and cannot start again (Caps.Restart is false)", id)
	}
	if b.cfg.PendingStart {
		in.state = statePending
		go func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.byID[id] == in && in.state == statePending {
				b.launchLocked(in)
			}
		}()
		return false, nil
	}
	b.launchLocked(in)
	return true, nil
}

// launchLocked runs the instance's Program.
func (b *Backend) launchLocked(in *instance) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{})}
	in.run, in.state, in.exitCode = r, stateRunning, 0
	in.started, in.finished = time.Now(), time.Time{}
	p := Process{
		ID: in.id, Name: in.spec.Name, Image: in.spec.Image,
		Args:   append(slices.Clone(in.spec.Entrypoint), in.spec.Cmd...),
		Env:    maps.Clone(in.spec.Env),
		Labels: maps.Clone(in.spec.Labels),
		GPUs:   slices.Clone(in.spec.GPUs),
		Mounts: slices.Clone(in.spec.Mounts),
		Out:    &output{b: b, in: in, r: r},
	}
	b.emitLocked(in, runtime.EventStart, 0, in.started)
	go func() {
		code := b.call(ctx, in.prog, p)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.endLocked(in, r, code)
	}()
}

// call runs prog, a panic being exit 2 with the panic as output (Go's).
func (b *Backend) call(ctx context.Context, prog Program, p Process) (code int) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(p.Out, "panic: %v\n", v)
			code = 2
		}
	}()
	return prog(ctx, p)
}

// endLocked ends run r of in with code, unless it ended already.
func (b *Backend) endLocked(in *instance, r *run, code int) {
	if in.run != r {
		return
	}
	r.cancel()
	in.run, in.state, in.exitCode, in.finished = nil, stateExited, code, time.Now()
	in.logs.end()
	close(r.done)
	b.cond.Broadcast() // writers blocked by a pause give up
	b.emitLocked(in, runtime.EventDie, code, in.finished)
}

// Stop implements runtime.Backend: the Program's ctx is cancelled, and
// after grace the instance is killed (137). Without Caps.Restart the
// instance is removed as well.
func (b *Backend) Stop(ctx context.Context, id string, grace time.Duration) error {
	b.mu.Lock()
	if err := b.failLocked(OpStop); err != nil {
		b.mu.Unlock()
		return err
	}
	in := b.byID[id]
	if in == nil {
		b.mu.Unlock()
		return notFound(id)
	}
	r := in.run
	if r == nil {
		if in.state == statePending {
			in.state = stateCreated
		}
		if b.cfg.NoRestart {
			b.removeLocked(in)
		}
		b.mu.Unlock()
		return nil
	}
	if in.state == statePaused {
		in.state = stateRunning // the stop thaws it, as Docker's does
		b.cond.Broadcast()
	}
	r.cancel()
	if grace <= 0 {
		b.endLocked(in, r, 137)
	} else {
		// The kill happens after grace whatever the caller's ctx.
		time.AfterFunc(grace, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.endLocked(in, r, 137)
		})
	}
	b.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if b.cfg.NoRestart {
		b.mu.Lock()
		if b.byID[id] == in {
			b.removeLocked(in)
		}
		b.mu.Unlock()
	}
	return nil
}

// Remove implements runtime.Backend: a running instance is killed first.
func (b *Backend) Remove(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.failLocked(OpRemove); err != nil {
		return err
	}
	if in := b.byID[id]; in != nil {
		b.removeLocked(in)
	}
	return nil
}

func (b *Backend) removeLocked(in *instance) {
	if in.run != nil {
		b.endLocked(in, in.run, 137)
	}
	delete(b.byID, in.id)
	if b.byName[in.spec.Name] == in {
		delete(b.byName, in.spec.Name)
	}
	in.state = "removed"
	in.logs.end()
	b.emitLocked(in, runtime.EventDestroy, 0, time.Now())
}

// Pause implements runtime.Backend: the instance's writes block until
// Unpause (a Program cannot be frozen; its output can).
func (b *Backend) Pause(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.byID[id]
	switch {
	case b.cfg.NoPause:
		return errors.New("fake: pause is off (Config.NoPause)")
	case in == nil:
		return notFound(id)
	case in.state == statePaused:
		return fmt.Errorf("fake: instance %s is already paused", id)
	case in.run == nil:
		return fmt.Errorf("fake: instance %s is not running", id)
	}
	in.state = statePaused
	return nil
}

// Unpause implements runtime.Backend.
func (b *Backend) Unpause(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.byID[id]
	switch {
	case in == nil:
		return notFound(id)
	case in.state != statePaused:
		return fmt.Errorf("fake: instance %s is not paused", id)
	}
	in.state = stateRunning
	b.cond.Broadcast()
	return nil
}

// Inspect implements runtime.Backend.
func (b *Backend) Inspect(_ context.Context, id string) (runtime.Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.byID[id]
	if in == nil {
		return runtime.Instance{}, notFound(id)
	}
	return in.view(), nil
}

// List implements runtime.Backend: every instance of this backend's
// Berth (Config.Instance).
func (b *Backend) List(ctx context.Context) ([]runtime.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]runtime.Instance, 0, len(b.byID))
	for _, in := range b.byID {
		if in.spec.Labels[runtime.LabelDataDir] == b.cfg.Instance {
			out = append(out, in.view())
		}
	}
	slices.SortFunc(out, func(x, y runtime.Instance) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// view is the instance as Inspect reports it. A published port is
// published as itself on 127.0.0.1, where a Program serving it listens.
func (in *instance) view() runtime.Instance {
	v := runtime.Instance{
		ID: in.id, Name: in.spec.Name, Labels: maps.Clone(in.spec.Labels), Image: in.spec.Image, State: in.state,
		Running: in.run != nil, Paused: in.state == statePaused, Pending: in.state == statePending,
		ExitCode: in.exitCode, StartedAt: in.started, FinishedAt: in.finished,
		IP: "127.0.0.1", Env: maps.Clone(in.spec.Env),
	}
	for _, d := range in.spec.GPUs {
		v.GPUs = append(v.GPUs, d.UUID)
	}
	if in.spec.Publish && len(in.spec.Ports) > 0 {
		v.PublicPorts = map[string]int{}
		for _, p := range in.spec.Ports {
			num, proto, _ := strings.Cut(p, "/")
			if proto != "udp" {
				proto = "tcp"
			}
			var n int
			if _, err := fmt.Sscan(num, &n); err == nil {
				v.PublicPorts[num+"/"+proto] = n
			}
		}
	}
	return v
}

// RemovePodVolume implements runtime.Backend.
func (b *Backend) RemovePodVolume(_ context.Context, podID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.podVols, podID)
	return nil
}

// PodVolumes are the pods whose own volume exists (made by a Create that
// mounts it, removed by RemovePodVolume), sorted.
func (b *Backend) PodVolumes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.podVols))
}

// CreateVolume implements runtime.Volumes: the volume is kept by id and
// size; one already kept is an error, as a directory that exists.
func (b *Backend) CreateVolume(_ context.Context, id string, sizeGB int) (runtime.VolumeStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.vols[id]; ok {
		return runtime.VolumeStatus{}, fmt.Errorf("fake: network volume %s exists", id)
	}
	b.vols[id] = &volume{sizeGB: sizeGB}
	return runtime.VolumeStatus{}, nil
}

// GrowVolume implements runtime.Volumes: a smaller size is refused
// (runtime.ErrRefused), as a cluster refuses to shrink a claim.
func (b *Backend) GrowVolume(_ context.Context, id string, sizeGB int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.vols[id]
	switch {
	case v == nil:
		return nil // never made: nothing to grow, as a claim never mounted
	case sizeGB < v.sizeGB:
		return runtime.WithKind(runtime.ErrRefused, fmt.Errorf("fake: network volume %s has %d GB: it cannot shrink to %d", id, v.sizeGB, sizeGB))
	}
	v.sizeGB = sizeGB
	return nil
}

// SetAsideVolume implements runtime.Volumes.
func (b *Backend) SetAsideVolume(id string) error { return b.setAside(id, true) }

// RestoreVolume implements runtime.Volumes.
func (b *Backend) RestoreVolume(id string) error { return b.setAside(id, false) }

func (b *Backend) setAside(id string, aside bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v := b.vols[id]; v != nil {
		v.aside = aside
	}
	return nil
}

// RemoveVolume implements runtime.Volumes.
func (b *Backend) RemoveVolume(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.vols, id)
	return nil
}

// VolumeStatus implements runtime.Volumes: a fake volume has no path
// nor bytes.
func (b *Backend) VolumeStatus(string) runtime.VolumeStatus { return runtime.VolumeStatus{} }

// Volumes are the network volumes kept and not set aside, by size (GB).
func (b *Backend) Volumes() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for id, v := range b.vols {
		if !v.aside {
			out[id] = v.sizeGB
		}
	}
	return out
}

// RemoveRegistryAuth implements runtime.Backend: the login is forgotten.
func (b *Backend) RemoveRegistryAuth(_ context.Context, authID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.auths, authID)
	return nil
}

// RegistryAuths are the registry logins instances were made with and
// not removed since (Spec.AuthID), sorted.
func (b *Backend) RegistryAuths() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.auths))
}

// output is a run's Out: whole lines go to the instance's logs.
type output struct {
	b  *Backend
	in *instance
	r  *run
}

func (o *output) Write(p []byte) (int, error) {
	o.b.mu.Lock()
	defer o.b.mu.Unlock()
	for o.in.run == o.r && o.in.state == statePaused {
		o.b.cond.Wait()
	}
	if o.in.run != o.r {
		return len(p), nil // killed: the output goes nowhere
	}
	o.in.logs.write(p)
	return len(p), nil
}

// maxLine bounds a line held back for its newline (Docker's log reader
// emits a longer one anyway).
const maxLine = 64 << 10

// logBuf is an instance's output by line, the last max of them kept. It
// is guarded by Backend.mu.
type logBuf struct {
	max     int
	lines   [][]byte // each with its newline
	dropped int      // lines dropped from the front
	partial []byte
	changed chan struct{} // closed at the next line or end
}

func (l *logBuf) write(p []byte) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.add(l.partial[:i+1])
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > maxLine {
		l.add(append(l.partial, '\n'))
		l.partial = nil
	}
}

func (l *logBuf) add(line []byte) {
	l.lines = append(l.lines, bytes.Clone(line))
	if len(l.lines) > l.max {
		n := len(l.lines) - l.max
		l.lines = slices.Delete(l.lines, 0, n)
		l.dropped += n
	}
	l.notify()
}

// end flushes a partial line: the run ended.
func (l *logBuf) end() {
	if len(l.partial) > 0 {
		l.add(append(l.partial, '\n'))
		l.partial = nil
	}
	l.notify()
}

func (l *logBuf) notify() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

func (l *logBuf) wait() <-chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// Logs implements runtime.Backend.
func (b *Backend) Logs(ctx context.Context, id string, follow bool, tail int) (io.ReadCloser, error) {
	b.mu.Lock()
	if err := b.failLocked(OpLogs); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	in := b.byID[id]
	if in == nil {
		b.mu.Unlock()
		return nil, notFound(id)
	}
	lines := in.logs.lines
	if tail > 0 && len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	first := bytes.Join(lines, nil)
	next := in.logs.dropped + len(in.logs.lines)
	if follow {
		in.readers++
	}
	b.mu.Unlock()
	if !follow {
		return io.NopCloser(bytes.NewReader(first)), nil
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		defer func() {
			b.mu.Lock()
			in.readers--
			b.mu.Unlock()
		}()
		if _, err := pw.Write(first); err != nil {
			return
		}
		for {
			b.mu.Lock()
			// Lines dropped meanwhile are skipped.
			from := max(next-in.logs.dropped, 0)
			more := bytes.Join(in.logs.lines[min(from, len(in.logs.lines)):], nil)
			next = in.logs.dropped + len(in.logs.lines)
			over := in.run == nil && in.state != statePending
			ch := in.logs.wait()
			b.mu.Unlock()
			if len(more) > 0 {
				if _, err := pw.Write(more); err != nil {
					return
				}
			}
			if over {
				pw.Close()
				return
			}
			select {
			case <-ch:
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			}
		}
	}()
	return &follower{PipeReader: pr, cancel: cancel}, nil
}

type follower struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (f *follower) Close() error {
	f.cancel()
	return f.PipeReader.Close()
}

// subscription is one Events stream: events queue here (never blocking
// the backend) and a goroutine delivers them.
type subscription struct {
	queue    []runtime.Event
	overflow bool
	kick     chan struct{}
}

// emitLocked queues an event of in for every subscription.
func (b *Backend) emitLocked(in *instance, action string, code int, at time.Time) {
	ev := runtime.Event{Action: action, ID: in.id, Labels: maps.Clone(in.spec.Labels), ExitCode: code, Time: at}
	for s := range b.subs {
		if len(s.queue) >= b.cfg.MaxBacklog {
			s.overflow = true
		} else {
			s.queue = append(s.queue, ev)
		}
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// Events implements runtime.Backend. A subscription whose undelivered
// events exceed MaxBacklog ends with an error (the caller resubscribes
// and lists, as after a daemon restart).
func (b *Backend) Events(ctx context.Context) (<-chan runtime.Event, <-chan error) {
	s := &subscription{kick: make(chan struct{}, 1)}
	b.mu.Lock()
	b.subs[s] = true
	b.mu.Unlock()
	out, errc := make(chan runtime.Event), make(chan error, 1)
	go func() {
		defer close(errc)
		defer close(out)
		defer func() {
			b.mu.Lock()
			delete(b.subs, s)
			b.mu.Unlock()
		}()
		for {
			b.mu.Lock()
			evs, overflow := s.queue, s.overflow
			s.queue = nil
			b.mu.Unlock()
			for _, ev := range evs {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			if overflow {
				errc <- fmt.Errorf("fake: more than %d events undelivered: the stream ends (subscribe again and list)", b.cfg.MaxBacklog)
				return
			}
			select {
			case <-s.kick:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc
}
