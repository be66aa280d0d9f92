package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/gpu"
	"berth/queue"
	"berth/store"
)

// Queue is what the Supervisor needs from the job queue; *queue.Service
// implements it.
type Queue interface {
	Stats(endpointID string) queue.QueueStats
	RegisterWorker(endpointID string, external bool) (queue.Registration, error)
	WorkerGone(workerID, reason string)
	ForgetWorker(workerID string)
	Workers(endpointID string) []queue.WorkerLoad
	PendingStops(workerID string) []string
	SetFrozen(workerID string, frozen bool)
	// DrainWorker: the worker is being stopped; it is never handed a job
	// again. It returns how many jobs the worker still holds. Called with
	// the Supervisor's lock held (the queue never calls into the runtime
	// under its own lock: its callbacks run after it is released).
	DrainWorker(workerID string) int
}

// Config holds a Supervisor's dependencies and tuning. Zero durations take
// the defaults in brackets.
type Config struct {
	// Backend runs the workers and pods (runtime/docker; Kubernetes).
	// Required.
	Backend Backend
	Queue   Queue // required
	// Endpoints lists every endpoint; Template reads one template. Both are
	// called from the autoscaler loop (about once per TickInterval).
	Endpoints func() ([]store.Endpoint, error) // required
	Template  func(id string) (store.Template, error)
	// Models says whether an endpoint's model references are complete in
	// the model cache: "" when they are (or it names none), else the one
	// sentence of their progress ("downloading ORG/NAME: 312 MB of 988
	// MB"). No worker of the endpoint starts until it is "". nil: Berth
	// has no model cache, and an endpoint naming models cannot start.
	Models func(ep store.Endpoint) (wait string)

	// GPUs hands out the GPUs (made from Backend.Devices); nil (or an
	// allocator with no devices) runs every worker and pod without a GPU.
	GPUs *gpu.Allocator

	// WorkerBaseURL is Berth's base URL as seen from inside a worker,
	// e.g. http://host.docker.internal:8080. Required.
	WorkerBaseURL string
	// WorkerEnv builds a worker's RUNPOD_* variables (the composition,
	// app, wires it to worker.PlatformEnv). nil uses DefaultWorkerEnv.
	WorkerEnv func(base, endpointID, workerID, key string) map[string]string

	// VCPUsPerGPU and MemoryGiBPerGPU are what a GPU worker asks for per
	// GPU beside it [0: the rule of resources.go — 2 vCPUs; half the
	// GPU's memory, at least 8 GiB].
	VCPUsPerGPU     int
	MemoryGiBPerGPU int

	// Credentials returns the registry login of a template's or pod's
	// containerRegistryAuthId. Optional: without it pulls are anonymous.
	Credentials func(authID string) (*RegistryAuth, error)

	// PublicIP is reported as a pod's publicIp [DetectHostIP()].
	PublicIP string
	// PodExists tells reconcile whether a labelled pod container still has
	// a record; containers of unknown pods are removed. Optional: without
	// it pod containers are never removed by reconcile.
	PodExists func(podID string) (bool, error)
	// OnPodExit is told when a pod's container stops for any reason
	// (stop, crash, daemon restart, found stopped at start-up), so the pod
	// record can follow; PodExit.Requested tells an operation's stop from
	// the container's own end. Optional; called with the pod's lock held,
	// so it must not block long nor call back into the Supervisor for
	// that pod (hand the work to a goroutine).
	OnPodExit func(PodExit)
	// OnPodRun is told when a pod's instance that was only accepted at
	// its start (a Pod waiting for its node and image) begins to run, with
	// what it runs as — its node's address, its published ports — which
	// the backend learns only then, so the pod record can follow.
	// Optional; it must not block (hand the work to a goroutine).
	OnPodRun func(PodState)

	// OnRun records usage: called when a worker or pod container starts or
	// is adopted after a restart (end is zero; adoption passes the
	// container's original start), and when it stops. kind is KindWorker or
	// KindPod; endpointID is "" for pods; gpuTypeID is "" without a GPU.
	OnRun func(kind, id, endpointID, gpuTypeID string, gpuCount int, start, end time.Time)

	// OnScale is told each scaling decision, for metrics: "start" (a
	// worker container is launched), "drain" (a worker is asked to finish
	// and stop: scale-down, idle timeout, new version) or "kill" (a worker
	// stopped for a fault). Optional; may be called with the Supervisor's
	// lock held: must not block.
	OnScale func(endpointID, action string)

	Clock  clockwork.Clock // [real clock]
	Logger *slog.Logger    // [slog.Default]

	TickInterval   time.Duration // autoscaler period without notifications [1s]
	ResyncInterval time.Duration // full comparison with the daemon [30s]
	// DrainGrace is the SIGTERM-to-SIGKILL grace when a worker is drained.
	// Zero uses the endpoint's executionTimeout (the longest a job may
	// still run), at most MaxDrainGrace.
	DrainGrace    time.Duration
	MaxDrainGrace time.Duration // [10m]
	// IdleStopGrace caps the grace of a worker drained while it had no job
	// (idle timeout, scale-down) [30s].
	IdleStopGrace time.Duration
	// StopIgnoredAfter: a job the worker was told to stop (cancel, execution
	// timeout) that is still pending on its job-stop channel this long
	// later gets the container stopped and replaced [10s].
	StopIgnoredAfter time.Duration
	// InitTimeout: a container that has not contacted Berth this long
	// after starting is stopped and counted as a failed start [10m].
	InitTimeout time.Duration
	// BackoffBase and BackoffMax bound the exponential delay before the
	// next start after a failed start or a crash [1s, 5m].
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxStartFailures failed starts in a row mark an endpoint unhealthy
	// (it then tries one worker at a time, after the back-off) [3].
	MaxStartFailures int
	// CrashReset: the crash count of an endpoint restarts after this long
	// without a crash [2m].
	CrashReset   time.Duration
	PodStopGrace time.Duration // [10s]

	// FlashBoot (see flashboot.go): a worker frozen this long is evicted
	// [1h; negative: never].
	FlashMaxFrozen time.Duration
	// FlashMinMemAvailable: while the host's available memory is below
	// this many bytes, frozen workers are evicted, least recently frozen
	// first [512 MiB; negative: never].
	FlashMinMemAvailable int64
	// MemAvailable reports the host's available memory [MemAvailable,
	// from /proc/meminfo].
	MemAvailable func() (int64, error)
}

