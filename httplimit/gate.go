package httplimit

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// Gate bounds the work in flight across concurrent requests: the sum of
// the weights they hold (a weighted semaphore: fields a GraphQL query
// resolves, jobs a list carries). A request waits for room in arrival
// order, at most the wait its caller gives; one that cannot get it is
// refused by its caller (503 with Retry-After). Requests already running
// take more with TryAcquire, and small ones with Force, which never waits
// (their weight is bounded by the caller).
type Gate struct {
	mu      sync.Mutex
	cap     int64
	used    int64
	waiters list.List // of *gateWaiter
}

type gateWaiter struct {
	n     int64
	ready chan struct{}
}

// NewGate makes a Gate holding at most capacity.
func NewGate(capacity int64) *Gate { return &Gate{cap: capacity} }

// Capacity is the gate's bound.
func (g *Gate) Capacity() int64 { return g.cap }

// InUse is the weight held now.
func (g *Gate) InUse() int64 { g.mu.Lock(); defer g.mu.Unlock(); return g.used }

// Acquire takes n, waiting at most wait (or until ctx ends) for room:
// false when it could not. n over the capacity is cut to it (the request
// then runs alone).
func (g *Gate) Acquire(ctx context.Context, n int64, wait time.Duration) bool {
	n = min(n, g.cap)
	g.mu.Lock()
	if g.waiters.Len() == 0 && g.used+n <= g.cap {
		g.used += n
		g.mu.Unlock()
		return true
	}
	if wait <= 0 {
		g.mu.Unlock()
		return false
	}
	w := &gateWaiter{n: n, ready: make(chan struct{})}
	e := g.waiters.PushBack(w)
	g.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.ready:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: give it back
		g.used -= n
		g.wakeLocked()
	default:
		g.waiters.Remove(e)
		g.wakeLocked() // the next one may fit now
	}
	return false
}

// AcquireN is Acquire's weight as cut to the capacity (what to Release).
func (g *Gate) AcquireN(n int64) int64 { return min(n, g.cap) }

// TryAcquire takes n if it fits now, without waiting.
func (g *Gate) TryAcquire(n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.used+n > g.cap {
		return false
	}
	g.used += n
	return true
}

// Force takes n whether or not it fits.
func (g *Gate) Force(n int64) {
	g.mu.Lock()
	g.used += n
	g.mu.Unlock()
}

// Release gives n back.
func (g *Gate) Release(n int64) {
	if n <= 0 {
		return
	}
	g.mu.Lock()
	g.used -= n
	g.wakeLocked()
	g.mu.Unlock()
}

// wakeLocked grants the waiters at the front that fit, in order.
func (g *Gate) wakeLocked() {
	for e := g.waiters.Front(); e != nil; e = g.waiters.Front() {
		w := e.Value.(*gateWaiter)
		if g.used+w.n > g.cap {
			return
		}
		g.used += w.n
		g.waiters.Remove(e)
		close(w.ready)
	}
}
