package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/internal/logtest"
	"berth/queue"
	"berth/store"
)

const ep = "ep1"

type harness struct {
	t     *testing.T
	path  string
	db    *store.DB
	q     *queue.Service
	clock *clockwork.FakeClock
	cfg   queue.Config
	logs  *logtest.Lines
	opts  store.Options
}

func newHarness(t *testing.T, cfg queue.Config) *harness {
	h := &harness{t: t, path: filepath.Join(t.TempDir(), "berth.db"), clock: clockwork.NewFakeClock()}
	cfg.Clock = h.clock
	if cfg.Logger == nil {
		// Every line is checked against the log attribute rules.
		cfg.Logger, h.logs = logtest.Check(t, nil)
	}
	h.cfg = cfg
	h.open()
	t.Cleanup(h.close)
	return h
}

func (h *harness) open() {
	db, err := store.Open(h.path, h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.db = db
	h.q = queue.New(db, h.cfg)
	if err := h.q.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) close() {
	if h.q == nil {
		return
	}
	h.q.Stop()
	if err := h.db.Check(); err != nil {
		h.t.Errorf("db check: %v", err)
	}
	h.db.Close()
	h.q = nil
}

func (h *harness) restart() { h.close(); h.open() }

func (h *harness) submit(input string, mod ...func(*queue.SubmitRequest)) string {
	req := queue.SubmitRequest{EndpointID: ep, Input: json.RawMessage(input)}
	for _, m := range mod {
		m(&req)
	}
	r, err := h.q.Submit(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if r.Status != store.InQueue {
		h.t.Fatalf("submit status %s", r.Status)
	}
	return r.ID
}

func (h *harness) take(worker string) queue.TakenJob {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := h.q.Take(ctx, ep, worker, 1)
	if err != nil || len(js) != 1 {
		h.t.Fatalf("take: %v %v", js, err)
	}
	return js[0]
}

func (h *harness) status(id string) (queue.StatusResponse, error) {
	return h.q.Status(ep, id, 0)
}

func (h *harness) mustStatus(id string, want store.JobStatus) queue.StatusResponse {
	h.t.Helper()
	r, err := h.status(id)
	if err != nil {
		h.t.Fatalf("status %s: %v", id, err)
	}
	if r.Status != want {
		h.t.Fatalf("status of %s = %s, want %s (%+v)", id, r.Status, want, r)
	}
	return r
}

// advance moves the fake clock and waits for the job to change.
func (h *harness) advance(id string, d time.Duration) {
	h.t.Helper()
	ch, err := h.q.Watch(ep, id)
	if err != nil {
		h.t.Fatal(err)
	}
	h.clock.Advance(d)
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		h.t.Fatalf("job %s did not change after advancing %s", id, d)
	}
}

func done(body string) queue.DoneReport {
	r, err := queue.ParseDone([]byte(body), false)
	if err != nil {
		panic(err)
	}
	return r
}

func TestRunTakeDoneStatus(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{"x":1}`)
	r := h.mustStatus(id, store.InQueue)
	if string(r.Input) != `{"x":1}` || r.DelayTime != nil {
		t.Fatalf("queued view %+v", r)
	}
	h.clock.Advance(1500 * time.Millisecond)
	j := h.take("w1")
	if j.ID != id || string(j.Input) != `{"x":1}` || j.Webhook != nil {
		t.Fatalf("taken %+v", j)
	}
	r = h.mustStatus(id, store.InProgress)
	if r.WorkerID != "w1" || *r.DelayTime != 1500 || string(r.Input) != `{"x":1}` {
		t.Fatalf("running view %+v", r)
	}
	h.clock.Advance(250 * time.Millisecond)
	ok, err := h.q.Done(ep, "w1", id, done(`{"output":{"y":2}}`))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	r = h.mustStatus(id, store.Completed)
	if *r.ExecutionTime != 250 || *r.DelayTime != 1500 || string(r.Output) != `{"y":2}` || r.Input != nil || r.Error != nil {
		t.Fatalf("completed view %+v", r)
	}
	hl := h.q.Health(ep)
	if hl.Jobs.Completed != 1 || hl.Jobs.InQueue != 0 || hl.Workers.Idle != 1 {
		t.Fatalf("health %+v", hl)
	}
}

func TestParseDone(t *testing.T) {
	tests := []struct {
		body             string
		progress, failed bool
		err, output      string
		stopPod          bool
	}{
		{body: `{"output":5}`, output: "5"},
		{body: `{"output":null}`, output: "null"},
		{body: `{}`},
		{body: `{"output":{"detail":1},"error":"custom failure"}`, failed: true, err: "custom failure", output: `{"detail":1}`},
		{body: `{"error":{"code":7}}`, failed: true, err: `{"code":7}`},
		{body: `{"error":""}`},
		{body: `{"error":null,"output":1}`, output: "1"},
		{body: `{"status":"IN_PROGRESS","output":"4/10"}`, progress: true, output: `"4/10"`},
		{body: `{"output":{"x":1},"stopPod":true}`, output: `{"x":1}`, stopPod: true},
	}
	for _, tt := range tests {
		r, err := queue.ParseDone([]byte(tt.body), false)
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if r.Progress != tt.progress || r.Failed != tt.failed || r.Error != tt.err || string(r.Output) != tt.output || r.StopPod != tt.stopPod {
			t.Errorf("%s: got %+v", tt.body, r)
		}
	}
	for _, bad := range []string{``, `[]`, `"x"`, `null`, `{`} {
		if _, err := queue.ParseDone([]byte(bad), false); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFailedAndErrorKept(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`)
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"output":{"detail":1},"error":"custom failure"}`))
	r := h.mustStatus(id, store.Failed)
	if *r.Error != "custom failure" || string(r.Output) != `{"detail":1}` {
		t.Fatalf("%+v", r)
	}
	if h.q.Health(ep).Jobs.Failed != 1 {
		t.Fatal("failed not counted")
	}
}

func TestProgressUpdatesKeepRunning(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`)
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"status":"IN_PROGRESS","output":{"progress":"4/10"}}`))
	r := h.mustStatus(id, store.InProgress)
	if string(r.Output) != `{"progress":"4/10"}` {
		t.Fatalf("%+v", r)
	}
	h.q.Done(ep, "w1", id, done(`{}`))
	r = h.mustStatus(id, store.Completed)
	if r.Output != nil {
		t.Fatalf("progress value kept as output: %s", r.Output)
	}
}

func TestFIFOAndBatchTake(t *testing.T) {
	h := newHarness(t, queue.Config{})
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, h.submit(`{}`))
	}
	js, err := h.q.Take(context.Background(), ep, "w1", 3)
	if err != nil || len(js) != 3 {
		t.Fatal(js, err)
	}
	for i, j := range js {
		if j.ID != ids[i] {
			t.Fatalf("batch order: got %s at %d, want %s", j.ID, i, ids[i])
		}
	}
	if j := h.take("w2"); j.ID != ids[3] {
		t.Fatalf("next = %s, want %s", j.ID, ids[3])
	}
}

func TestTakeLongPollWakesOnSubmit(t *testing.T) {
	h := newHarness(t, queue.Config{})
	got := make(chan []queue.TakenJob)
	go func() {
		js, _ := h.q.Take(context.Background(), ep, "w1", 1)
		got <- js
	}()
	// The taker holds until a job arrives: its hold timer and the worker's
	// loss timer exist once it is waiting (the clock never moves here).
	h.clock.BlockUntilContext(context.Background(), 2)
	id := h.submit(`{"a":1}`)
	select {
	case js := <-got:
		if len(js) != 1 || js[0].ID != id {
			t.Fatalf("took %v", js)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("long poll not woken by submit")
	}
}

func TestTakeHoldElapsesEmpty(t *testing.T) {
	h := newHarness(t, queue.Config{TakeHold: 30 * time.Second})
	got := make(chan []queue.TakenJob)
	go func() {
		js, _ := h.q.Take(context.Background(), ep, "w1", 1)
		got <- js
	}()
	// Two clock waiters: the new worker's loss timer and the take's hold.
	h.clock.BlockUntilContext(context.Background(), 2)
	h.clock.Advance(30 * time.Second)
	if js := <-got; len(js) != 0 {
		t.Fatalf("got %v", js)
	}
}

func TestCancelQueuedAndRunning(t *testing.T) {
	h := newHarness(t, queue.Config{})
	queued := h.submit(`{}`)
	running := h.submit(`{}`)
	// take the second by cancelling the first first
	r, err := h.q.Cancel(ep, queued)
	if err != nil || r.Status != store.Cancelled {
		t.Fatal(r, err)
	}
	if j := h.take("w1"); j.ID != running {
		t.Fatalf("took %s", j.ID)
	}
	r, err = h.q.Cancel(ep, running)
	if err != nil || r.Status != store.Cancelled {
		t.Fatal(r, err)
	}
	stops := h.q.StopPoll(context.Background(), ep, "w1")
	if len(stops) != 1 || stops[0] != running {
		t.Fatalf("jobsToStop %v", stops)
	}
	// A late result changes nothing.
	ok, _ := h.q.Done(ep, "w1", running, done(`{"output":1}`))
	if ok {
		t.Fatal("late job-done accepted")
	}
	h.mustStatus(running, store.Cancelled)
	// Cancelling a finished job leaves it alone.
	r, _ = h.q.Cancel(ep, running)
	if r.Status != store.Cancelled {
		t.Fatal(r)
	}
}

func TestRetryOnlyFailedOrTimedOut(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{"k":"v"}`)
	if _, err := h.q.Retry(ep, id); !errors.Is(err, queue.ErrNotRetryable) {
		t.Fatalf("retry of queued: %v", err)
	}
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"error":"boom","output":1}`))
	r, err := h.q.Retry(ep, id)
	if err != nil || r.Status != store.InQueue || r.ID != id {
		t.Fatal(r, err)
	}
	r = h.mustStatus(id, store.InQueue)
	if r.Output != nil || r.Error != nil || string(r.Input) != `{"k":"v"}` || r.Retries != 1 {
		t.Fatalf("after retry %+v", r)
	}
	if j := h.take("w2"); j.ID != id || string(j.Input) != `{"k":"v"}` {
		t.Fatalf("retaken %+v", j)
	}
	h.q.Done(ep, "w2", id, done(`{"output":2}`))
	if _, err := h.q.Retry(ep, id); !errors.Is(err, queue.ErrNotRetryable) {
		t.Fatalf("retry of completed: %v", err)
	}
}

func TestPurgeRemovesOnlyQueued(t *testing.T) {
	h := newHarness(t, queue.Config{})
	running := h.submit(`{}`)
	h.take("w1")
	a, b := h.submit(`{}`), h.submit(`{}`)
	n, err := h.q.Purge(ep)
	if err != nil || n != 2 {
		t.Fatal(n, err)
	}
	for _, id := range []string{a, b} {
		if _, err := h.status(id); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("purged job %s: %v", id, err)
		}
	}
	h.mustStatus(running, store.InProgress)
}

func TestExecutionTimeout(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.ExecutionTimeout = 5 * time.Second })
	h.take("w1")
	h.advance(id, 5*time.Second)
	r := h.mustStatus(id, store.TimedOut)
	if r.Error == nil || !strings.Contains(*r.Error, "timeout") {
		t.Fatalf("%+v", r)
	}
	if stops := h.q.StopPoll(context.Background(), ep, "w1"); len(stops) != 1 || stops[0] != id {
		t.Fatalf("jobsToStop %v", stops)
	}
	if ok, _ := h.q.Done(ep, "w1", id, done(`{"output":1}`)); ok {
		t.Fatal("job-done after timeout accepted")
	}
	// TIMED_OUT can be retried.
	if _, err := h.q.Retry(ep, id); err != nil {
		t.Fatal(err)
	}
}

func TestTTLRemovesInAnyState(t *testing.T) {
	for _, state := range []store.JobStatus{store.InQueue, store.InProgress, store.Completed} {
		t.Run(string(state), func(t *testing.T) {
			h := newHarness(t, queue.Config{})
			id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.TTL = 10 * time.Second })
			if state != store.InQueue {
				h.take("w1")
			}
			if state == store.Completed {
				h.q.Done(ep, "w1", id, done(`{"output":1}`))
			}
			h.advance(id, 10*time.Second)
			if _, err := h.status(id); !errors.Is(err, queue.ErrNotFound) {
				t.Fatalf("after ttl: %v", err)
			}
			if state == store.InProgress {
				if stops := h.q.StopPoll(context.Background(), ep, "w1"); len(stops) != 1 || stops[0] != id {
					t.Fatalf("jobsToStop %v", stops)
				}
			}
			if h.q.Health(ep).Jobs != (queue.JobCounts{}) {
				t.Fatalf("counts left: %+v", h.q.Health(ep).Jobs)
			}
		})
	}
}

func TestTTLCoversQueueTime(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`, func(r *queue.SubmitRequest) {
		r.TTL = 20 * time.Second
		r.ExecutionTimeout = time.Minute
	})
	h.clock.Advance(15 * time.Second)
	h.take("w1")
	// Only 5 s of the ttl remain for execution.
	h.advance(id, 5*time.Second)
	if _, err := h.status(id); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("got %v", err)
	}
}

