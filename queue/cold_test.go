package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

// Queued jobs nobody looks at are kept as index entries only; these tests
// check that such jobs behave like the others: order, input, look-ups,
// cancel, ttl, purge and restart.

func TestColdQueueKeepsOrderInputAndCounts(t *testing.T) {
	h := newHarness(t, queue.Config{})
	h.opts.NoSync = true // thousands of submissions; durability is not what this tests
	h.restart()
	const n = 4500 // more than two purge batches
	big := `{"blob":"` + strings.Repeat("x", 5000) + `"}`
	ids := make([]string, n)
	for i := range ids {
		in := fmt.Sprintf(`{"n":%d}`, i)
		if i == 1 {
			in = big // stored apart from the record
		}
		ids[i] = h.submit(in, func(r *queue.SubmitRequest) { r.LowPriority = i%2 == 1 })
	}
	if st := h.q.Stats(ep); st.InQueue != n || st.LowPriority != n/2 {
		t.Fatalf("stats %+v", st)
	}
	// A look-up reads the stored record.
	if r := h.mustStatus(ids[7], store.InQueue); string(r.Input) != `{"n":7}` {
		t.Fatalf("status input %s", r.Input)
	}
	h.restart()
	if got := h.q.Health(ep).Jobs.InQueue; got != n {
		t.Fatalf("after restart inQueue %d", got)
	}
	js, err := h.q.Take(context.Background(), ep, "w1", 3)
	if err != nil || len(js) != 3 {
		t.Fatal(js, err)
	}
	for i, j := range js {
		want := fmt.Sprintf(`{"n":%d}`, i)
		if i == 1 {
			want = big
		}
		if j.ID != ids[i] || string(j.Input) != want {
			t.Fatalf("took %d: %s %.40s, want %s %.40s", i, j.ID, j.Input, ids[i], want)
		}
	}
	// Cancel one in the middle: it leaves the queue, its place is skipped.
	if r, err := h.q.Cancel(ep, ids[3]); err != nil || r.Status != store.Cancelled {
		t.Fatal(r, err)
	}
	if j := h.take("w2"); j.ID != ids[4] {
		t.Fatalf("took %s, want %s", j.ID, ids[4])
	}
	left := n - 5
	if got, err := h.q.Purge(ep); err != nil || got != left {
		t.Fatalf("purged %d (%v), want %d", got, err, left)
	}
	if _, err := h.status(ids[n-1]); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("purged job: %v", err)
	}
	h.restart()
	hc := h.q.Health(ep).Jobs
	if hc.InQueue != 0 || hc.InProgress != 4 {
		t.Fatalf("after purge and restart: %+v", hc)
	}
	h.mustStatus(ids[3], store.Cancelled)
}

func TestColdJobsExpireAtTheirTTL(t *testing.T) {
	h := newHarness(t, queue.Config{})
	var short []string
	for i := 0; i < 3; i++ {
		short = append(short, h.submit(`{}`, func(r *queue.SubmitRequest) { r.TTL = 10 * time.Second }))
	}
	long := h.submit(`{}`, func(r *queue.SubmitRequest) { r.TTL = time.Hour })
	h.restart() // the ttls come back from the index
	h.clock.Advance(10 * time.Second)
	// The expiry runs on the timer's goroutine and logs each job it drops.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.logs.Wait(ctx, "job expired (ttl)", len(short)); err != nil {
		t.Fatal(err)
	}
	if n := h.q.Health(ep).Jobs.InQueue; n != 1 {
		t.Fatalf("inQueue %d after the short ttl", n)
	}
	for _, id := range short {
		if _, err := h.status(id); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("expired job %s: %v", id, err)
		}
	}
	h.mustStatus(long, store.InQueue)
	h.restart()
	if got := h.q.Health(ep).Jobs.InQueue; got != 1 {
		t.Fatalf("after restart inQueue %d", got)
	}
	if j := h.take("w1"); j.ID != long {
		t.Fatalf("took %s", j.ID)
	}
}

func TestStatusTTLOnColdJobIsKept(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{"a":1}`, func(r *queue.SubmitRequest) { r.TTL = 10 * time.Second })
	if _, err := h.q.Status(ep, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(30 * time.Second)
	r := h.mustStatus(id, store.InQueue)
	if string(r.Input) != `{"a":1}` {
		t.Fatalf("%+v", r)
	}
	var in json.RawMessage
	if j := h.take("w1"); j.ID != id {
		t.Fatal(j)
	} else {
		in = j.Input
	}
	if string(in) != `{"a":1}` {
		t.Fatal(string(in))
	}
}

// TestCancelEndpoint: every unfinished job of one endpoint — running,
// queued and loaded, queued and cold — is cancelled with its webhook
// state; the other endpoint's jobs are untouched.
func TestCancelEndpoint(t *testing.T) {
	h := newHarness(t, queue.Config{})
	h.opts.NoSync = true
	h.restart()
	const n = 1200 // more than two batches
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.submit(`{}`)
	}
	other, err := h.q.Submit(queue.SubmitRequest{EndpointID: "ep2", Input: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	h.restart() // the queued jobs are cold entries now
	running := h.take("w1")
	h.mustStatus(ids[5], store.InQueue) // one looked at: loaded
	got, err := h.q.CancelEndpoint(ep)
	if err != nil || got != n {
		t.Fatalf("cancelled %d (%v), want %d", got, err, n)
	}
	for _, id := range []string{running.ID, ids[5], ids[n-1]} {
		h.mustStatus(id, store.Cancelled)
	}
	if stops := h.q.StopPoll(context.Background(), ep, "w1"); len(stops) != 1 || stops[0] != running.ID {
		t.Errorf("the running job's worker was told to stop %v", stops)
	}
	if hl := h.q.Health(ep); hl.Jobs.InQueue != 0 || hl.Jobs.InProgress != 0 {
		t.Errorf("after CancelEndpoint: %+v", hl.Jobs)
	}
	if r, err := h.q.Status("ep2", other.ID, 0); err != nil || r.Status != store.InQueue {
		t.Errorf("the other endpoint's job: %+v %v", r, err)
	}
	h.restart()
	h.mustStatus(ids[n-1], store.Cancelled)
	if got, err := h.q.CancelEndpoint(ep); err != nil || got != 0 {
		t.Errorf("a second CancelEndpoint cancelled %d (%v)", got, err)
	}
}

// Right after a start the id map of cold entries is still being filled in
// the background: a look-up made then waits for it, and finds the job (or
// answers not found) exactly as later.
func TestLookupsRightAfterAStart(t *testing.T) {
	h := newHarness(t, queue.Config{})
	h.opts.NoSync = true
	h.restart()
	const n = 30000
	var last string
	for i := range n {
		last = h.submit(fmt.Sprintf(`{"n":%d}`, i))
	}
	h.restart()
	if r := h.mustStatus(last, store.InQueue); string(r.Input) != fmt.Sprintf(`{"n":%d}`, n-1) {
		t.Fatalf("status %+v", r)
	}
	h.restart()
	if _, err := h.status("01900000-0000-7000-8000-000000000000"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("an unknown id: %v", err)
	}
	h.restart()
	if r, err := h.q.Cancel(ep, last); err != nil || r.Status != store.Cancelled {
		t.Fatalf("cancel %+v %v", r, err)
	}
	if got := h.q.Health(ep).Jobs.InQueue; got != n-1 {
		t.Fatalf("inQueue %d", got)
	}
}
