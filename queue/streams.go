package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"berth/store"
)

// Stream buffers: the chunks a running job streams (job-stream) wait here
// until a /stream call drains them. Nothing else bounds them (a client may
// never come), so a job's unread chunks are capped at StreamBufferPerJob
// and all jobs' together at StreamBufferTotal. A chunk that would pass a
// cap is dropped: job-stream answers {"accepted": false} (200, so the SDK
// does not retry it), the first drop of each job is logged, and every one
// is counted (StreamStats, on /metrics). A reader that drains the buffer
// makes room again; the job's result (job-done) is never affected. Unread
// chunks of a finished job stay until its result goes (retention or ttl).

type streamBuf struct {
	chunks  []json.RawMessage
	bytes   int
	dropped int
}

// StreamStats are the stream buffers' figures.
type StreamStats struct {
	BufferedBytes int    // unread chunks held, all jobs
	Dropped       uint64 // chunks dropped since start (a buffer was full)
}

// StreamStats returns the stream buffers' figures.
func (s *Service) StreamStats() StreamStats {
	s.mu.Lock()
	defer s.unlock()
	return StreamStats{BufferedBytes: s.streamed, Dropped: s.streamDropped}
}

// streamLocked is a copy of the job's unread chunks (a peek).
func (s *Service) streamLocked(id string) []json.RawMessage {
	if b := s.streams[id]; b != nil {
		return slices.Clone(b.chunks)
	}
	return nil
}

// takeStreamLocked drains the job's unread chunks.
func (s *Service) takeStreamLocked(id string) []json.RawMessage {
	b := s.streams[id]
	if b == nil {
		return nil
	}
	delete(s.streams, id)
	s.streamed -= b.bytes
	return b.chunks
}

func (s *Service) dropStreamLocked(id string) { s.takeStreamLocked(id) }

// StreamChunk appends a streamed output to the job's buffer, split into
// pieces of at most 1 MB. It reports false for a job the worker does not
// hold, and for a chunk dropped because a buffer is full.
func (s *Service) StreamChunk(endpointID, workerID, jobID string, body []byte) (bool, error) {
	var m struct {
		Output json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return false, fmt.Errorf("job-stream body must be a JSON object: %w", err)
	}
	pieces := splitChunk(m.Output) // encoded before taking the lock
	size := 0
	for _, c := range pieces {
		size += len(c)
	}
	s.mu.Lock()
	defer s.unlock()
	s.seenLocked(endpointID, workerID)
	j := s.jobs[jobID]
	if j == nil || j.rec.EndpointID != endpointID || j.rec.Status != store.InProgress || j.rec.WorkerID != workerID {
		return false, nil
	}
	b := s.streams[jobID]
	if b == nil {
		b = &streamBuf{}
		s.streams[jobID] = b
	}
	if b.bytes+size > s.cfg.StreamBufferPerJob || s.streamed+size > s.cfg.StreamBufferTotal {
		if b.dropped == 0 {
			s.logLocked().Warn("stream buffer full: dropping chunks until a /stream call reads them",
				"endpoint", endpointID, "job", jobID, "worker", workerID, "buffered", b.bytes, "allBuffered", s.streamed)
		}
		b.dropped++
		s.streamDropped++
		if len(b.chunks) == 0 {
			delete(s.streams, jobID)
		}
		return false, nil
	}
	b.chunks = append(b.chunks, pieces...)
	b.bytes += size
	s.streamed += size
	j.changedLocked()
	return true, nil
}

// Stream drains the chunks buffered so far, waiting up to wait while there
// are none and the job is not finished.
func (s *Service) Stream(ctx context.Context, endpointID, id string, wait time.Duration) (StreamResponse, error) {
	timer := s.hold(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		s.awaitIndexLocked(id)
		if s.jobs[id] == nil {
			if q := s.entryLocked(endpointID, id); q != nil && q.fin != 0 {
				// Finished: what is left, with the final status.
				chunks := s.takeStreamLocked(id)
				s.unlock()
				var r StreamResponse
				err := s.peek(endpointID, id, func(j *job, _ []json.RawMessage) { r = streamResponse(j, chunks) })
				return r, err
			}
		}
		s.unlock()
		j, err := s.lockJob(endpointID, id)
		if err != nil {
			s.unlock()
			return StreamResponse{}, err
		}
		if chunks := s.takeStreamLocked(id); len(chunks) > 0 || j.rec.Status.Terminal() {
			r := streamResponse(j, chunks)
			s.unlock()
			return r, nil
		}
		st := j.rec.Status
		ch := j.changed
		s.unlock()
		select {
		case <-ch:
			continue
		case <-timer.C():
		case <-ctx.Done():
		case <-s.stopCh:
		}
		return StreamResponse{ID: id, Status: st, Stream: []json.RawMessage{}}, nil
	}
}

func streamResponse(j *job, chunks []json.RawMessage) StreamResponse {
	r := StreamResponse{ID: j.rec.ID, Status: j.rec.Status, Stream: chunks}
	if r.Stream == nil {
		r.Stream = []json.RawMessage{}
	}
	if j.rec.Error != "" {
		e := j.rec.Error
		r.Error = &e
	}
	return r
}

// splitChunk wraps a streamed value as {"output": v}; a value whose JSON is
// over 1 MB is sent as consecutive string pieces of its text (a string value
// is split as the string itself) so concatenating them restores it.
func splitChunk(out json.RawMessage) []json.RawMessage {
	if out == nil {
		out = json.RawMessage("null")
	}
	wrap := func(v json.RawMessage) json.RawMessage {
		// v is valid JSON (decoded from the body): no re-encoding.
		b := make([]byte, 0, len(v)+11)
		b = append(b, `{"output":`...)
		b = append(b, v...)
		return append(b, '}')
	}
	if len(out) <= MaxStreamChunk {
		return []json.RawMessage{wrap(out)}
	}
	var text string
	if json.Unmarshal(out, &text) != nil {
		text = string(out)
	}
	var res []json.RawMessage
	for len(text) > 0 {
		n := MaxStreamChunk / 2 // leaves room for JSON escaping
		if n > len(text) {
			n = len(text)
		}
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		piece, _ := json.Marshal(text[:n])
		res = append(res, wrap(piece))
		text = text[n:]
	}
	return res
}