func TestRetention(t *testing.T) {
	tests := []struct {
		sync bool
		keep time.Duration
	}{{false, 30 * time.Minute}, {true, time.Minute}}
	for _, tt := range tests {
		h := newHarness(t, queue.Config{})
		id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.Sync = tt.sync })
		if tt.sync != strings.HasPrefix(id, "sync-") {
			t.Fatalf("id %s for sync=%v", id, tt.sync)
		}
		h.take("w1")
		h.q.Done(ep, "w1", id, done(`{"output":1}`))
		h.clock.Advance(tt.keep - time.Second)
		h.mustStatus(id, store.Completed)
		h.advance(id, time.Second)
		if _, err := h.status(id); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("sync=%v: kept past retention: %v", tt.sync, err)
		}
	}
}

func TestStatusTTLExtendsResult(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`)
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"output":1}`))
	if _, err := h.q.Status(ep, id, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Hour)
	h.mustStatus(id, store.Completed)
	h.advance(id, time.Hour)
	if _, err := h.status(id); !errors.Is(err, queue.ErrNotFound) {
		t.Fatal(err)
	}
}

func TestWorkerLostRequeuesThenFails(t *testing.T) {
	h := newHarness(t, queue.Config{WorkerTimeout: time.Minute, MaxAttempts: 2})
	id := h.submit(`{}`)
	h.take("w1")
	h.advance(id, time.Minute)
	r := h.mustStatus(id, store.InQueue)
	if h.q.Health(ep).Jobs.Retried != 1 {
		t.Fatalf("retried not counted: %+v", r)
	}
	if j := h.take("w2"); j.ID != id {
		t.Fatal(j)
	}
	h.advance(id, time.Minute)
	r = h.mustStatus(id, store.Failed)
	if r.Error == nil || !strings.Contains(*r.Error, "gave up after 2 attempts") {
		t.Fatalf("%+v", r)
	}
	// The log says which job, endpoint and worker, as attributes. A line
	// is written once the queue's lock is released, after the status a
	// reader sees: wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for msg, worker := range map[string]string{"job requeued": "w1", "job failed": "w2"} {
		if err := h.logs.Wait(ctx, msg, 1); err != nil {
			t.Fatal(err)
		}
		if a := h.logs.Find(msg); a == nil || a["job"] != id || a["endpoint"] != ep || a["worker"] != worker {
			t.Errorf("log line %q: %v", msg, a)
		}
	}
}

