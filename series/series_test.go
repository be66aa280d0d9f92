package series

import (
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/jonboulle/clockwork"

	"berth/store"
)

// t0 is on a day-bucket boundary, so the hour and day buckets start there.
var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func newAt(t0 time.Time) (*Series, *clockwork.FakeClock) {
	clk := clockwork.NewFakeClockAt(t0)
	return New(Config{Clock: clk}), clk
}

func last(v View) Bucket { return v.Buckets[len(v.Buckets)-1] }

func TestParseWindow(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Window
		err  bool
	}{{"", Hour, false}, {"hour", Hour, false}, {"day", Day, false}, {"week", "", true}, {"HOUR", "", true}} {
		got, err := ParseWindow(c.in)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("ParseWindow(%q) = %q, %v", c.in, got, err)
		}
	}
}

// Outcomes count in the bucket of the moment they happen; the view is the
// window's fixed number of buckets ending with the current one.
func TestOutcomesAndRollover(t *testing.T) {
	s, clk := newAt(t0)
	s.JobEnded("ep", store.Completed, true, time.Millisecond, time.Second)
	s.JobEnded("ep", store.Completed, true, time.Millisecond, time.Second)
	s.JobEnded("ep", store.Failed, true, time.Millisecond, time.Second)
	s.JobEnded("ep", store.Cancelled, false, 0, 0)
	s.JobEnded("ep", store.InProgress, false, 0, 0) // not an outcome
	clk.Advance(time.Minute)
	s.JobEnded("ep", store.TimedOut, true, time.Millisecond, time.Second)
	s.ColdStart("ep")

	h := s.View("ep", Hour)
	if len(h.Buckets) != HourBuckets || h.BucketSeconds != 60 || h.Window != Hour {
		t.Fatalf("hour view: %d buckets of %ds", len(h.Buckets), h.BucketSeconds)
	}
	prev, cur := h.Buckets[HourBuckets-2], last(h)
	if !cur.Start.Equal(t0.Add(time.Minute)) || !prev.Start.Equal(t0) {
		t.Fatalf("bucket starts %v, %v", prev.Start, cur.Start)
	}
	if prev.Completed != 2 || prev.Failed != 1 || prev.Cancelled != 1 || prev.TimedOut != 0 || prev.ColdStarts != 0 {
		t.Errorf("previous minute: %+v", prev)
	}
	if cur.TimedOut != 1 || cur.Completed != 0 || cur.ColdStarts != 1 {
		t.Errorf("current minute: %+v", cur)
	}
	d := s.View("ep", Day)
	if len(d.Buckets) != DayBuckets || d.BucketSeconds != 300 {
		t.Fatalf("day view: %d buckets of %ds", len(d.Buckets), d.BucketSeconds)
	}
	if b := last(d); !b.Start.Equal(t0) || b.Completed != 2 || b.Failed != 1 || b.TimedOut != 1 || b.Cancelled != 1 || b.ColdStarts != 1 {
		t.Errorf("day bucket: %+v", b)
	}
	// An hour later the minute buckets have gone round: the old ones are
	// empty, not shown again; the day still has them.
	clk.Advance(time.Hour)
	for _, b := range s.View("ep", Hour).Buckets {
		if b.Completed+b.Failed+b.TimedOut+b.Cancelled+b.ColdStarts != 0 {
			t.Fatalf("an hour later the hour shows %+v", b)
		}
	}
	var n int
	for _, b := range s.View("ep", Day).Buckets {
		n += b.Completed + b.Failed + b.TimedOut + b.Cancelled
	}
	if n != 5 {
		t.Errorf("the day counts %d jobs, want 5", n)
	}
	// A day later the day is empty too.
	clk.Advance(24 * time.Hour)
	for _, b := range s.View("ep", Day).Buckets {
		if b.Completed != 0 {
			t.Fatalf("a day later: %+v", b)
		}
	}
	// An endpoint without rings: empty buckets, same shape.
	if v := s.View("other", Hour); len(v.Buckets) != HourBuckets || last(v).Completed != 0 || last(v).QueueDepth != nil {
		t.Errorf("unknown endpoint: %+v", last(v))
	}
}

// Samples: the largest queue depth and the last workers of each bucket;
// a bucket without a sample has neither.
func TestSamples(t *testing.T) {
	s, clk := newAt(t0)
	s.Record("idle", Sample{}) // makes no rings
	if s.Len() != 0 {
		t.Fatalf("a zero sample made rings")
	}
	for _, smp := range []Sample{
		{QueueDepth: 3, Workers: Workers{Initializing: 2}},
		{QueueDepth: 7, Workers: Workers{Running: 1, Initializing: 1}},
		{QueueDepth: 1, Workers: Workers{Running: 2, Idle: 1}},
	} {
		s.Record("ep", smp)
		clk.Advance(10 * time.Second)
	}
	b := last(s.View("ep", Hour))
	if b.QueueDepth == nil || *b.QueueDepth != 7 || b.Workers == nil || *b.Workers != (Workers{Running: 2, Idle: 1}) {
		t.Fatalf("bucket: %+v %+v", b.QueueDepth, b.Workers)
	}
	clk.Advance(2 * time.Minute)
	s.Record("ep", Sample{}) // now recorded: the endpoint has rings
	h := s.View("ep", Hour)
	if b := last(h); b.QueueDepth == nil || *b.QueueDepth != 0 || *b.Workers != (Workers{}) {
		t.Errorf("zero sample: %+v", b)
	}
	if b := h.Buckets[HourBuckets-2]; b.QueueDepth != nil {
		t.Errorf("a minute without a sample shows %d", *b.QueueDepth)
	}
	if b := h.Buckets[0]; b.QueueDepth != nil || b.Workers != nil {
		t.Errorf("before the first sample: %+v", b)
	}
}