func (c *Config) defaults() error {
	switch {
	case c.Backend == nil:
		return errors.New("runtime: Config.Backend is required")
	case c.Queue == nil:
		return errors.New("runtime: Config.Queue is required")
	case c.Endpoints == nil || c.Template == nil:
		return errors.New("runtime: Config.Endpoints and Config.Template are required")
	case c.WorkerBaseURL == "":
		return errors.New("runtime: Config.WorkerBaseURL is required")
	}
	c.WorkerBaseURL = strings.TrimRight(c.WorkerBaseURL, "/")
	if c.WorkerEnv == nil {
		c.WorkerEnv = DefaultWorkerEnv
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PublicIP == "" {
		c.PublicIP = DetectHostIP()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.TickInterval, time.Second)
	def(&c.ResyncInterval, 30*time.Second)
	def(&c.MaxDrainGrace, 10*time.Minute)
	def(&c.IdleStopGrace, 30*time.Second)
	def(&c.StopIgnoredAfter, 10*time.Second)
	def(&c.InitTimeout, 10*time.Minute)
	def(&c.BackoffBase, time.Second)
	def(&c.BackoffMax, 5*time.Minute)
	def(&c.CrashReset, 2*time.Minute)
	def(&c.PodStopGrace, 10*time.Second)
	if c.MaxStartFailures <= 0 {
		c.MaxStartFailures = 3
	}
	if c.FlashMaxFrozen == 0 {
		c.FlashMaxFrozen = time.Hour
	}
	if c.FlashMinMemAvailable == 0 {
		c.FlashMinMemAvailable = 512 << 20
	}
	if c.MemAvailable == nil {
		c.MemAvailable = MemAvailable
	}
	return nil
}

// Supervisor runs endpoints' workers and pods on a Backend: it scales
// workers by demand, pins GPUs, drains and replaces workers, and rebuilds
// its state from the instances' labels after a restart of Berth or of the
// backend. Start it once; Stop ends its goroutines but leaves the
// instances running so the next Start adopts them.
type Supervisor struct {
	cfg   Config
	b     Backend
	caps  Caps
	q     Queue
	log   *slog.Logger
	clock clockwork.Clock

	mu            sync.Mutex
	eps           map[string]*endpointState
	workers       map[string]*workerState // by worker id
	byInstance    map[string]*workerState
	kept          map[string]string // failed container id -> endpoint id
	pods          map[string]*podState
	podByInstance map[string]*podState
	podPulls      map[string]string // pod id -> image pull progress while it is created
	podOps        sync.Map          // pod id -> *sync.Mutex serialising operations
	memEvict      *workerState      // last FlashBoot eviction for lack of memory

	pendMu  sync.Mutex
	pending map[string]bool // endpoints to look at ("" = all)
	wake    chan struct{}
	resyncC chan struct{}

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
	stopped bool
}

// New checks cfg and makes a Supervisor; call Start.
func New(cfg Config) (*Supervisor, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Supervisor{
		cfg: cfg, b: cfg.Backend, caps: cfg.Backend.Caps(), q: cfg.Queue, log: cfg.Logger, clock: cfg.Clock,
		eps: map[string]*endpointState{}, workers: map[string]*workerState{},
		byInstance: map[string]*workerState{}, kept: map[string]string{},
		pods: map[string]*podState{}, podByInstance: map[string]*podState{}, podPulls: map[string]string{},
		pending: map[string]bool{}, wake: make(chan struct{}, 1), resyncC: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel,
	}, nil
}

// Start subscribes to the daemon's events, reconciles with the containers
// this instance labelled (adopting live workers and pods, restoring their
// GPUs, removing orphans) and starts the autoscaler. ctx bounds only the
// initial reconcile.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("runtime: supervisor already started")
	}
	s.started = true
	s.mu.Unlock()

	// Subscribe before listing, so no exit falls between the two.
	evCtx, evCancel := context.WithCancel(s.ctx)
	evs, errc := s.b.Events(evCtx)
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	err := s.resync(rctx)
	stop()
	cancel()
	if err != nil {
		evCancel()
		s.cancel()
		return fmt.Errorf("runtime: initial reconcile: %w", err)
	}
	s.wg.Add(2)
	go s.eventLoop(evs, errc, evCancel)
	go s.loop()
	s.Notify("")
	return nil
}

