package httpapi

import (
	"errors"
	"net/http"

	"berth/httpapi/v1api"
	"berth/httpapi/v2api"
	"berth/mgmt"
	"berth/store"
)

// newV1 builds the REST v1 management API (package v1api) over the
// management rules, the queue's views and the runtime hooks.
func (s *Server) newV1() *v1api.API {
	return v1api.New(v1api.Config{
		Mgmt: s.mg, Queue: s.cfg.Queue, Store: s.cfg.Store, Logger: s.cfg.Logger,
		Authorized: func(r *http.Request) bool { return principal(r) != nil }, // authz.go checked the key
		Instrument: s.instrument,
		Workers:    s.workers, EndpointStatus: s.cfg.EndpointStatus, Models: s.cfg.Models, GPUs: s.cfg.GPUs,
		WorkerLogs: s.cfg.WorkerLogs, PodLogs: s.cfg.PodLogs,
		PingInterval: s.cfg.PingInterval, BackupReserve: s.cfg.BackupReserve, JobListBytes: s.cfg.JobListBytes,
		Series: s.cfg.Series, Builds: s.cfg.Builds,
	})
}

// workers is an endpoint's workers as every surface shows them: the
// runtime's containers merged with the queue's view (mgmt.MergeWorkers).
func (s *Server) workers(endpointID string) []mgmt.Worker {
	e, err := s.endpoint(endpointID)
	if err != nil {
		return nil
	}
	var containers []mgmt.WorkerInfo
	if s.cfg.WorkerInfo != nil {
		containers = s.cfg.WorkerInfo(endpointID)
	}
	return mgmt.MergeWorkers(*e, containers, s.cfg.Queue.Workers(endpointID))
}

// newV2 builds the REST v2 management API (package v2api) over the same
// management rules, runtime hooks and key as v1.
func (s *Server) newV2() *v2api.API {
	cfg := v2api.Config{
		Mgmt: s.mg, Store: s.cfg.Store, Logger: s.cfg.Logger, Clock: s.cfg.Clock,
		Authorized: func(r *http.Request) bool { return principal(r) != nil }, // authz.go checked the key
		Instrument: s.instrument,
		Health:     s.health,
		GPUs:       s.cfg.GPUs,
		WorkerLogs: s.cfg.WorkerLogs,
		PodLogs:    s.cfg.PodLogs,
		Builds:     s.cfg.Builds,
		Pushes:     s.cfg.Pushes,
		IsNoContainer: func(err error) bool {
			return errors.Is(err, mgmt.ErrNoSuchWorker) || errors.Is(err, mgmt.ErrNoSuchPod) || errors.Is(err, store.ErrNotFound)
		},
	}
	cfg.Workers, cfg.Models = s.workers, s.cfg.Models
	return v2api.New(cfg)
}

// V2Routes lists the REST v2 routes ("METHOD /path" → RunPod's operation
// id); they are described by /v2/openapi.json, not /v1/openapi.json.
func (s *Server) V2Routes() map[string]string { return s.v2.Routes() }
