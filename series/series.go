// Package series keeps what the dashboard plots for each endpoint: the last
// hour in one-minute buckets and the last day in five-minute buckets of
// jobs ended by outcome, queue depth, delay and execution time (p50, p95),
// workers by state and cold starts.
//
// Memory is fixed per endpoint (EndpointBytes, about 28 KB): two rings of
// fixed length (60 and 288 buckets of 64 bytes), and for each ring the open
// bucket's two latency histograms (329 counters each). A closed bucket keeps its percentiles,
// not its histogram. An endpoint gets its rings at its first job, cold
// start or non-zero sample; at most MaxEndpoints have them. The rings live
// in memory; Snapshot and Restore (persist.go) carry them over a restart.
//
// Percentiles come from log-spaced histograms, eight bins per doubling from
// 1 µs to 2^41 µs (25 days), interpolated linearly inside a bin: an
// estimate is within 9.1% (2^(1/8)-1) of a value of that bin.
package series

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/jonboulle/clockwork"

	"berth/store"
)

// The two windows: their bucket width and count.
const (
	HourWidth   = time.Minute
	HourBuckets = 60
	DayWidth    = 5 * time.Minute
	DayBuckets  = 288
)

// Window names the span of a View.
type Window string

const (
	Hour Window = "hour"
	Day  Window = "day"
)

// ErrWindow is a window other than hour or day.
var ErrWindow = errors.New(`window must be "hour" or "day"`)

// ParseWindow reads a window name; "" is the hour.
func ParseWindow(s string) (Window, error) {
	switch Window(s) {
	case "", Hour:
		return Hour, nil
	case Day:
		return Day, nil
	}
	return "", fmt.Errorf("%w, got %q", ErrWindow, s)
}

// Workers are an endpoint's workers by state at a sample.
type Workers struct {
	Idle         int `json:"idle"`
	Running      int `json:"running"`
	Initializing int `json:"initializing"`
	Throttled    int `json:"throttled"`
	Unhealthy    int `json:"unhealthy"`
	// Frozen: FlashBoot workers paused until a job thaws them.
	Frozen int `json:"frozen"`
}

// Sample is what the sampler reads of an endpoint.
type Sample struct {
	QueueDepth int
	Workers    Workers
}

func (s Sample) zero() bool { return s == Sample{} }

// Percentiles are latencies in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// Bucket is one bucket of a View. QueueDepth (the largest sampled),
// Workers (the last sample) are absent when no sample was taken in it
// (Berth was not running); the latencies when no job that a worker took
// ended in it.
type Bucket struct {
	Start       time.Time    `json:"start"`
	Completed   int          `json:"completed"`
	Failed      int          `json:"failed"`
	TimedOut    int          `json:"timedOut"`
	Cancelled   int          `json:"cancelled"`
	ColdStarts  int          `json:"coldStarts"`
	QueueDepth  *int         `json:"queueDepth,omitempty"`
	Workers     *Workers     `json:"workers,omitempty"`
	DelayMs     *Percentiles `json:"delayMs,omitempty"`
	ExecutionMs *Percentiles `json:"executionMs,omitempty"`
}

// View is a window of an endpoint's series, oldest bucket first; the last
// bucket is the current one, still filling.
type View struct {
	Window        Window   `json:"window"`
	BucketSeconds int      `json:"bucketSeconds"`
	Buckets       []Bucket `json:"buckets"`
}

// Config tunes a Series. Zero values take the defaults in brackets.
type Config struct {
	Clock clockwork.Clock // [real clock]
	// SampleEvery is how often the sampler reads queue depth and workers
	// [10s].
	SampleEvery time.Duration
	// Endpoints lists the endpoints to sample; Sample reads one. Both
	// needed by Start.
	Endpoints func() []string
	Sample    func(endpointID string) Sample
	// MaxEndpoints bounds the endpoints with rings [DefaultMaxEndpoints];
	// past it a new endpoint's data is dropped.
	MaxEndpoints int
}

// DefaultMaxEndpoints is Config.MaxEndpoints' default: 10,000 endpoints'
// rings take about 280 MB.
const DefaultMaxEndpoints = 10000

// Series holds every endpoint's rings.
type Series struct {
	cfg    Config
	mu     sync.Mutex
	eps    map[string]*rings
	cancel context.CancelFunc
	done   chan struct{}
}

// New makes a Series; Start runs its sampler.
func New(cfg Config) *Series {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 10 * time.Second
	}
	if cfg.MaxEndpoints <= 0 {
		cfg.MaxEndpoints = DefaultMaxEndpoints
	}
	return &Series{cfg: cfg, eps: map[string]*rings{}}
}

type rings struct {
	hour, day ring
	dirty     bool // changed since the last Snapshot
}

