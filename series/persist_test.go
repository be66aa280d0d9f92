package series

import (
	"reflect"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/store"
)

// A snapshot restored into a new Series (a restart) shows the same hour
// and day, the open bucket's percentiles included; only endpoints changed
// since the last snapshot are written again.
func TestSnapshotRestore(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	s := New(Config{Clock: clk})
	for i := range 90 {
		s.JobEnded("ep", store.Completed, true, time.Duration(i)*time.Millisecond, time.Second)
		if i%7 == 0 {
			s.JobEnded("ep", store.Failed, true, time.Millisecond, 2*time.Second)
			s.ColdStart("ep")
		}
		s.Record("ep", Sample{QueueDepth: i % 5, Workers: Workers{Running: 1, Idle: i % 3}})
		clk.Advance(40 * time.Second)
	}
	s.ColdStart("other")
	saved := map[string][]byte{}
	save := func(id string, rec []byte) { saved[id] = rec }
	if err := s.Snapshot(false, save); err != nil {
		t.Fatal(err)
	}
	if len(saved) != 2 || len(saved["ep"]) > 16<<10 {
		t.Fatalf("snapshot: %d records, ep's %d bytes", len(saved), len(saved["ep"]))
	}
	t.Logf("an hour of one endpoint: %d bytes", len(saved["ep"]))

	r := New(Config{Clock: clk})
	for id, rec := range saved {
		if err := r.Restore(id, rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []Window{Hour, Day} {
		if got, want := r.View("ep", w), s.View("ep", w); !reflect.DeepEqual(got, want) {
			t.Errorf("%s after restore differs:\n got %+v\nwant %+v", w, last(got), last(want))
		}
	}
	// The restored open bucket closes with its percentiles.
	clk.Advance(time.Minute)
	s.ColdStart("ep")
	r.ColdStart("ep")
	if got, want := r.View("ep", Hour), s.View("ep", Hour); !reflect.DeepEqual(got, want) {
		t.Errorf("after the next minute the views differ")
	}

	clear(saved)
	if err := s.Snapshot(false, save); err != nil || len(saved) != 1 || saved["ep"] == nil {
		t.Errorf("second snapshot: %d records (%v), want ep's only", len(saved), err)
	}
	for _, bad := range []string{`"not base64!"`, `{}`, `"AAAA"`} {
		if err := New(Config{}).Restore("x", []byte(bad)); err == nil {
			t.Errorf("Restore(%s) succeeded", bad)
		}
	}
}