// Stop ends the autoscaler and waits for the Supervisor's goroutines.
// Containers keep running (a drain in progress has had its SIGTERM); the
// next Start adopts them. Call it before stopping the queue.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Notify asks the autoscaler to look at an endpoint now ("" for all). It
// never blocks, so queue.Config.OnQueueChange and
// httpapi.Config.EndpointChanged can call it directly.
func (s *Supervisor) Notify(endpointID string) {
	s.pendMu.Lock()
	s.pending[endpointID] = true
	s.pendMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Recycle drains a worker after its current jobs and lets the autoscaler
// start a replacement if the endpoint still needs one (a job's result
// carried stopPod / refresh_worker). Wire queue.Config.OnStopPod to it.
func (s *Supervisor) Recycle(endpointID, workerID string) {
	s.mu.Lock()
	drained := false
	if ws := s.workers[workerID]; ws != nil && ws.endpointID == endpointID {
		var ep store.Endpoint
		if es := s.eps[endpointID]; es != nil {
			ep = es.ep
		}
		// The stop itself is the next pass's (stopAsync reads the jobs it
		// still has then).
		drained = s.drainLocked(ws, s.drainFor(ep, drainRecycle, "stopPod: recycling the worker"))
	}
	s.mu.Unlock()
	if drained {
		s.Notify(endpointID)
	}
}

func (s *Supervisor) loop() {
	defer s.wg.Done()
	tick := s.clock.NewTicker(s.cfg.TickInterval)
	defer tick.Stop()
	resync := s.clock.NewTicker(s.cfg.ResyncInterval)
	defer resync.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.resyncC:
			s.resyncAndScale()
		case <-resync.Chan():
			s.resyncAndScale()
		case <-s.wake:
			s.pendMu.Lock()
			ids := s.pending
			s.pending = map[string]bool{}
			s.pendMu.Unlock()
			if ids[""] {
				s.scale(nil)
				s.flashHousekeeping()
			} else {
				s.scale(ids)
			}
		case <-tick.Chan():
			s.scale(nil)
			s.flashHousekeeping()
		}
	}
}

func (s *Supervisor) resyncAndScale() {
	if err := s.resync(s.ctx); err != nil && s.ctx.Err() == nil {
		s.log.Warn("reconcile with the runtime failed", "runtime", s.b.Name(), "err", err)
	}
	s.scale(nil)
}

