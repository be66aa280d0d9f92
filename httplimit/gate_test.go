package httplimit

import (
	"context"
	"testing"
	"time"
)

// A Gate admits while the sum fits, makes the rest wait in arrival order
// (a later small request does not pass an earlier big one), refuses one
// whose wait ends, and lets Force and TryAcquire in as documented.
func TestGate(t *testing.T) {
	g := NewGate(10)
	ctx := context.Background()
	if !g.Acquire(ctx, 6, 0) || g.Acquire(ctx, 5, 0) {
		t.Fatal("6 then 5 of 10: the first fits, the second does not")
	}
	if g.Acquire(ctx, 5, time.Millisecond) {
		t.Fatal("a wait that ends without room must fail")
	}
	big, small := make(chan bool), make(chan bool)
	go func() { big <- g.Acquire(ctx, 8, time.Minute) }()
	for g.waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	go func() { small <- g.Acquire(ctx, 4, time.Minute) }() // fits now, but waits behind big
	for g.waiting() != 2 {
		time.Sleep(time.Millisecond)
	}
	g.Release(6)
	if !<-big {
		t.Fatal("big not admitted once room was made")
	}
	select {
	case <-small:
		t.Fatal("small admitted past the capacity")
	default:
	}
	if g.TryAcquire(3) {
		t.Fatal("TryAcquire over the capacity")
	}
	g.Force(3) // 11 of 10: Force never waits
	if g.InUse() != 11 {
		t.Fatalf("in use %d", g.InUse())
	}
	g.Release(3)
	g.Release(8)
	if !<-small || g.InUse() != 4 {
		t.Fatalf("small after the release: in use %d", g.InUse())
	}
	g.Release(4)
	if !g.Acquire(ctx, 100, 0) || g.InUse() != g.AcquireN(100) || g.AcquireN(100) != 10 {
		t.Fatalf("a request over the capacity is cut to it and runs alone: in use %d", g.InUse())
	}
}

func (g *Gate) waiting() int { g.mu.Lock(); defer g.mu.Unlock(); return g.waiters.Len() }
