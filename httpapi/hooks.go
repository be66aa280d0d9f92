package httpapi

import (
	"encoding/json"
	"errors"

	"berth/queue"
	"berth/store"
)

// mgmt's hooks: an endpoint created, changed or deleted through any
// surface drops the job API's cached copy and tells the runtime.

// EndpointChanged is mgmt's hook for a created or changed endpoint.
func (s *Server) EndpointChanged(id string) {
	s.forgetEndpoint(id)
	if s.cfg.EndpointChanged != nil {
		s.cfg.EndpointChanged(id)
	}
}

// EndpointDeleted is mgmt's hook for a deleted endpoint: its jobs are
// cancelled, then the runtime is told.
func (s *Server) EndpointDeleted(id string) {
	s.forgetEndpoint(id)
	if err := s.cancelEndpointJobs(id); err != nil {
		s.cfg.Logger.Error("cancel jobs of deleted endpoint", "endpoint", id, "err", err)
	}
	if s.cfg.EndpointDeleted != nil {
		s.cfg.EndpointDeleted(id)
	}
}

// cancelEndpointJobs cancels every unfinished job of an endpoint.
func (s *Server) cancelEndpointJobs(id string) error {
	type jobState struct {
		ID         string          `json:"id"`
		EndpointID string          `json:"endpointId"`
		Status     store.JobStatus `json:"status"`
	}
	var ids []string
	err := s.cfg.Store.Scan(store.Jobs, func(_ string, raw []byte) error {
		var j jobState
		if json.Unmarshal(raw, &j) == nil && j.EndpointID == id && !j.Status.Terminal() {
			ids = append(ids, j.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var firstErr error
	for _, jid := range ids {
		if _, err := s.cfg.Queue.Cancel(id, jid); err != nil && !errors.Is(err, queue.ErrNotFound) && firstErr == nil {
			firstErr = err
		}
	}
	// A job submitted while the endpoint was being deleted: still queued.
	if _, err := s.cfg.Queue.Purge(id); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}