func TestLiveWorkerIsNotLost(t *testing.T) {
	h := newHarness(t, queue.Config{WorkerTimeout: time.Minute})
	id := h.submit(`{}`)
	h.take("w1")
	for i := 0; i < 5; i++ {
		h.clock.Advance(30 * time.Second)
		h.q.Ping(ep, "w1", []string{id})
	}
	h.mustStatus(id, store.InProgress)
}

func TestPingReconcileRequeuesForgottenJob(t *testing.T) {
	h := newHarness(t, queue.Config{ReconcileGrace: 20 * time.Second})
	id := h.submit(`{}`)
	h.take("w1")
	h.clock.Advance(5 * time.Second)
	h.q.Ping(ep, "w1", nil) // too early to judge
	h.mustStatus(id, store.InProgress)
	h.clock.Advance(20 * time.Second)
	h.q.Ping(ep, "w1", nil)
	h.mustStatus(id, store.InQueue)
}

func TestPingRepeatsAStopTheWorkerMissed(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`)
	h.take("w1")
	h.q.Cancel(ep, id)
	if stops := h.q.StopPoll(context.Background(), ep, "w1"); len(stops) != 1 {
		t.Fatalf("first stop %v", stops)
	}
	// The worker had not registered the job yet and still reports it.
	h.q.Ping(ep, "w1", []string{id})
	if stops := h.q.StopPoll(context.Background(), ep, "w1"); len(stops) != 1 || stops[0] != id {
		t.Fatalf("stop not repeated: %v", stops)
	}
	// A worker that fetches the stop and ignores it keeps reporting the
	// job: the runtime sees it as pending even with nothing left to fetch.
	if got := h.q.PendingStops("w1"); len(got) != 1 || got[0] != id {
		t.Fatalf("ignored stop not pending: %v", got)
	}
	// Once it lets go, nothing more is sent.
	h.q.Ping(ep, "w1", nil)
	if got := h.q.PendingStops("w1"); len(got) != 0 {
		t.Fatalf("pending %v", got)
	}
	// A job that expired entirely is stopped too.
	h.q.Ping(ep, "w1", []string{"gone-job"})
	if got := h.q.PendingStops("w1"); len(got) != 1 || got[0] != "gone-job" {
		t.Fatalf("pending %v", got)
	}
}

func TestLateResultFromGivenUpWorker(t *testing.T) {
	h := newHarness(t, queue.Config{WorkerTimeout: time.Minute})
	id := h.submit(`{}`)
	h.take("w1")
	h.advance(id, time.Minute)
	h.mustStatus(id, store.InQueue)
	if ok, _ := h.q.Done(ep, "w1", id, done(`{"output":"late"}`)); !ok {
		t.Fatal("late result not taken")
	}
	r := h.mustStatus(id, store.Completed)
	if string(r.Output) != `"late"` || h.q.Health(ep).Jobs.InQueue != 0 {
		t.Fatalf("%+v %+v", r, h.q.Health(ep))
	}
}

func TestStreamDrainsAndSplits(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`)
	h.take("w1")
	for _, c := range []string{`{"output":"a"}`, `{"output":"b"}`} {
		if ok, err := h.q.StreamChunk(ep, "w1", id, []byte(c)); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	r, err := h.q.Stream(context.Background(), ep, id, time.Second)
	if err != nil || len(r.Stream) != 2 || string(r.Stream[0]) != `{"output":"a"}` || r.Status != store.InProgress {
		t.Fatalf("%+v %v", r, err)
	}
	// drained: the next call holds, then returns an empty stream
	got := make(chan queue.StreamResponse)
	go func() {
		r, _ := h.q.Stream(context.Background(), ep, id, 10*time.Second)
		got <- r
	}()
	h.clock.BlockUntilContext(context.Background(), 3) // ttl, exec timers + the stream hold
	big := strings.Repeat("é", queue.MaxStreamChunk)   // 2 MB of UTF-8
	body, _ := json.Marshal(map[string]string{"output": big})
	h.q.StreamChunk(ep, "w1", id, body)
	r = <-got
	var joined strings.Builder
	for _, c := range r.Stream {
		if len(c) > queue.MaxStreamChunk {
			t.Fatalf("chunk of %d bytes", len(c))
		}
		var m struct{ Output string }
		json.Unmarshal(c, &m)
		joined.WriteString(m.Output)
	}
	if len(r.Stream) < 2 || joined.String() != big {
		t.Fatalf("split into %d chunks, rejoined ok=%v", len(r.Stream), joined.String() == big)
	}
	h.q.Done(ep, "w1", id, queue.DoneReport{IsStream: true, Output: json.RawMessage(`[]`)})
	r, _ = h.q.Stream(context.Background(), ep, id, time.Second)
	if r.Status != store.Completed || r.Stream == nil || len(r.Stream) != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestWaitReturnsOnTerminalOrTimeout(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`)
	got := make(chan queue.StatusResponse)
	go func() {
		r, _ := h.q.Wait(context.Background(), ep, id, time.Minute)
		got <- r
	}()
	h.clock.BlockUntilContext(context.Background(), 2) // ttl + wait timer
	h.clock.Advance(time.Minute)
	if r := <-got; r.Status != store.InQueue {
		t.Fatalf("%+v", r)
	}
	go func() {
		r, _ := h.q.Wait(context.Background(), ep, id, time.Minute)
		got <- r
	}()
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"output":7}`))
	if r := <-got; r.Status != store.Completed || string(r.Output) != "7" {
		t.Fatalf("%+v", r)
	}
}

