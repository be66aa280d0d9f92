package app

import (
	"fmt"
	"strings"
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

// seriesKey is the record of an endpoint's series in the meta bucket.
func seriesKey(endpointID string) string { return "series/" + endpointID }

// restoreSeries puts back the series saved before the last stop (or up to
// a minute before a crash), and deletes those of endpoints gone since.
func (a *App) restoreSeries() {
	live := map[string]bool{}
	saved := map[string][]byte{}
	err := a.db.View(func(tx *store.Tx) error {
		if err := tx.ForEachKey(store.Endpoints, func(id string) error { live[id] = true; return nil }); err != nil {
			return err
		}
		return tx.ForEach(store.Meta, func(k string, raw []byte) error {
			if id, ok := strings.CutPrefix(k, seriesKey("")); ok {
				saved[id] = append([]byte(nil), raw...)
			}
			return nil
		})
	})
	if err != nil {
		a.log.Warn("read the dashboard's series", "err", err)
		return
	}
	var gone []store.Op
	for id, rec := range saved {
		if !live[id] {
			gone = append(gone, store.Delete(store.Meta, seriesKey(id)))
			continue
		}
		if err := a.series.Restore(id, rec); err != nil {
			a.log.Warn("restore the dashboard's series", "endpoint", id, "err", err)
		}
	}
	if len(gone) > 0 {
		a.db.WriteAsync(gone...)
	}
}

// saveSeries writes the series changed since the last save (all: every
// one), one record an endpoint.
func (a *App) saveSeries(all bool) error {
	var ops []store.Op
	err := a.series.Snapshot(all, func(id string, rec []byte) { ops = append(ops, store.PutRaw(store.Meta, seriesKey(id), rec)) })
	if err != nil || len(ops) == 0 {
		return err
	}
	if err := a.db.Write(ops...); err != nil {
		return fmt.Errorf("save the dashboard's series: %w", err)
	}
	return nil
}

// forgetSeries drops a deleted endpoint's series and its record.
func (a *App) forgetSeries(id string) {
	a.series.Forget(id)
	a.db.WriteAsync(store.Delete(store.Meta, seriesKey(id)))
}
