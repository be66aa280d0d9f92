package app

import (
	"sync/atomic"

	"berth/httpapi"
	"berth/series"
	"berth/store"
)

// newSeries keeps the dashboard's plots (package series): jobs ended and
// cold starts are told to it by the queue's and runtime's hooks; queue
// depth and workers by state are sampled from what /health answers, for
// every endpoint in the store.
func newSeries(cfg Config, db **store.DB, api *atomic.Pointer[httpapi.Server]) *series.Series {
	sc := cfg.Series
	sc.Clock = cfg.Clock
	sc.Endpoints = func() []string {
		var ids []string
		(*db).View(func(tx *store.Tx) error {
			return tx.ForEachKey(store.Endpoints, func(id string) error { ids = append(ids, id); return nil })
		})
		return ids
	}
	sc.Sample = func(id string) series.Sample {
		s := api.Load()
		if s == nil {
			return series.Sample{}
		}
		h := s.Health(id)
		w := h.Workers
		return series.Sample{QueueDepth: h.Jobs.InQueue, Workers: series.Workers{
			Idle: w.Idle, Running: w.Running, Initializing: w.Initializing,
			Throttled: w.Throttled, Unhealthy: w.Unhealthy, Frozen: w.Frozen}}
	}
	return series.New(sc)
}