func TestRestartKeepsJobsAndTimers(t *testing.T) {
	h := newHarness(t, queue.Config{WorkerTimeout: time.Minute})
	finished := h.submit(`{"n":1}`)
	running := h.submit(`{"n":2}`)
	queued := h.submit(`{"n":3}`, func(r *queue.SubmitRequest) { r.TTL = time.Hour })
	h.take("w1")
	h.take("w1")
	h.q.Done(ep, "w1", finished, done(`{"output":"ok"}`))
	h.restart()
	h.mustStatus(queued, store.InQueue)
	r := h.mustStatus(finished, store.Completed)
	if string(r.Output) != `"ok"` {
		t.Fatal(r)
	}
	h.mustStatus(running, store.InProgress)
	// The worker never comes back: its job is requeued after the timeout.
	h.advance(running, time.Minute)
	h.mustStatus(running, store.InQueue)
	// FIFO order survives: the requeued job goes first, then the old one.
	if j := h.take("w2"); j.ID != running {
		t.Fatalf("took %s", j.ID)
	}
	if j := h.take("w2"); j.ID != queued || string(j.Input) != `{"n":3}` {
		t.Fatalf("took %+v", j)
	}
	// The stored ttl resumes: the hour is counted from submission.
	h.q.Done(ep, "w2", queued, done(`{"output":1}`))
	h.restart()
	h.advance(queued, 59*time.Minute)
	if _, err := h.status(queued); !errors.Is(err, queue.ErrNotFound) {
		t.Fatal(err)
	}
}

