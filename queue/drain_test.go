package queue_test

import (
	"context"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

// poll is one long poll under way (Take or StopPoll), answered on got.
type poll struct {
	got chan []string
}

func (h *harness) takeAsync(ctx context.Context, worker string) poll {
	p := poll{got: make(chan []string, 1)}
	go func() {
		js, _ := h.q.Take(ctx, ep, worker, 1)
		var ids []string
		for _, j := range js {
			ids = append(ids, j.ID)
		}
		p.got <- ids
	}()
	return p
}

func (h *harness) stopPollAsync(ctx context.Context, worker string) poll {
	p := poll{got: make(chan []string, 1)}
	go func() { p.got <- h.q.StopPoll(ctx, ep, worker) }()
	return p
}

// answered waits (in real time: the fake clock does not move) for p's
// answer.
func (p poll) answered(t *testing.T, what string) []string {
	t.Helper()
	select {
	case ids := <-p.got:
		return ids
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not answered", what)
		return nil
	}
}

// pending reports whether p is still held (after the queue had time to
// answer it: it answers without waiting on anything else).
func (p poll) pending(t *testing.T) bool {
	t.Helper()
	select {
	case ids := <-p.got:
		t.Logf("answered with %v", ids)
		return false
	case <-time.After(200 * time.Millisecond):
		return true
	}
}

// TestDrainingWorkerIsNeverHandedAJob: the drain state, set by DrainWorker
// where the runtime decides a drain, closes the worker's job-take at once
// and for good, and ends its job-stop poll once it holds no job. The
// timers the queue waits on are the fake clock's: a poll answered without
// moving it was answered at once.
func TestDrainingWorkerIsNeverHandedAJob(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, h *harness, ctx context.Context)
	}{
		{"a held job-take is answered at once, empty", func(t *testing.T, h *harness, ctx context.Context) {
			h.q.Ping(ep, "w1", nil)
			p := h.takeAsync(ctx, "w1")
			h.clock.BlockUntilContext(ctx, 2) // its loss timer and the take's hold
			if n := h.q.DrainWorker("w1"); n != 0 {
				t.Fatalf("DrainWorker = %d jobs, want 0", n)
			}
			if ids := p.answered(t, "held job-take"); len(ids) != 0 {
				t.Fatalf("took %v", ids)
			}
		}},
		{"a job queued during the drain goes to the other worker, not the longer-waiting drained one", func(t *testing.T, h *harness, ctx context.Context) {
			h.q.Ping(ep, "old", nil)
			h.q.Ping(ep, "new", nil)
			old := h.takeAsync(ctx, "old")
			h.clock.BlockUntilContext(ctx, 3)
			fresh := h.takeAsync(ctx, "new")
			h.clock.BlockUntilContext(ctx, 4)
			h.q.DrainWorker("old")
			if ids := old.answered(t, "drained worker's take"); len(ids) != 0 {
				t.Fatalf("drained worker took %v", ids)
			}
			id := h.submit(`{}`)
			if ids := fresh.answered(t, "other worker's take"); len(ids) != 1 || ids[0] != id {
				t.Fatalf("other worker took %v, want [%s]", ids, id)
			}
		}},
		{"a new job-take of a draining worker gets nothing, even with a job queued, after DrainHold", func(t *testing.T, h *harness, ctx context.Context) {
			h.q.Ping(ep, "w1", nil)
			h.q.DrainWorker("w1")
			id := h.submit(`{}`)
			p := h.takeAsync(ctx, "w1")
			h.clock.BlockUntilContext(ctx, 3) // loss timer, job ttl, the drain hold
			if !p.pending(t) {
				t.Fatal("a drained worker's new job-take was answered before DrainHold (a busy loop for a worker that keeps polling)")
			}
			h.clock.Advance(time.Second)
			if ids := p.answered(t, "new take of a draining worker"); len(ids) != 0 {
				t.Fatalf("took %v", ids)
			}
			h.mustStatus(id, store.InQueue)
			if j := h.take("w2"); j.ID != id {
				t.Fatalf("w2 took %s, want %s", j.ID, id)
			}
		}},
		{"an idle worker's held job-stop poll is answered at once, and so are the next ones", func(t *testing.T, h *harness, ctx context.Context) {
			h.q.Ping(ep, "w1", nil)
			p := h.stopPollAsync(ctx, "w1")
			h.clock.BlockUntilContext(ctx, 2)
			h.q.DrainWorker("w1")
			if ids := p.answered(t, "held job-stop"); len(ids) != 0 {
				t.Fatalf("stop %v", ids)
			}
			if ids := h.stopPollAsync(ctx, "w1").answered(t, "next job-stop"); len(ids) != 0 {
				t.Fatalf("stop %v", ids)
			}
		}},
		{"a worker drained with a job keeps it, finishes it, and its job-stop poll ends with the job", func(t *testing.T, h *harness, ctx context.Context) {
			id := h.submit(`{}`)
			h.take("w1")
			if n := h.q.DrainWorker("w1"); n != 1 {
				t.Fatalf("DrainWorker = %d jobs, want 1 (the job it runs)", n)
			}
			p := h.stopPollAsync(ctx, "w1")
			if !p.pending(t) {
				t.Fatal("the job-stop poll of a draining worker with a job was not held (a cancel could not reach it)")
			}
			if ok, err := h.q.Done(ep, "w1", id, done(`{"output":1}`)); !ok || err != nil {
				t.Fatalf("done: %v %v", ok, err)
			}
			h.mustStatus(id, store.Completed)
			if ids := p.answered(t, "job-stop once the job ended"); len(ids) != 0 {
				t.Fatalf("stop %v", ids)
			}
		}},
		{"a cancel still reaches a draining worker's job-stop poll", func(t *testing.T, h *harness, ctx context.Context) {
			id := h.submit(`{}`)
			h.take("w1")
			h.q.DrainWorker("w1")
			p := h.stopPollAsync(ctx, "w1")
			if _, err := h.q.Cancel(ep, id); err != nil {
				t.Fatal(err)
			}
			if ids := p.answered(t, "job-stop after a cancel"); len(ids) != 1 || ids[0] != id {
				t.Fatalf("stop %v, want [%s]", ids, id)
			}
		}},
		{"an unknown worker, and a second drain, change nothing", func(t *testing.T, h *harness, ctx context.Context) {
			if n := h.q.DrainWorker("nobody"); n != 0 {
				t.Fatalf("DrainWorker(unknown) = %d", n)
			}
			h.submit(`{}`)
			h.take("w1")
			if a, b := h.q.DrainWorker("w1"), h.q.DrainWorker("w1"); a != 1 || b != 1 {
				t.Fatalf("DrainWorker twice = %d, %d; want 1, 1", a, b)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, queue.Config{WorkerTimeout: time.Hour, TakeHold: 30 * time.Second, DrainHold: time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tc.run(t, h, ctx)
		})
	}
}

// TestGiveBackWithoutAttempt: a job a draining worker cannot have started
// goes back to the queue at once, and only hand-overs a worker could have
// acted on count as attempts. The count is read from the job's record in
// bbolt after a restart, and shown by MaxAttempts 2: a counted give-back
// would make the next worker loss fail the job.
func TestGiveBackWithoutAttempt(t *testing.T) {
	cases := []struct {
		name string
		// handOver gives the job to w1 and does what happens to w1 until
		// its drain.
		handOver func(h *harness, id string)
		kept     bool // w1 still holds the job after DrainWorker
		attempts int  // the record's attempts once w1 is gone
	}{
		{"handed over while paused, drained still paused: given back", func(h *harness, id string) {
			h.q.SetFrozen("w1", true)
			h.take("w1")
		}, false, 0},
		{"handed over while paused, resumed before the drain: kept", func(h *harness, id string) {
			h.q.SetFrozen("w1", true)
			h.take("w1")
			h.q.SetFrozen("w1", false)
		}, true, 1},
		{"handed over to a running worker: kept", func(h *harness, id string) {
			h.take("w1")
		}, true, 1},
		{"paused after the hand-over: kept (it may have started)", func(h *harness, id string) {
			h.take("w1")
			h.q.SetFrozen("w1", true)
		}, true, 1},
		{"job-take reply never delivered (request closed): requeued, not counted", func(h *harness, id string) {
			h.take("w1")
			h.q.Untake(ep, "w1", []string{id})
		}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, queue.Config{WorkerTimeout: time.Hour, MaxAttempts: 2})
			h.q.Ping(ep, "w1", nil)
			id := h.submit(`{}`)
			tc.handOver(h, id)
			held := h.q.DrainWorker("w1")
			if got := held == 1; got != tc.kept {
				t.Fatalf("DrainWorker = %d jobs, want kept=%v", held, tc.kept)
			}
			if !tc.kept {
				// Back at once: no container exit, no timer.
				h.mustStatus(id, store.InQueue)
			} else {
				h.mustStatus(id, store.InProgress)
				h.q.WorkerGone("w1", "its container exited")
				h.mustStatus(id, store.InQueue)
			}
			h.restart()
			rec, _, err := h.db.LoadJob(id)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Attempts != tc.attempts {
				t.Fatalf("attempts = %d, want %d", rec.Attempts, tc.attempts)
			}
			// The next worker's loss: with MaxAttempts 2 the job fails
			// only if the first hand-over counted.
			if j := h.take("w2"); j.ID != id {
				t.Fatalf("w2 took %s", j.ID)
			}
			h.q.WorkerGone("w2", "lost")
			want := store.InQueue
			if tc.attempts == 1 {
				want = store.Failed
			}
			h.mustStatus(id, want)
		})
	}
}
