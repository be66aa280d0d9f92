package queue_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

// gatedStore is the real store with LoadJob held at a gate: a read of a
// job kept only as its entry stays in flight until the test opens it, and
// recorded ops show what the queue hands the writer.
type gatedStore struct {
	*store.DB
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	entered chan string
	ops     []store.Op
}

func (g *gatedStore) LoadJob(id string) (store.Job, json.RawMessage, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.entered <- id
		<-gate
	}
	return g.DB.LoadJob(id)
}

func (g *gatedStore) hold() {
	g.mu.Lock()
	g.gate, g.entered = make(chan struct{}), make(chan string, 16)
	g.mu.Unlock()
}

func (g *gatedStore) open() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

func (g *gatedStore) record(ops []store.Op) {
	g.mu.Lock()
	g.ops = append(g.ops, ops...)
	g.mu.Unlock()
}

func (g *gatedStore) EnqueueState(ops ...store.Op) <-chan error {
	g.record(ops)
	return g.DB.EnqueueState(ops...)
}

func (g *gatedStore) Enqueue(ops ...store.Op) <-chan error {
	g.record(ops)
	return g.DB.Enqueue(ops...)
}

func (g *gatedStore) WriteAsync(ops ...store.Op) {
	g.record(ops)
	g.DB.WriteAsync(ops...)
}

func gatedHarness(t *testing.T, cfg queue.Config) (*harness, *gatedStore) {
	h := newHarness(t, cfg)
	g := &gatedStore{DB: h.db}
	h.q.Stop()
	h.q = queue.New(g, h.cfg)
	if err := h.q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the harness closes: nothing stays held
		g.mu.Lock()
		if g.gate != nil {
			close(g.gate)
			g.gate = nil
		}
		g.mu.Unlock()
	})
	return h, g
}

// lockWait bounds a call that must not wait for a held read or a hook:
// held, it would wait forever, so the bound only ends a failing test and
// is generous for a loaded machine.
const lockWait = 30 * time.Second

// within fails the test unless f returns within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s waited %s: something holds the queue's lock", what, d)
	}
}

// While a job kept only as its queue entry is read from bbolt (a status
// look-up, a take), the queue's lock is free: other endpoints' requests
// and the same endpoint's /health do not wait for the read.
func TestNoStoreReadUnderTheQueueLock(t *testing.T) {
	h, g := gatedHarness(t, queue.Config{})
	cold := h.submit(`{"n":1}`)
	h.submit(`{"n":2}`)
	other := func() {
		h.q.Health(ep)
		if _, err := h.q.Submit(queue.SubmitRequest{EndpointID: "other", Input: json.RawMessage(`{}`)}); err != nil {
			t.Error(err)
		}
		h.q.Stats("other")
	}

	g.hold()
	status := make(chan queue.StatusResponse)
	go func() { r, _ := h.q.Status(ep, cold, 0); status <- r }()
	<-g.entered // the status read is in flight
	within(t, lockWait, "requests during a status read", other)
	g.open()
	if r := <-status; r.Status != store.InQueue || string(r.Input) != `{"n":1}` {
		t.Fatalf("status %+v", r)
	}

	g.hold()
	taken := make(chan []queue.TakenJob)
	go func() { js, _ := h.q.Take(context.Background(), ep, "w1", 2); taken <- js }()
	<-g.entered
	within(t, lockWait, "requests during a take's read", other)
	g.open()
	if js := <-taken; len(js) != 2 || js[0].ID != cold {
		t.Fatalf("took %+v", js)
	}
}

// Callbacks run after the lock is released: one that calls back into the
// queue does not deadlock (it did when they ran under the lock, which only
// a comment forbade).
func TestHooksRunAfterTheLock(t *testing.T) {
	var q *queue.Service
	changes, finished := make(chan queue.QueueStats, 8), make(chan queue.Health, 8)
	cfg := queue.Config{
		OnQueueChange: func(id string) { changes <- q.Stats(id) },
		OnJobFinished: func(id string, _ store.JobStatus, _, _ time.Duration) { finished <- q.Health(id) },
	}
	h := newHarness(t, cfg)
	q = h.q
	within(t, lockWait, "submit with a re-entrant OnQueueChange", func() { h.submit(`{}`) })
	if st := <-changes; st.InQueue != 1 {
		t.Fatalf("stats in the hook: %+v", st)
	}
	j := h.take("w1")
	within(t, lockWait, "job-done with a re-entrant OnJobFinished", func() {
		if ok, err := h.q.Done(ep, "w1", j.ID, done(`{"output":1}`)); !ok || err != nil {
			t.Error(ok, err)
		}
	})
	if hl := <-finished; hl.Jobs.Completed != 1 {
		t.Fatalf("health in the hook: %+v", hl)
	}
}

// Job records and webhook bodies reach the writer as snapshots it encodes
// itself: nothing of a (possibly large) output is encoded under the
// queue's lock.
func TestRecordsEncodedByTheWriter(t *testing.T) {
	recv := newHookRecv(t)
	h, g := gatedHarness(t, queue.Config{WebhookClient: loopbackHooks(t)})
	id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.Webhook = recv.srv.URL })
	h.take("w1")
	if ok, err := h.q.Done(ep, "w1", id, done(`{"output":{"big":"x"}}`)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	recv.next(t)
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]int{}
	for _, op := range g.ops {
		if op.Bucket != store.Jobs && op.Bucket != store.Outbox {
			continue
		}
		if op.Value != nil && op.Encode == nil {
			t.Errorf("%s/%s was encoded before it was queued", op.Bucket, op.Key)
		}
		seen[op.Bucket]++
	}
	if seen[store.Jobs] < 3 || seen[store.Outbox] < 1 {
		t.Fatalf("ops seen: %v", seen)
	}
}