// Percentiles, open bucket and closed, within the documented precision.
func TestPercentiles(t *testing.T) {
	for _, c := range []struct {
		name     string
		delays   func(i int) time.Duration // i in [1, 100]
		p50, p95 float64                   // ms
	}{
		{"linear ms", func(i int) time.Duration { return time.Duration(i) * time.Millisecond }, 50, 95},
		{"constant 2s", func(int) time.Duration { return 2 * time.Second }, 2000, 2000},
		{"sub-millisecond", func(i int) time.Duration { return time.Duration(i) * 5 * time.Microsecond }, .25, .475},
		{"one slow in ten", func(i int) time.Duration {
			if i%10 == 0 {
				return 10 * time.Minute
			}
			return 40 * time.Millisecond
		}, 40, 600000},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, clk := newAt(t0)
			for i := 1; i <= 100; i++ {
				s.JobEnded("ep", store.Completed, true, c.delays(i), 2*c.delays(i))
			}
			check := func(when string, b Bucket) {
				t.Helper()
				if b.DelayMs == nil || b.ExecutionMs == nil {
					t.Fatalf("%s: no latencies", when)
				}
				for _, p := range []struct {
					name      string
					got, want float64
				}{{"delay p50", b.DelayMs.P50, c.p50}, {"delay p95", b.DelayMs.P95, c.p95},
					{"execution p50", b.ExecutionMs.P50, 2 * c.p50}, {"execution p95", b.ExecutionMs.P95, 2 * c.p95}} {
					if math.Abs(p.got-p.want) > p.want*Precision {
						t.Errorf("%s: %s = %v ms, want %v ± %.1f%%", when, p.name, p.got, p.want, Precision*100)
					}
				}
			}
			check("open", last(s.View("ep", Hour)))
			clk.Advance(time.Minute)
			s.JobEnded("ep", store.Cancelled, false, 0, 0) // closes the minute
			h := s.View("ep", Hour)
			check("closed", h.Buckets[HourBuckets-2])
			if last(h).DelayMs != nil {
				t.Errorf("a minute with only a job never taken has latencies: %+v", last(h).DelayMs)
			}
			check("day", last(s.View("ep", Day)))
		})
	}
}

// The bounds: a fixed size per endpoint, and at most MaxEndpoints.
func TestBounds(t *testing.T) {
	if sz := unsafe.Sizeof(slot{}); sz != 64 {
		t.Errorf("a bucket is %d bytes, documented as 64", sz)
	}
	if per := EndpointBytes; per > 30<<10 {
		t.Errorf("an endpoint's rings take %d bytes, documented under 30 KiB", per)
	}
	s := New(Config{Clock: clockwork.NewFakeClockAt(t0), MaxEndpoints: 3})
	for _, id := range []string{"a", "b", "c", "d"} {
		s.ColdStart(id)
	}
	if s.Len() != 3 || last(s.View("d", Hour)).ColdStarts != 0 {
		t.Errorf("%d endpoints with rings, want 3; d: %+v", s.Len(), last(s.View("d", Hour)))
	}
	// Days of events keep one ring's worth of buckets.
	clk := clockwork.NewFakeClockAt(t0)
	s = New(Config{Clock: clk})
	for range 3 * 24 * 60 {
		s.JobEnded("ep", store.Completed, true, time.Second, time.Second)
		clk.Advance(time.Minute)
	}
	r := s.eps["ep"]
	if len(r.hour.slots) != HourBuckets || len(r.day.slots) != DayBuckets {
		t.Errorf("rings grew: %d, %d", len(r.hour.slots), len(r.day.slots))
	}
	if got := s.Prune(func(id string) bool { return id != "ep" }); got != 1 || s.Len() != 0 {
		t.Errorf("prune removed %d, %d left", got, s.Len())
	}
}

// The sampler reads every endpoint at once and then every SampleEvery.
func TestSampler(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	depth := make(chan int, 1)
	depth <- 4
	s := New(Config{Clock: clk, SampleEvery: 10 * time.Second,
		Endpoints: func() []string { return []string{"ep"} },
		Sample: func(string) Sample {
			d := <-depth
			return Sample{QueueDepth: d, Workers: Workers{Idle: 1}}
		}})
	s.Start()
	defer s.Stop()
	waitFor := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			if b := last(s.View("ep", Hour)); b.QueueDepth != nil && *b.QueueDepth == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no sample of depth %d", want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(4)
	if err := clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	depth <- 9
	clk.Advance(10 * time.Second)
	waitFor(9)
}
