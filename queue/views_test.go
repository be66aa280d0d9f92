package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

// The dashboard's views read jobs without changing them: newest first,
// filtered by status, input kept after the end, stream chunks peeked.
func TestJobViews(t *testing.T) {
	h := newHarness(t, queue.Config{})
	if v := h.q.Queue(ep); v.InQueue != 0 || v.OldestQueuedAt != nil {
		t.Fatalf("empty queue: %+v", v)
	}
	first := h.submit(`{"n":1}`)
	h.clock.Advance(3 * time.Second)
	second := h.submit(`{"n":2}`)
	third := h.submit(`{"n":3}`)
	h.clock.Advance(2 * time.Second)

	v := h.q.Queue(ep)
	if v.InQueue != 3 || v.OldestQueuedAt == nil || v.OldestWaitMs != 5000 {
		t.Fatalf("queue: %+v", v)
	}
	list := func(js []queue.JobView, _ int) []queue.JobView { return js }
	ids := func(js []queue.JobView) (out []string) {
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	if got := ids(list(h.q.Jobs(ep, queue.JobFilter{}))); len(got) != 3 || got[0] != third || got[1] != second || got[2] != first {
		t.Fatalf("newest first: %v, want %v", got, []string{third, second, first})
	}
	if got := ids(list(h.q.Jobs(ep, queue.JobFilter{Limit: 1}))); len(got) != 1 || got[0] != third {
		t.Fatalf("limit 1: %v", got)
	}
	if got := list(h.q.Jobs("other", queue.JobFilter{})); len(got) != 0 {
		t.Fatalf("another endpoint's jobs: %v", got)
	}

	// The oldest is taken and finished: the head is now the second job.
	if tj := h.take("w1"); tj.ID != first {
		t.Fatalf("took %s", tj.ID)
	}
	if v := h.q.Queue(ep); v.InQueue != 2 || v.InProgress != 1 || v.OldestWaitMs != 2000 {
		t.Fatalf("queue after a take: %+v", v)
	}
	if ok, err := h.q.StreamChunk(ep, "w1", first, []byte(`{"output":"tok"}`)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for range 2 { // peeking twice sees the chunk twice: nothing is drained
		j, err := h.q.Job(ep, first)
		if err != nil || j.Status != store.InProgress || len(j.Stream) != 1 || string(j.Stream[0]) != `{"output":"tok"}` || j.StartedAt == nil {
			t.Fatalf("running job: %+v %v", j, err)
		}
	}
	r, err := h.q.Stream(context.Background(), ep, first, time.Second)
	if err != nil || len(r.Stream) != 1 {
		t.Fatalf("a client still reads the chunk the dashboard peeked: %+v %v", r, err)
	}
	h.clock.Advance(time.Second)
	if _, err := h.q.Done(ep, "w1", first, done(`{"output":{"ok":true}}`)); err != nil {
		t.Fatal(err)
	}

	got := list(h.q.Jobs(ep, queue.JobFilter{Statuses: []store.JobStatus{store.Completed}}))
	if len(got) != 1 || got[0].ID != first {
		t.Fatalf("completed: %v", ids(got))
	}
	j := got[0]
	if string(j.Input) != `{"n":1}` || string(j.Output) != `{"ok":true}` || j.CompletedAt == nil ||
		j.DelayTime == nil || *j.DelayTime != 5000 || j.ExecutionTime == nil || *j.ExecutionTime != 1000 {
		b, _ := json.Marshal(j)
		t.Fatalf("completed job view: %s", b)
	}
	if got := ids(list(h.q.Jobs(ep, queue.JobFilter{Statuses: []store.JobStatus{store.InQueue, store.InProgress}}))); len(got) != 2 || got[0] != third {
		t.Fatalf("queued: %v", got)
	}
	if _, err := h.q.Job(ep, "nope"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	// Reading changed nothing: the status API still shows the job as it was.
	h.mustStatus(second, store.InQueue)
}
