package queue

import (
	"encoding/json"
	"errors"
	"slices"
	"time"

	"berth/store"
)

// Read-only views of an endpoint's jobs for the dashboard and the /v1 job
// list: nothing here changes a job, drains a stream or resets a timer.

// JobView is one retained job as the dashboard shows it.
type JobView struct {
	StatusResponse
	Input       json.RawMessage `json:"input,omitempty"` // kept after the job ends, unlike /status
	CreatedAt   time.Time       `json:"createdAt"`
	StartedAt   *time.Time      `json:"startedAt,omitempty"`
	CompletedAt *time.Time      `json:"completedAt,omitempty"`
	LowPriority bool            `json:"lowPriority,omitempty"`
	// ResultExpired: the job is gone (its result's retention ended) and
	// only its id, status, times and worker are still known (recent.go).
	ResultExpired bool `json:"resultExpired,omitempty"`
	// DataOmitted: the list's JobFilter.MaxBytes was reached; the job's
	// input, output and error are left out (GET the job for them).
	DataOmitted bool `json:"dataOmitted,omitempty"`
	// Stream is the chunks a running streaming job has produced that no
	// /stream call has read yet (peeked, not drained). Only on Job.
	Stream []json.RawMessage `json:"stream,omitempty"`
}

// JobFilter narrows Jobs. Zero values: every status, Limit 50, no
// MaxBytes.
type JobFilter struct {
	Statuses []store.JobStatus
	Limit    int
	// MaxBytes bounds the inputs, outputs and errors a list carries: past
	// it, jobs come without them (DataOmitted), so a list of large jobs
	// costs at most this much memory, whatever its Limit.
	MaxBytes int
}

// QueueView is an endpoint's queue at a glance.
type QueueView struct {
	InQueue    int `json:"inQueue"`
	InProgress int `json:"inProgress"`
	// OldestQueuedAt is when the job at the head of the queue was queued
	// (requeued jobs keep their first time); nil when the queue is empty.
	OldestQueuedAt *time.Time `json:"oldestQueuedAt,omitempty"`
	// OldestWaitMs is how long that job has waited so far.
	OldestWaitMs int64 `json:"oldestWaitMs"`
	// Damaged (Berth) counts the endpoint's jobs left out of the queue,
	// lists and counts because their stored record is damaged.
	Damaged int `json:"damaged,omitempty"`
}

func jobView(j *job, now time.Time) JobView {
	v := JobView{StatusResponse: view(j, now), Input: j.input, CreatedAt: j.rec.CreatedAt, LowPriority: j.rec.LowPriority}
	v.StatusResponse.Input = nil
	if t := j.rec.StartedAt; !t.IsZero() {
		v.StartedAt = &t
	}
	if t := j.rec.CompletedAt; !t.IsZero() {
		v.CompletedAt = &t
	}
	return v
}

