package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

// heapMiB is the live heap after a full collection.
func heapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// Worker identities nobody uses are forgotten: the ones the operator's key
// created on the fly an hour after their last request, the ones with their
// own key (worker-env) a day after, with their key (also on disk). A
// worker holding a job, or frozen, stays.
func TestUnusedWorkersExpire(t *testing.T) {
	h := newHarness(t, queue.Config{WorkerTimeout: 2 * time.Hour}) // "busy" keeps its job
	const n = 3000
	for i := range n {
		h.q.Ping(ep, fmt.Sprintf("op-%05d", i), nil)
	}
	reg, err := h.q.RegisterWorker(ep, true)
	if err != nil {
		t.Fatal(err)
	}
	h.q.Ping(ep, "frozen", nil)
	h.q.SetFrozen("frozen", true)
	id := h.submit(`{}`, func(r *queue.SubmitRequest) { r.ExecutionTimeout, r.TTL = 48*time.Hour, 48*time.Hour })
	if j := h.take("busy"); j.ID != id {
		t.Fatal(j)
	}
	if got := len(h.q.Workers("")); got != n+3 {
		t.Fatalf("%d workers, want %d", got, n+3)
	}
	h.clock.Advance(59 * time.Minute)
	if got := h.q.ExpireWorkers(); got != 0 {
		t.Fatalf("%d forgotten before their hour", got)
	}
	h.q.Ping(ep, "busy", []string{id}) // still working
	h.clock.Advance(2 * time.Minute)
	if got := h.q.ExpireWorkers(); got != n {
		t.Fatalf("%d forgotten after an hour of silence, want %d", got, n)
	}
	left := map[string]bool{}
	for _, w := range h.q.Workers("") {
		left[w.WorkerID] = true
	}
	if len(left) != 3 || !left["busy"] || !left["frozen"] || !left[reg.WorkerID] {
		t.Fatalf("left: %v", left)
	}
	h.q.Ping(ep, "busy", []string{id})
	if hl := h.q.Health(ep).Workers; hl.Running != 1 || hl.Frozen != 1 {
		t.Fatalf("health %+v", hl)
	}
	// The registered key outlives an hour, not a day.
	if _, _, ok := h.q.AuthWorker(reg.Key); !ok {
		t.Fatal("a worker-env key forgotten after an hour")
	}
	h.clock.Advance(23 * time.Hour)
	if got := h.q.ExpireWorkers(); got < 1 {
		t.Fatalf("%d forgotten after a day, want the worker-env identity", got)
	}
	if _, _, ok := h.q.AuthWorker(reg.Key); ok {
		t.Fatal("an unused worker-env key still works after a day")
	}
	h.restart()
	if _, _, ok := h.q.AuthWorker(reg.Key); ok {
		t.Fatal("the forgotten key came back from disk")
	}
}