func TestRegisteredWorkerKeySurvivesRestart(t *testing.T) {
	h := newHarness(t, queue.Config{})
	reg, err := h.q.RegisterWorker(ep, true)
	if err != nil {
		t.Fatal(err)
	}
	h.restart()
	wid, eid, ok := h.q.AuthWorker(reg.Key)
	if !ok || wid != reg.WorkerID || eid != ep {
		t.Fatal(wid, eid, ok)
	}
	if _, _, ok := h.q.AuthWorker("nope"); ok {
		t.Fatal("unknown key accepted")
	}
}

type hookRecv struct {
	srv   *httptest.Server
	calls chan string
	codes chan int
}

func newHookRecv(t *testing.T, codes ...int) *hookRecv {
	r := &hookRecv{calls: make(chan string, 10), codes: make(chan int, len(codes))}
	for _, c := range codes {
		r.codes <- c
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		code := 200
		select {
		case code = <-r.codes:
		default:
		}
		w.WriteHeader(code)
		r.calls <- req.Method + " " + string(b)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookRecv) next(t *testing.T) string {
	t.Helper()
	select {
	case c := <-r.calls:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("no webhook call")
		return ""
	}
}

func TestWebhookDeliveredWithStatusBody(t *testing.T) {
	recv := newHookRecv(t)
	h := newHarness(t, queue.Config{WebhookClient: loopbackHooks(t)})
	id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.Webhook = recv.srv.URL })
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"output":{"a":1}}`))
	call := recv.next(t)
	var body queue.StatusResponse
	if !strings.HasPrefix(call, "POST ") || json.Unmarshal([]byte(call[5:]), &body) != nil {
		t.Fatal(call)
	}
	if body.ID != id || body.Status != store.Completed || string(body.Output) != `{"a":1}` {
		t.Fatalf("%+v", body)
	}
}

func TestWebhookRetriesTwiceThenGivesUp(t *testing.T) {
	recv := newHookRecv(t, 500, 502, 503, 500)
	results := make(chan string, 10)
	h := newHarness(t, queue.Config{WebhookRetryDelay: 10 * time.Second, WebhookClient: loopbackHooks(t),
		OnWebhook: func(_, result string) { results <- result }})
	id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.Webhook = recv.srv.URL })
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"error":"x"}`)) // failures notify too
	recv.next(t)
	for i := 0; i < 2; i++ {
		// the retry waits on the fake clock: the finished job's deadline
		// (one timer for every entry), the worker's loss timer and the retry
		h.clock.BlockUntilContext(context.Background(), 3)
		h.clock.Advance(10 * time.Second)
		recv.next(t)
	}
	// The third failure is the last: the outbox says it gave up (nothing
	// is scheduled), and no later moment brings a fourth call.
	for _, want := range []string{"retry", "retry", "failed"} {
		select {
		case got := <-results:
			if got != want {
				t.Fatalf("delivery result %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no delivery result %q", want)
		}
	}
	h.clock.Advance(time.Minute)
	select {
	case c := <-recv.calls:
		t.Fatalf("a fourth call: %s", c)
	default:
	}
}

