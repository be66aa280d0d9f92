package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"berth/cleaner"
	"berth/mgmt"
	"berth/runtime"
	"berth/store"
)

// newCleaner is the maintenance service: the periodic expiries of the
// other services, on the App's clock (see package cleaner).
func (a *App) newCleaner(log *slog.Logger) *cleaner.Service {
	live := func() (func(string) bool, error) {
		ids := map[string]bool{}
		// Every key, damaged records included: a damaged endpoint's
		// containers are not orphans.
		err := a.db.View(func(tx *store.Tx) error {
			return tx.ForEachKey(store.Endpoints, func(id string) error { ids[id] = true; return nil })
		})
		return func(id string) bool { return ids[id] }, err
	}
	return cleaner.New(cleaner.Config{Clock: a.cfg.Clock, Logger: log, OnRun: a.metrics.Cleaned, Tasks: []cleaner.Task{
		// Worker identities nobody uses, with their keys (queue.ExpireWorkers).
		{Name: "workers", Every: time.Minute, Run: func(context.Context) (int, error) { return a.q.ExpireWorkers(), nil }},
		// A deleted endpoint's idle worker identities (with their keys),
		// then its queue state, metric series and plotted series.
		{Name: "endpoints", Every: 5 * time.Minute, Run: func(context.Context) (int, error) {
			isLive, err := live()
			if err != nil {
				return 0, err
			}
			return a.q.ForgetWorkersOf(isLive) + a.q.PruneEndpoints(isLive) + a.metrics.PruneEndpoints(isLive) + a.series.Prune(isLive), nil
		}},
		// The dashboard's series changed in the last minute, to berth.db.
		{Name: "series", Every: time.Minute, Run: func(context.Context) (int, error) { return 0, a.saveSeries(false) }},
		// Rate-limit buckets idle for a minute.
		{Name: "rate-limits", Every: time.Minute, Run: func(context.Context) (int, error) { return a.api.PruneRateLimits(), nil }},
		// Build images past each endpoint's kept releases
		// (builder.PruneImages; also run after every release).
		{Name: "build-images", Every: 15 * time.Minute, Run: a.builds.PruneImages},
		// The last moment Berth was known to run, for the usage repair.
		{Name: "alive", Every: time.Minute, Run: func(context.Context) (int, error) {
			return 0, store.StampAlive(a.db, a.cfg.Clock.Now())
		}},
	}})
}

// repairUsage closes, before the runtime adopts what runs, the usage
// intervals of workers and pods whose instance stopped while Berth was
// down (mgmt.RepairUsage), and marks EXITED the pods whose container
// stopped or is gone (mgmt.RepairPods). Without a backend it knows
// nothing runs only when containers are off; with an unreachable daemon
// it leaves them.
func (a *App) repairUsage(ctx context.Context, backend runtime.Backend) error {
	instances := map[string]mgmt.InstanceState{}
	if backend != nil {
		list, err := backend.List(ctx)
		if err != nil {
			return err
		}
		for _, in := range list {
			var key string
			switch in.Labels[runtime.LabelKind] {
			case runtime.KindWorker:
				key = mgmt.InstanceKey(store.UsageWorker, in.Labels[runtime.LabelWorker])
			case runtime.KindPod:
				key = mgmt.InstanceKey(store.UsagePod, in.Labels[runtime.LabelPod])
			default:
				continue
			}
			st := instances[key]
			st.Running = st.Running || in.Running
			st.Pending = st.Pending || in.Pending
			if in.FinishedAt.After(st.FinishedAt) {
				st.FinishedAt = in.FinishedAt
			}
			if in.Labels[runtime.LabelKind] == runtime.KindPod && !in.Alive() && (st.Exit == nil || in.FinishedAt.After(st.Exit.At)) {
				e := runtime.PodExit{ExitCode: in.ExitCode, OOMKilled: in.OOMKilled, Error: in.Error}
				st.Exit = &mgmt.PodExit{ExitCode: in.ExitCode, OOMKilled: in.OOMKilled, Reason: e.Reason(), At: in.FinishedAt}
			}
			instances[key] = st
		}
	} else if !a.cfg.Backend.off() {
		a.log.Warn("no container runtime: open usage intervals are left as they are until one answers")
		return nil
	}
	_, err := a.mg.RepairUsage(ctx, instances)
	if backend == nil {
		// Pods are left as their records say: a later start with the
		// daemon adopts containers that still run.
		return err
	}
	// A pod whose container stopped or was removed meanwhile reads
	// EXITED, not RUNNING, from the first request on.
	_, perr := a.mg.RepairPods(ctx, instances)
	return errors.Join(err, perr)
}