// Stream chunks nobody reads are capped per job (and in all): the rest are
// refused (accepted false) and counted; a reader that drains the buffer
// makes room again. 4,096 chunks of 64 KiB grew the heap by 288 MiB when
// buffers had no cap; here 512 against a 2 MiB cap (the default is
// 16 MiB: the soak benchmark runs the 4,096).
func TestStreamBufferCapped(t *testing.T) {
	h := newHarness(t, queue.Config{StreamBufferPerJob: 2 << 20})
	id := h.submit(`{}`)
	h.take("w1")
	chunk, _ := json.Marshal(map[string]string{"output": strings.Repeat("x", 64<<10)})
	before := heapMiB()
	accepted := 0
	const sent = 512
	for range sent {
		ok, err := h.q.StreamChunk(ep, "w1", id, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			accepted++
		}
	}
	grew := heapMiB() - before
	t.Logf("512 × 64 KiB unread: %d accepted, heap +%.1f MiB", accepted, grew)
	if accepted < 30 || accepted > 32 {
		t.Fatalf("%d chunks accepted, want the 2 MiB cap's worth", accepted)
	}
	if grew > 16 {
		t.Fatalf("heap grew %.1f MiB", grew)
	}
	st := h.q.StreamStats()
	if st.Dropped != uint64(sent-accepted) || st.BufferedBytes < 1<<20 || st.BufferedBytes > 2<<20 {
		t.Fatalf("stream stats %+v", st)
	}
	r, err := h.q.Stream(context.Background(), ep, id, time.Second)
	if err != nil || len(r.Stream) != accepted {
		t.Fatalf("drained %d chunks (%v), want %d", len(r.Stream), err, accepted)
	}
	if ok, _ := h.q.StreamChunk(ep, "w1", id, chunk); !ok {
		t.Fatal("a chunk refused after the buffer was drained")
	}
	if ok, err := h.q.Done(ep, "w1", id, done(`{"output":"final"}`)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if r := h.mustStatus(id, store.Completed); string(r.Output) != `"final"` {
		t.Fatalf("the result suffered from the full buffer: %+v", r)
	}
}

// All jobs' buffers together are capped too.
func TestStreamBufferTotalCapped(t *testing.T) {
	h := newHarness(t, queue.Config{StreamBufferPerJob: 1 << 20, StreamBufferTotal: 3 << 20 / 2})
	chunk, _ := json.Marshal(map[string]string{"output": strings.Repeat("x", 100<<10)})
	var ids []string
	for range 2 {
		ids = append(ids, h.submit(`{}`))
	}
	js, err := h.q.Take(context.Background(), ep, "w1", 2)
	if err != nil || len(js) != 2 {
		t.Fatal(js, err)
	}
	acc := map[string]int{}
	for range 20 {
		for _, id := range ids {
			if ok, _ := h.q.StreamChunk(ep, "w1", id, chunk); ok {
				acc[id]++
			}
		}
	}
	if total := acc[ids[0]] + acc[ids[1]]; total > 15 || acc[ids[0]] > 10 || acc[ids[1]] > 10 {
		t.Fatalf("accepted %v: past the caps", acc)
	}
	if st := h.q.StreamStats(); st.BufferedBytes > 3<<20/2 {
		t.Fatalf("buffered %d bytes", st.BufferedBytes)
	}
}

// A finished job's output is read from bbolt, not held: 500 results of
// 64 KiB (32 MiB) leave the heap nearly as it was, and every one is still served
// (also after a restart).
func TestFinishedOutputsAreNotHeld(t *testing.T) {
	h := newHarness(t, queue.Config{})
	h.opts.NoSync = true
	h.restart()
	const n = 500
	out := `"` + strings.Repeat("y", 64<<10) + `"`
	var ids []string
	for i := range n {
		ids = append(ids, h.submit(fmt.Sprintf(`{"n":%d}`, i)))
	}
	before := heapMiB()
	for range n {
		j := h.take("w1")
		if ok, err := h.q.Done(ep, "w1", j.ID, done(`{"output":`+out+`}`)); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	grew := heapMiB() - before
	t.Logf("%d finished jobs with 64 KiB outputs: heap +%.1f MiB", n, grew)
	if grew > 16 {
		t.Fatalf("heap grew %.1f MiB for %d finished jobs: their outputs are held", grew, n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if r := h.mustStatus(ids[i], store.Completed); string(r.Output) != out {
			t.Fatalf("job %d output %.20s…", i, r.Output)
		}
	}
	if hl := h.q.Health(ep).Jobs; hl.Completed != n {
		t.Fatalf("health %+v", hl)
	}
	h.restart()
	if r := h.mustStatus(ids[7], store.Completed); string(r.Output) != out {
		t.Fatal("after restart")
	}
	if hl := h.q.Health(ep).Jobs; hl.Completed != n {
		t.Fatalf("health after restart %+v", hl)
	}
	// Retention still ends them.
	h.clock.Advance(31 * time.Minute)
	waitFor(t, "retention to remove the finished jobs", func() bool { return h.q.Health(ep).Jobs.Completed == 0 })
	if _, err := h.status(ids[7]); err == nil {
		t.Fatal("a job past its retention is still served")
	}
}

// The queue state of a deleted endpoint goes once it holds nothing; its
// idle worker identities (with their keys) go first.
func TestPruneEndpoints(t *testing.T) {
	h := newHarness(t, queue.Config{})
	id := h.submit(`{}`)
	none := func(string) bool { return false }
	reg, err := h.q.RegisterWorker(ep, true)
	if err != nil {
		t.Fatal(err)
	}
	h.q.Ping(ep, "opkey", nil)
	if got := h.q.ForgetWorkersOf(func(string) bool { return true }); got != 0 {
		t.Fatalf("forgot %d workers of a live endpoint", got)
	}
	if got := h.q.ForgetWorkersOf(none); got != 2 {
		t.Fatalf("forgot %d workers of a deleted endpoint, want 2", got)
	}
	if _, _, ok := h.q.AuthWorker(reg.Key); ok {
		t.Fatal("a deleted endpoint's worker key still works")
	}
	if got := h.q.PruneEndpoints(none); got != 0 {
		t.Fatalf("pruned %d with a queued job", got)
	}
	if _, err := h.q.Cancel(ep, id); err != nil {
		t.Fatal(err)
	}
	if got := h.q.PruneEndpoints(none); got != 0 {
		t.Fatalf("pruned %d with a retained result", got)
	}
	h.clock.Advance(31 * time.Minute)
	waitFor(t, "the result to go", func() bool { _, err := h.status(id); return err != nil })
	if got := h.q.PruneEndpoints(func(string) bool { return true }); got != 0 {
		t.Fatalf("pruned %d live endpoints", got)
	}
	if got := h.q.PruneEndpoints(none); got != 1 {
		t.Fatalf("pruned %d, want the empty deleted endpoint", got)
	}
}
