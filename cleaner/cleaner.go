// Package cleaner is Berth's maintenance service, in the manner of river's:
// one service with Start and Stop, one clock and one logger, that runs the
// periodic expiries every other package exposes as a plain function
// (worker identities nobody uses, the queue and metric state of deleted
// endpoints, idle rate-limit buckets, the liveness stamp the usage repair
// reads). Each package decides what expires; the cleaner decides when.
//
// Job ttls and retention are not here: the queue keeps them exact with one
// timer on its own deadline heap, since a client must see a job go at its
// ttl, not up to a sweep later.
package cleaner

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Task is one periodic expiry. Run returns how many things it removed (or
// stamped); an error is logged and the task runs again at its next time.
type Task struct {
	Name  string
	Every time.Duration
	Run   func(ctx context.Context) (int, error)
}

// Config configures a Service. Zero values take the defaults in brackets.
type Config struct {
	Clock  clockwork.Clock // [real clock]
	Logger *slog.Logger    // [slog.Default]
	Tasks  []Task
	// OnRun, if set, is told after every run (for metrics, and for tests
	// to wait on: it is the service's signal). Must not block.
	OnRun func(task string, removed int, took time.Duration, err error)
}

// Service runs the tasks on one goroutine and one ticker (at the shortest
// Every): each runs every Every, the first time one Every after Start.
type Service struct {
	cfg    Config
	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New makes a Service; Start runs it.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg}
}

// Start starts the loop; it returns at once. Starting a started service
// does nothing.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil || len(s.cfg.Tasks) == 0 {
		return nil
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(1)
	go s.loop(ctx)
	return nil
}

// Stop ends the loops and waits for a run in progress.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

func (s *Service) loop(ctx context.Context) {
	defer s.wg.Done()
	every := s.cfg.Tasks[0].Every
	next := make([]time.Time, len(s.cfg.Tasks))
	now := s.cfg.Clock.Now()
	for i, t := range s.cfg.Tasks {
		every = min(every, t.Every)
		next[i] = now.Add(t.Every)
	}
	tick := s.cfg.Clock.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
		}
		now := s.cfg.Clock.Now()
		for i, t := range s.cfg.Tasks {
			if now.Before(next[i]) {
				continue
			}
			s.run(ctx, t)
			next[i] = now.Add(t.Every)
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// run runs t once; a panic in a task is logged, not fatal.
func (s *Service) run(ctx context.Context, t Task) {
	start := s.cfg.Clock.Now()
	var n int
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.cfg.Logger.Error("cleaner task panicked", "task", t.Name, "panic", r)
			}
		}()
		n, err = t.Run(ctx)
	}()
	took := s.cfg.Clock.Since(start)
	switch {
	case err != nil && ctx.Err() == nil:
		s.cfg.Logger.Error("cleaner task failed", "task", t.Name, "err", err)
	case n > 0:
		s.cfg.Logger.Debug("cleaner task", "task", t.Name, "removed", n, "took", took)
	}
	if s.cfg.OnRun != nil {
		s.cfg.OnRun(t.Name, n, took, err)
	}
}