// get returns an endpoint's rings, making them when create says so and
// the bound allows; nil otherwise. s.mu held.
func (s *Series) get(id string, create bool) *rings {
	r := s.eps[id]
	if r == nil && create && len(s.eps) < s.cfg.MaxEndpoints {
		r = &rings{hour: newRing(HourWidth, HourBuckets), day: newRing(DayWidth, DayBuckets)}
		s.eps[id] = r
	}
	return r
}

// JobEnded records a job's end (queue.Config.OnJobEnded): its outcome, and
// its delay and execution time when a worker took it.
func (s *Series) JobEnded(endpointID string, st store.JobStatus, started bool, delay, execution time.Duration) {
	o := outcome(st)
	if o < 0 {
		return
	}
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.get(endpointID, true)
	if r == nil {
		return
	}
	r.dirty = true
	for _, g := range []*ring{&r.hour, &r.day} {
		sl := g.at(now)
		sl.N[o]++
		if started {
			g.delay.add(delay)
			g.exec.add(execution)
		}
	}
}

func outcome(st store.JobStatus) int {
	switch st {
	case store.Completed:
		return 0
	case store.Failed:
		return 1
	case store.TimedOut:
		return 2
	case store.Cancelled:
		return 3
	}
	return -1
}

// ColdStart records a worker launched for the endpoint (runtime
// Config.OnScale's "start").
func (s *Series) ColdStart(endpointID string) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.get(endpointID, true); r != nil {
		r.dirty = true
		r.hour.at(now).Cold++
		r.day.at(now).Cold++
	}
}

// Record records a sample of the endpoint. An all-zero sample of an
// endpoint without rings makes none.
func (s *Series) Record(endpointID string, smp Sample) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.get(endpointID, !smp.zero())
	if r == nil {
		return
	}
	r.dirty = true
	r.hour.at(now).sample(smp)
	r.day.at(now).sample(smp)
}

// Forget drops an endpoint's rings (it was deleted).
func (s *Series) Forget(endpointID string) {
	s.mu.Lock()
	delete(s.eps, endpointID)
	s.mu.Unlock()
}

// Prune drops the rings of endpoints that no longer exist (live reports
// false): what a job ending after its endpoint's deletion made. It
// returns how many went.
func (s *Series) Prune(live func(endpointID string) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id := range s.eps {
		if !live(id) {
			delete(s.eps, id)
			n++
		}
	}
	return n
}

// Len is how many endpoints have rings.
func (s *Series) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.eps)
}

// View returns a window of the endpoint's series, ending with the bucket
// that holds now (all empty for an endpoint without rings).
func (s *Series) View(endpointID string, w Window) View {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var g *ring
	if r := s.eps[endpointID]; r != nil {
		g = &r.hour
		if w == Day {
			g = &r.day
		}
	}
	width, n := HourWidth, HourBuckets
	if w == Day {
		width, n = DayWidth, DayBuckets
	}
	v := View{Window: w, BucketSeconds: int(width / time.Second), Buckets: make([]Bucket, n)}
	last := now.UnixNano() / int64(width)
	for i := range v.Buckets {
		idx := last - int64(n-1-i)
		b := &v.Buckets[i]
		b.Start = time.Unix(0, idx*int64(width)).UTC()
		if g != nil {
			g.fill(idx, b)
		}
	}
	return v
}

// Start runs the sampler: every SampleEvery it records a Sample of every
// endpoint, the first one at once.
func (s *Series) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	t := s.cfg.Clock.NewTicker(s.cfg.SampleEvery)
	go func() {
		defer close(s.done)
		defer t.Stop()
		for {
			s.sampleAll()
			select {
			case <-ctx.Done():
				return
			case <-t.Chan():
			}
		}
	}()
}

// Stop ends the sampler, waiting for a round in progress.
func (s *Series) Stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
		s.cancel = nil
	}
}

func (s *Series) sampleAll() {
	for _, id := range s.cfg.Endpoints() {
		s.Record(id, s.cfg.Sample(id))
	}
}

// ---- rings ----

// slot is one closed or open bucket: 64 bytes.
type slot struct {
	Idx     int64     // bucket number (Unix time / width); 0: unused
	N       [4]uint32 // completed, failed, timed out, cancelled
	Cold    uint32
	Queue   int32 // largest sampled depth; -1: no sample
	Workers [6]uint16
	Timed   uint32     // jobs with times: the percentiles below are set
	Delay   [2]float32 // p50, p95 in ms, once closed
	Exec    [2]float32
}

func (sl *slot) sample(s Sample) {
	sl.Queue = max(sl.Queue, clamp32(s.QueueDepth))
	w := s.Workers
	sl.Workers = [6]uint16{clamp16(w.Idle), clamp16(w.Running), clamp16(w.Initializing), clamp16(w.Throttled), clamp16(w.Unhealthy), clamp16(w.Frozen)}
}

func clamp32(v int) int32  { return int32(min(max(v, 0), math.MaxInt32)) }
func clamp16(v int) uint16 { return uint16(min(max(v, 0), math.MaxUint16)) }