// Jobs lists an endpoint's retained jobs, newest first. Jobs kept only as
// entries (queued nobody looked at, finished) are read from the store with
// the lock released. damaged is how many of the endpoint's jobs are left
// out because their stored record is damaged.
func (s *Service) Jobs(endpointID string, f JobFilter) (list []JobView, damaged int) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	want := func(st store.JobStatus) bool { return len(f.Statuses) == 0 || slices.Contains(f.Statuses, st) }
	type item struct {
		seq     uint64
		created time.Time
		v       JobView
	}
	var items []item
	var entries []*qent
	var pend []*qextra // the final records of entries not on disk yet
	s.mu.Lock()
	now := s.clock.Now()
	for _, j := range s.jobs {
		if j.rec.EndpointID == endpointID && want(j.rec.Status) {
			items = append(items, item{j.rec.Seq, j.rec.CreatedAt, jobView(j, now)})
		}
	}
	if ep := s.endpoints[endpointID]; ep != nil {
		if want(store.InQueue) {
			// Queued entries: the newest are at the back.
			n := 0
			ep.fifo.eachBack(func(q *qent) bool {
				if q.j == nil {
					entries = append(entries, q)
					n++
				}
				return n < f.Limit
			})
		}
		var done []*qent
		for _, q := range ep.done {
			if want(finStatus[q.fin]) {
				done = append(done, q)
			}
		}
		slices.SortFunc(done, func(a, b *qent) int { return cmpSeq(b.seq, a.seq) })
		entries = append(entries, done[:min(len(done), f.Limit)]...)
		for _, v := range s.expiredRecentLocked(ep) {
			if want(v.Status) {
				items = append(items, item{0, v.CreatedAt, v})
			}
		}
	}
	for _, q := range entries {
		var x *qextra
		if q.x != nil && q.x.rec != nil {
			x = &qextra{rec: q.x.rec, input: q.x.input}
		}
		pend = append(pend, x)
	}
	s.unlock()
	type bad struct {
		q   *qent
		err error
	}
	var bads []bad
	size := 0 // data read from the store so far
	for i, q := range entries {
		var j *job
		if x := pend[i]; x != nil {
			j = &job{rec: *x.rec, input: x.input}
		} else {
			rec, input, err := s.st.LoadJob(q.id)
			if errors.Is(err, store.ErrDamaged) {
				bads = append(bads, bad{q, err})
				continue
			}
			if err != nil {
				continue // taken, finished or removed meanwhile: it is missed once
			}
			j = &job{rec: rec, input: input}
		}
		if want(j.rec.Status) {
			v := jobView(j, now)
			if f.MaxBytes > 0 {
				if size += dataSize(v); size > f.MaxBytes {
					omitData(&v) // not kept: the memory a list holds stays bounded
				}
			}
			items = append(items, item{j.rec.Seq, j.rec.CreatedAt, v})
		}
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		return cmpSeq(b.seq, a.seq)
	})
	s.mu.Lock()
	for _, b := range bads {
		if s.entryStillLocked(b.q) {
			s.unreadableLocked(b.q, b.err)
		}
	}
	damaged = s.damagedCountLocked(endpointID)
	s.unlock()
	// A job read from the store may also be loaded by now: once each.
	seen := map[string]bool{}
	out := make([]JobView, 0, min(len(items), f.Limit))
	for _, it := range items {
		if len(out) == f.Limit {
			break
		}
		if !seen[it.v.ID] {
			seen[it.v.ID] = true
			out = append(out, it.v)
		}
	}
	if f.MaxBytes > 0 {
		// The newest jobs keep their data, up to the bound.
		size = 0
		for i := range out {
			if size += dataSize(out[i]); size > f.MaxBytes {
				omitData(&out[i])
			}
		}
	}
	return out, damaged
}

func dataSize(v JobView) int {
	n := len(v.Input) + len(v.Output)
	if v.Error != nil {
		n += len(*v.Error)
	}
	return n
}

func omitData(v *JobView) {
	if dataSize(*v) > 0 {
		v.Input, v.Output, v.Error, v.DataOmitted = nil, nil, nil, true
	}
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Job is one job's view with the stream chunks not yet read.
func (s *Service) Job(endpointID, id string) (JobView, error) {
	var v JobView
	now := s.clock.Now()
	err := s.peek(endpointID, id, func(j *job, chunks []json.RawMessage) {
		v = jobView(j, now)
		v.Stream = chunks
	})
	return v, err
}

// Queue is the endpoint's queue depth and the age of its oldest job.
func (s *Service) Queue(endpointID string) QueueView {
	s.mu.Lock()
	defer s.unlock()
	var v QueueView
	v.Damaged = s.damagedCountLocked(endpointID)
	ep := s.endpoints[endpointID]
	if ep == nil {
		return v
	}
	v.InQueue, v.InProgress = ep.fifo.len(), ep.inProgress
	if q := ep.fifo.front(); q != nil {
		t := time.Unix(0, q.queuedAt).UTC()
		if q.j != nil {
			t = q.j.rec.QueuedAt
		}
		v.OldestQueuedAt = &t
		v.OldestWaitMs = *ms(s.clock.Now().Sub(t))
	}
	return v
}
