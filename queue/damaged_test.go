package queue_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

// A queued job whose stored record is damaged (one byte of its input
// changed after a clean stop) can be neither run nor shown: whether the
// background check finds it first (RecordDamaged, as app wires it) or a
// worker's take does, it leaves the queue and the counts, its status names
// the damage (every time, not a 404 after the first), the list leaves it
// out and counts it, and the other jobs run.
func TestDamagedJobLeavesQueueAndSaysSo(t *testing.T) {
	for _, foundBy := range []string{"background check", "take"} {
		t.Run(foundBy, func(t *testing.T) {
			h := newHarness(t, queue.Config{})
			a, bad, c := h.submit(`{"n":111}`), h.submit(`{"n":222}`), h.submit(`{"n":333}`)
			h.close()
			raw, err := os.ReadFile(h.path)
			if err != nil {
				t.Fatal(err)
			}
			at := bytes.Index(raw, []byte(`{"n":222}`))
			if at < 0 {
				t.Fatal("input not found in the file")
			}
			f, _ := os.OpenFile(h.path, os.O_WRONLY, 0)
			f.WriteAt([]byte("3"), int64(at+7))
			f.Close()
			h.open()
			if foundBy == "background check" {
				h.q.RecordDamaged(bad, &store.DamagedError{Bucket: store.Jobs, Key: bad, Why: "checksum mismatch"})
				if v := h.q.Queue(ep); v.InQueue != 2 || v.Damaged != 1 {
					t.Fatalf("queue view %+v, want 2 queued and 1 damaged", v)
				}
			}
			for _, want := range []string{a, c} {
				if got := h.take("w1"); got.ID != want {
					t.Fatalf("took %s, want %s (the damaged job is skipped)", got.ID, want)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if js, _ := h.q.Take(ctx, ep, "w2", 1); len(js) != 0 {
				t.Fatalf("the damaged job was handed out: %+v", js)
			}
			for range 2 {
				if _, err := h.status(bad); !errors.Is(err, store.ErrDamaged) {
					t.Fatalf("status of the damaged job: %v, want ErrDamaged", err)
				}
			}
			list, damaged := h.q.Jobs(ep, queue.JobFilter{})
			if len(list) != 2 || damaged != 1 {
				t.Fatalf("list of %d jobs, %d damaged; want 2 and 1", len(list), damaged)
			}
			if v := h.q.Queue(ep); v.InQueue != 0 || v.InProgress != 2 || v.Damaged != 1 {
				t.Fatalf("queue view %+v", v)
			}
		})
	}
}
