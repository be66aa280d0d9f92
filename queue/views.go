package queue

import (
	"encoding/json"
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
	// Stream is the chunks a running streaming job has produced that no
	// /stream call has read yet (peeked, not drained). Only on Job.
	Stream []json.RawMessage `json:"stream,omitempty"`
}

// JobFilter narrows Jobs. Zero values: every status, Limit 50.
type JobFilter struct {
	Statuses []store.JobStatus
	Limit    int
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
}

func (s *Service) jobViewLocked(j *job) JobView {
	v := JobView{StatusResponse: s.viewLocked(j), Input: j.input, CreatedAt: j.rec.CreatedAt, LowPriority: j.rec.LowPriority}
	v.StatusResponse.Input = nil
	if t := j.rec.StartedAt; !t.IsZero() {
		v.StartedAt = &t
	}
	if t := j.rec.CompletedAt; !t.IsZero() {
		v.CompletedAt = &t
	}
	return v
}

// Jobs lists an endpoint's retained jobs, newest first.
func (s *Service) Jobs(endpointID string, f JobFilter) []JobView {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want := func(st store.JobStatus) bool { return len(f.Statuses) == 0 || slices.Contains(f.Statuses, st) }
	var js []*job
	for _, j := range s.jobs {
		if j.rec.EndpointID == endpointID && want(j.rec.Status) {
			js = append(js, j)
		}
	}
	// Queued jobs kept only as queue entries: the newest are at the back.
	if ep := s.endpoints[endpointID]; ep != nil && want(store.InQueue) {
		n := 0
		ep.fifo.eachBack(func(q *qent) bool {
			if q.j == nil {
				if j, err := s.readLocked(q); err == nil {
					js = append(js, j)
					n++
				}
			}
			return n < f.Limit
		})
	}
	slices.SortFunc(js, func(a, b *job) int {
		if c := b.rec.CreatedAt.Compare(a.rec.CreatedAt); c != 0 {
			return c
		}
		return int(int64(b.rec.Seq) - int64(a.rec.Seq))
	})
	out := make([]JobView, 0, min(len(js), f.Limit))
	for _, j := range js[:min(len(js), f.Limit)] {
		out = append(out, s.jobViewLocked(j))
	}
	return out
}

// Job is one job's view with the stream chunks not yet read.
func (s *Service) Job(endpointID, id string) (JobView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.peekLocked(endpointID, id)
	if err != nil {
		return JobView{}, err
	}
	v := s.jobViewLocked(j)
	v.Stream = slices.Clone(j.chunks)
	return v, nil
}

// Queue is the endpoint's queue depth and the age of its oldest job.
func (s *Service) Queue(endpointID string) QueueView {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v QueueView
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