// scale runs one autoscaler pass over the given endpoints (nil: all, and
// endpoints that disappeared are drained).
func (s *Supervisor) scale(only map[string]bool) {
	eps, err := s.cfg.Endpoints()
	if err != nil {
		s.log.Error("autoscaler: list endpoints", "err", err)
		return
	}
	present := make(map[string]bool, len(eps))
	for _, ep := range eps {
		present[ep.ID] = true
		if only != nil && !only[ep.ID] {
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		s.scaleEndpoint(ep)
	}
	s.dropDeleted(present, only)
}

// eventLoop follows the daemon's events; when the stream breaks (daemon
// restart) it re-subscribes with back-off and asks for a reconcile.
func (s *Supervisor) eventLoop(evs <-chan Event, errc <-chan error, cancel context.CancelFunc) {
	defer s.wg.Done()
	delay := s.cfg.BackoffBase
	for {
		healthy := false
	recv:
		for {
			select {
			case ev, ok := <-evs:
				if !ok {
					break recv
				}
				healthy = true
				s.handleEvent(ev)
			case err, ok := <-errc:
				if ok && err != nil {
					s.log.Warn("event stream ended; re-subscribing", "runtime", s.b.Name(), "err", err)
				}
				break recv
			case <-s.ctx.Done():
				cancel()
				return
			}
		}
		cancel()
		if healthy {
			delay = s.cfg.BackoffBase
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.clock.After(delay):
		}
		delay = min(delay*2, 30*time.Second)
		var ctx context.Context
		ctx, cancel = context.WithCancel(s.ctx)
		if err := s.b.Ping(ctx); err != nil {
			s.log.Warn("the runtime is not answering", "runtime", s.b.Name(), "err", err, "retry", delay)
			errc = closedErr(err)
			evs = nil
			continue
		}
		evs, errc = s.b.Events(ctx)
		s.log.Info("event stream re-subscribed; reconciling", "runtime", s.b.Name())
		select {
		case s.resyncC <- struct{}{}:
		default:
		}
	}
}

func closedErr(err error) <-chan error {
	c := make(chan error, 1)
	c <- err
	close(c)
	return c
}

func (s *Supervisor) handleEvent(ev Event) {
	s.mu.Lock()
	ws := s.byInstance[ev.ID]
	pod := s.podByInstance[ev.ID]
	if ev.Action == EventOOM && ws != nil {
		ws.oomKilled = true
	}
	if ev.Action == EventDestroy {
		delete(s.kept, ev.ID)
		for _, es := range s.eps {
			if es.kept == ev.ID {
				es.kept = ""
			}
		}
	}
	s.mu.Unlock()
	switch ev.Action {
	case EventUpdate:
		// Not an exit: a status the autoscaler reads (a Pod that cannot
		// be scheduled or pulled).
		if ws != nil {
			s.mu.Lock()
			ws.waiting, ws.waitReason = ev.Waiting, ev.Reason
			s.mu.Unlock()
			s.Notify(ws.endpointID)
		}
		return
	case EventStart:
		// Where Start only asks (a Pod), the instance runs from now.
		t := ev.Time
		if t.IsZero() {
			t = s.clock.Now()
		}
		if ws != nil {
			s.mu.Lock()
			ws.waiting, ws.waitReason = "", ""
			s.mu.Unlock()
			s.workerRuns(ws, t)
			s.Notify(ws.endpointID)
		}
		if pod != nil && s.podRuns(pod, t) && s.cfg.OnPodRun != nil {
			// Started asynchronously: what it runs as is known now.
			if info, err := s.b.Inspect(s.ctx, ev.ID); err == nil && info.Running {
				s.cfg.OnPodRun(s.podStateFrom(pod, info))
			}
		}
		return
	case EventDie, EventDestroy:
	default:
		return
	}
	if ws != nil {
		s.goExit(ws)
	}
	if pod != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.podExited(pod, ev.ID)
		}()
	}
}

// goExit handles a worker container's exit on a goroutine of its own.
func (s *Supervisor) goExit(ws *workerState) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.containerExited(ws)
	}()
}

// backoff is BackoffBase·2^(n−1), at most BackoffMax.
func (s *Supervisor) backoff(n int) time.Duration {
	d := s.cfg.BackoffBase
	for i := 1; i < n && d < s.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.BackoffMax)
}