func TestWebhookOutboxSurvivesRestart(t *testing.T) {
	recv := newHookRecv(t, 500)
	h := newHarness(t, queue.Config{WebhookClient: loopbackHooks(t)})
	id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.Webhook = recv.srv.URL })
	h.take("w1")
	h.q.Done(ep, "w1", id, done(`{"output":1}`))
	recv.next(t) // first attempt failed; the retry is pending
	// Stop waits for the delivery goroutine, which records the retry time;
	// Start arms the retry's timer before it returns.
	h.restart()
	h.clock.Advance(10 * time.Second)
	if c := recv.next(t); !strings.Contains(c, id) {
		t.Fatal(c)
	}
}

// TestFrozenWorkerIsNeverLost: a worker frozen by FlashBoot sends nothing
// and is not lost (a silent control worker is); thawed, it has a full
// WorkerTimeout from then on to make itself heard.
func TestFrozenWorkerIsNeverLost(t *testing.T) {
	h := newHarness(t, queue.Config{WorkerTimeout: time.Minute})
	h.q.Ping(ep, "frozen", nil)
	h.q.Ping(ep, "control", nil)
	h.q.SetFrozen("frozen", true)
	if c := h.q.Health(ep).Workers; c.Frozen != 1 || c.Idle != 1 {
		t.Fatalf("workers %+v, want one frozen and one idle", c)
	}
	lost := func(id string) bool {
		for _, w := range h.q.Workers(ep) {
			if w.WorkerID == id {
				return w.Lost
			}
		}
		t.Fatalf("worker %s unknown", id)
		return false
	}
	h.clock.Advance(10 * time.Minute)
	waitFor(t, "the control worker lost", func() bool { return lost("control") })
	if lost("frozen") {
		t.Fatal("the frozen worker was counted as lost")
	}
	h.q.SetFrozen("frozen", false)
	h.clock.Advance(59 * time.Second)
	if lost("frozen") {
		t.Fatal("lost before a full WorkerTimeout after the thaw")
	}
	h.clock.Advance(2 * time.Second)
	waitFor(t, "the thawed, silent worker lost", func() bool { return lost("frozen") })
}

