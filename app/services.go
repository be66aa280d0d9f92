package app

import (
	"context"
	"errors"
	"sync"
)

// service is one part of a running Berth as Start and Stop see it (as
// riverqueue/river's start/stop services): started in the list's order,
// stopped in reverse. Either half may be nil: nothing to do then.
type service struct {
	name  string
	start func(ctx context.Context) error
	stop  func(ctx context.Context) error
}

// services runs a list of services once: Start starts them in order and, on
// the first error, stops those already started, last first; Stop stops
// what started, last first. A second Start fails; a second Stop, or a Stop
// after a failed Start, does nothing.
type services struct {
	mu    sync.Mutex
	list  []service
	up    int // list[:up] started, to be stopped
	phase int // 0 new, 1 started, 2 stopped
}

func (s *services) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != 0 {
		return errors.New("app: already started")
	}
	s.phase = 1
	for _, sv := range s.list {
		if sv.start != nil {
			if err := sv.start(ctx); err != nil {
				// ctx bounds the start only (and may be what ended it):
				// what started is stopped whatever it says.
				if serr := s.stopLocked(context.WithoutCancel(ctx)); serr != nil {
					return errors.Join(err, serr)
				}
				return err
			}
		}
		s.up++
	}
	return nil
}

func (s *services) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase == 2 {
		return nil
	}
	return s.stopLocked(ctx)
}

func (s *services) stopLocked(ctx context.Context) error {
	s.phase = 2
	var errs []error
	for ; s.up > 0; s.up-- {
		if sv := s.list[s.up-1]; sv.stop != nil {
			errs = append(errs, sv.stop(ctx))
		}
	}
	return errors.Join(errs...)
}

// names is the list's order, for tests.
func (s *services) names() []string {
	out := make([]string, len(s.list))
	for i, sv := range s.list {
		out[i] = sv.name
	}
	return out
}