// ring is a fixed number of buckets of one width, indexed by bucket
// number modulo its length; cur is the open bucket, whose latencies are
// still histograms.
type ring struct {
	width       int64
	slots       []slot
	cur         int64
	delay, exec hist
}

func newRing(width time.Duration, n int) ring {
	return ring{width: int64(width), slots: make([]slot, n)}
}

// at returns the bucket holding t, closing the open one when t is past
// it (a t before it counts in it).
func (g *ring) at(t time.Time) *slot {
	idx := t.UnixNano() / g.width
	if idx > g.cur {
		g.close()
		g.cur = idx
	}
	idx = g.cur
	sl := &g.slots[idx%int64(len(g.slots))]
	if sl.Idx != idx {
		*sl = slot{Idx: idx, Queue: -1}
	}
	return sl
}

// close stores the open bucket's percentiles and empties the histograms.
func (g *ring) close() {
	if g.delay.N == 0 {
		return
	}
	if sl := &g.slots[g.cur%int64(len(g.slots))]; sl.Idx == g.cur {
		sl.Timed = g.delay.N
		sl.Delay = [2]float32{float32(g.delay.quantile(.5)), float32(g.delay.quantile(.95))}
		sl.Exec = [2]float32{float32(g.exec.quantile(.5)), float32(g.exec.quantile(.95))}
	}
	g.delay, g.exec = hist{}, hist{}
}

// fill copies bucket idx into b, if the ring holds it.
func (g *ring) fill(idx int64, b *Bucket) {
	sl := &g.slots[idx%int64(len(g.slots))]
	if sl.Idx != idx {
		return
	}
	b.Completed, b.Failed, b.TimedOut, b.Cancelled = int(sl.N[0]), int(sl.N[1]), int(sl.N[2]), int(sl.N[3])
	b.ColdStarts = int(sl.Cold)
	if sl.Queue >= 0 {
		q := int(sl.Queue)
		b.QueueDepth = &q
		w := sl.Workers
		b.Workers = &Workers{Idle: int(w[0]), Running: int(w[1]), Initializing: int(w[2]), Throttled: int(w[3]), Unhealthy: int(w[4]), Frozen: int(w[5])}
	}
	switch {
	case idx == g.cur && g.delay.N > 0:
		b.DelayMs = &Percentiles{P50: round(g.delay.quantile(.5)), P95: round(g.delay.quantile(.95))}
		b.ExecutionMs = &Percentiles{P50: round(g.exec.quantile(.5)), P95: round(g.exec.quantile(.95))}
	case idx != g.cur && sl.Timed > 0:
		b.DelayMs = &Percentiles{P50: round(float64(sl.Delay[0])), P95: round(float64(sl.Delay[1]))}
		b.ExecutionMs = &Percentiles{P50: round(float64(sl.Exec[0])), P95: round(float64(sl.Exec[1]))}
	}
}

// round keeps a latency to the microsecond.
func round(ms float64) float64 { return math.Round(ms*1000) / 1000 }

// ---- histograms ----

// perOctave bins per doubling, octaves doublings from 1 µs: bin 0 is
// [0, 1 µs), bin k (k ≥ 1) is [2^((k-1)/8), 2^(k/8)) µs, the last bin
// also holding everything longer.
const (
	perOctave = 8
	octaves   = 41
	nbins     = 1 + perOctave*octaves
)

// Precision is the largest relative error of a percentile against a value
// of its bin: one bin's width, 2^(1/8)-1.
var Precision = math.Exp2(1.0/perOctave) - 1

// EndpointBytes is what one endpoint's rings take.
const EndpointBytes = int(unsafe.Sizeof(rings{})) + (HourBuckets+DayBuckets)*int(unsafe.Sizeof(slot{}))

type hist struct {
	N uint32
	C [nbins]uint32
}

func bin(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	return min(1+int(math.Floor(perOctave*math.Log2(us))), nbins-1)
}

// edge is the lower edge of bin k in µs.
func edge(k int) float64 {
	if k == 0 {
		return 0
	}
	return math.Exp2(float64(k-1) / perOctave)
}

func (h *hist) add(d time.Duration) {
	if h.N == math.MaxUint32 {
		return
	}
	h.N++
	h.C[bin(d)]++
}

// quantile estimates the q-quantile in ms: the bin holding rank q·n,
// interpolated linearly between its edges.
func (h *hist) quantile(q float64) float64 {
	if h.N == 0 {
		return 0
	}
	rank := q * float64(h.N)
	cum := 0.0
	for k, c := range h.C {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= rank {
			lo, hi := edge(k), edge(k+1)
			return (lo + (hi-lo)*(rank-cum)/float64(c)) / 1000
		}
		cum += float64(c)
	}
	return edge(nbins) / 1000
}