// waitFor polls cond (a timer callback runs on its own goroutine) for up
// to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
	}
}

// TestFrozenWorkersTakeLast: a queued job goes to a waiting worker that
// is not frozen even when a frozen worker's job-take has waited longer;
// with only the frozen worker waiting, it gets the job (and is thawed).
func TestFrozenWorkersTakeLast(t *testing.T) {
	h := newHarness(t, queue.Config{WorkerTimeout: time.Hour})
	h.q.Ping(ep, "frozen", nil)
	h.q.Ping(ep, "active", nil)
	h.q.SetFrozen("frozen", true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]chan string{"frozen": make(chan string, 1), "active": make(chan string, 1)}
	take := func(w string) {
		js, err := h.q.Take(ctx, ep, w, 1)
		if err != nil || len(js) != 1 {
			got[w] <- ""
			return
		}
		got[w] <- js[0].ID
	}
	// Timers: one lost timer per worker, then each take's hold.
	go take("frozen")
	if err := h.clock.BlockUntilContext(ctx, 3); err != nil {
		t.Fatal(err)
	}
	go take("active")
	if err := h.clock.BlockUntilContext(ctx, 4); err != nil {
		t.Fatal(err)
	}
	first := h.submit(`{}`)
	if id := <-got["active"]; id != first {
		t.Fatalf("active worker got %q, want %s", id, first)
	}
	second := h.submit(`{}`)
	if id := <-got["frozen"]; id != second {
		t.Fatalf("frozen worker got %q, want %s", id, second)
	}
}
