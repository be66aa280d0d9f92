package runtime_test

import (
	"slices"
	"testing"
	"time"

	"berth/store"
)

// BenchmarkColdStart measures, on an endpoint with no worker (a fresh one
// each iteration, so nothing is warm), the time from POST /run to the
// handler starting (the job's delayTime: queued until a worker took it),
// and to the result being stored. The image is local.
//
//	BERTH_REQUIRE_DOCKER=1 go test -run '^$' -bench ColdStart -benchtime 20x ./runtime/
func BenchmarkColdStart(b *testing.B) {
	e := newEnv(b)
	s := e.start()
	tm := e.putTemplate(nil)
	var delays, totals []time.Duration
	b.ResetTimer()
	for range b.N {
		ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.WorkersMax = 1 })
		t0 := time.Now()
		id := e.run(ep.ID, `{"echo": 1}`)
		r := e.wait(ep.ID, id)
		totals = append(totals, time.Since(t0))
		if r.Status != store.Completed || r.DelayTime == nil {
			b.Fatalf("job %+v", r)
		}
		delays = append(delays, time.Duration(*r.DelayTime)*time.Millisecond)

		b.StopTimer()
		e.deleteEndpoint(ep.ID)
		s.Notify("")
		e.eventually("the worker removed", func() bool { return len(e.containers("")) == 0 })
		b.StartTimer()
	}
	b.StopTimer()
	pct := func(ds []time.Duration, p float64) float64 {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		i := int(float64(len(ds)-1) * p)
		return float64(ds[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(delays, 0.5), "p50-ms")
	b.ReportMetric(pct(delays, 0.99), "p99-ms")
	b.ReportMetric(pct(totals, 0.5), "result-p50-ms")
	b.ReportMetric(pct(totals, 0.99), "result-p99-ms")
	b.ReportMetric(0, "ns/op")
}
