package series

import (
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/store"
)

// BenchmarkJobEnded is the cost the queue's OnJobEnded hook adds to each
// job's end, over 100 endpoints from parallel goroutines.
func BenchmarkJobEnded(b *testing.B) {
	s := New(Config{Clock: clockwork.NewRealClock()})
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprint("ep", i)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			s.JobEnded(ids[i%len(ids)], store.Completed, true, time.Duration(i)*time.Microsecond, 40*time.Millisecond)
		}
	})
}

// BenchmarkView is one GET …/metrics' work without the HTTP: a full
// window of one endpoint.
func BenchmarkView(b *testing.B) {
	for _, w := range []Window{Hour, Day} {
		b.Run(string(w), func(b *testing.B) {
			clk := clockwork.NewFakeClockAt(t0)
			s := New(Config{Clock: clk})
			for range 24 * 60 {
				s.JobEnded("ep", store.Completed, true, time.Millisecond, time.Second)
				s.Record("ep", Sample{QueueDepth: 2, Workers: Workers{Running: 1}})
				clk.Advance(time.Minute)
			}
			b.ResetTimer()
			for range b.N {
				s.View("ep", w)
			}
		})
	}
}
