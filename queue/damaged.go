package queue

import (
	"errors"
	"fmt"

	"berth/store"
)

// Damaged job records. A job whose stored record (or input, or index
// entry) fails its checksum cannot be run or shown: it is dropped from the
// queue and remembered here, so its own reads keep failing with the damage
// named (not a 404 that hides it) and the endpoint's list and queue view
// say how many jobs they leave out. Berth never rewrites a damaged record;
// 'berth check --repair' sets it aside.

// maxDamaged bounds the jobs remembered as damaged (a file damaged that
// widely is refused at start-up anyway, see store.Open).
const maxDamaged = 10000

type damagedJob struct {
	ep  string // "" when the damaged index entry hid it
	err error
}

// damagedErr is what a read of a damaged job answers.
func damagedErr(err error) error {
	if errors.Is(err, store.ErrDamaged) {
		return fmt.Errorf("load job: %w", err)
	}
	return fmt.Errorf("load job: %w", &store.DamagedError{Bucket: store.Jobs, Key: "?", Why: err.Error()})
}

// noteDamagedLocked remembers a damaged job and logs it once.
func (s *Service) noteDamagedLocked(ep, id string, err error) {
	if _, ok := s.damaged[id]; ok || len(s.damaged) >= maxDamaged {
		return
	}
	if s.damaged == nil {
		s.damaged = map[string]damagedJob{}
	}
	s.damaged[id] = damagedJob{ep: ep, err: err}
	shown := ep
	if shown == "" {
		shown = "unknown" // its index entry, which names it, is the damaged record
	}
	s.logLocked().Error("job record damaged: the job is left out of the queue, lists and counts", "endpoint", shown, "job", id, "err", err)
}

// missingLocked is the error for a job that is not in memory: the damage
// when its record is known to be damaged, else ErrNotFound.
func (s *Service) missingLocked(endpointID, id string) error {
	if d, ok := s.damaged[id]; ok && (d.ep == "" || d.ep == endpointID) {
		return damagedErr(d.err)
	}
	return ErrNotFound
}

// damagedCountLocked is how many of the endpoint's jobs are left out as
// damaged.
func (s *Service) damagedCountLocked(endpointID string) int {
	n := 0
	for _, d := range s.damaged {
		if d.ep == endpointID {
			n++
		}
	}
	return n
}

// RecordDamaged drops a job whose stored record the background check found
// damaged (its bucket's key is the job id): kept only as an entry (queued
// cold, or finished), it could be neither run nor shown. A job loaded in
// memory is left alone: its next write replaces the record.
func (s *Service) RecordDamaged(id string, err error) {
	s.mu.Lock()
	s.awaitIndexLocked(id)
	defer s.unlock()
	if s.jobs[id] != nil {
		return
	}
	if q := s.cold[id]; q != nil {
		s.noteDamagedLocked(q.ep.id, id, err)
		s.dropColdLocked(q)
		return
	}
	for _, ep := range s.endpoints {
		if q := ep.done[id]; q != nil {
			s.noteDamagedLocked(ep.id, id, err)
			s.dropDoneLocked(q)
			return
		}
	}
	s.noteDamagedLocked("", id, err)
}
