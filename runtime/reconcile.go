package runtime

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"berth/queue"
	"berth/store"
)

// resync compares the Supervisor's state with the instances this Berth
// labelled: it adopts running workers it does not know (after a restart of
// Berth), handles exits it missed (after a restart of the daemon), removes
// orphans, and restores GPU allocations from the containers. Called from
// Start and from the loop goroutine only.
func (s *Supervisor) resync(ctx context.Context) error {
	infos, err := s.b.List(ctx)
	if err != nil {
		return err
	}
	epList, err := s.cfg.Endpoints()
	if err != nil {
		return fmt.Errorf("list endpoints: %w", err)
	}
	eps := make(map[string]store.Endpoint, len(epList))
	for _, ep := range epList {
		eps[ep.ID] = ep
	}
	loads := map[string]queue.WorkerLoad{}
	for _, l := range s.q.Workers("") {
		loads[l.WorkerID] = l
	}
	present := make(map[string]bool, len(infos))
	for _, info := range infos {
		present[info.ID] = true
		switch info.Labels[LabelKind] {
		case KindWorker:
			s.resyncWorker(ctx, info, eps, loads)
		case KindPod:
			s.resyncPod(ctx, info)
		}
	}

	var gone []*workerState
	var podsGone []*podState
	s.mu.Lock()
	for _, ws := range s.workers {
		if ws.instanceID != "" && !present[ws.instanceID] && launched(ws.state) && ws.state != wsExited {
			gone = append(gone, ws)
		}
	}
	for id, epID := range s.kept {
		if !present[id] {
			delete(s.kept, id)
			if es := s.eps[epID]; es != nil && es.kept == id {
				es.kept = ""
			}
		}
	}
	for _, p := range s.pods {
		if p.instanceID != "" && !present[p.instanceID] {
			podsGone = append(podsGone, p)
		}
	}
	s.mu.Unlock()
	for _, ws := range gone {
		s.goExit(ws)
	}
	for _, p := range podsGone {
		s.podVanished(p)
	}
	return nil
}

func (s *Supervisor) resyncWorker(ctx context.Context, info Instance, eps map[string]store.Endpoint, loads map[string]queue.WorkerLoad) {
	wid, epID := info.Labels[LabelWorker], info.Labels[LabelEndpoint]
	s.mu.Lock()
	ws := s.workers[wid]
	_, kept := s.kept[info.ID]
	s.mu.Unlock()
	if kept {
		return
	}
	if ws != nil && ws.instanceID == info.ID {
		s.mu.Lock()
		state := ws.state
		unpaused := info.Running && !info.Paused && state == wsFrozen
		if unpaused {
			// Resumed behind Berth's back: it serves again, idle from now.
			s.setStateLocked(ws, wsIdle, "container unpaused outside Berth")
			ws.idleSince = s.clock.Now()
		}
		s.mu.Unlock()
		if !info.Alive() && launched(state) {
			s.goExit(ws) // an exit whose event was missed
		}
		if unpaused {
			s.q.SetFrozen(wid, false)
		}
		return
	}
	if ws != nil && ws.instanceID == "" {
		return // being created right now
	}
	l, known := loads[wid]
	ep, epOK := eps[epID]
	var why string
	switch {
	case ws != nil:
		why = "a second container for the same worker"
	case !info.Alive():
		// A Pod still waiting for its node or image is adopted: it runs
		// once it can, as it would have without the restart.
		why = "not running (state " + info.State + ")"
	case wid == "" || !known || l.External:
		why = "its worker identity is unknown to the queue"
	case !epOK:
		why = "its endpoint no longer exists"
	}
	var gpus []string
	if why == "" {
		gpus = info.GPUs
		if len(gpus) > 0 && s.cfg.GPUs != nil {
			s.mu.Lock()
			err := s.cfg.GPUs.Restore(wid, gpus)
			s.mu.Unlock()
			if err != nil {
				why = "its GPUs cannot be restored: " + err.Error()
			}
		}
	}
	if why != "" {
		s.log.Info("removing orphan worker container", "container", shortID(info.ID), "worker", wid, "endpoint", epID, "why", why)
		if err := s.b.Remove(ctx, info.ID); err != nil {
			s.log.Warn("remove orphan container", "container", shortID(info.ID), "err", err)
		}
		if ws == nil && known && !l.External {
			s.q.ForgetWorker(wid)
		}
		return
	}
	version, _ := strconv.Atoi(info.Labels[LabelVersion])
	// An adopted worker starts its life in Berth as Initializing (the
	// next pass finds it idle or running from the queue's view) or, when
	// paused, Frozen.
	ws = &workerState{
		id: wid, endpointID: epID, instanceID: info.ID, version: version, specKey: info.Labels[LabelSpec],
		gpus: gpus, gpuType: s.gpuTypeOf(gpus), state: wsInitializing, startedAt: info.StartedAt,
		contacted: info.Running && !l.LastSeen.IsZero(), image: info.Image, vcpus: ep.VCPUCount,
		waiting: info.Waiting, waitReason: info.Error,
	}
	switch {
	case !info.Running:
		// Pending: it starts later (EventStart), its wait counted from now;
		// the queue's start-up sighting of it is no contact.
		ws.startedAt, ws.launchedAt, ws.adoptSighting = time.Time{}, s.clock.Now(), l.LastSeen
	case ws.startedAt.IsZero():
		ws.startedAt = s.clock.Now()
	}
	if !ws.startedAt.IsZero() {
		ws.launchedAt = ws.startedAt
	}
	if info.Paused {
		// Frozen by FlashBoot before the restart: it stays frozen, and its
		// frozen time counts from now (the pause time is not recorded).
		ws.state, ws.frozenAt = wsFrozen, s.clock.Now()
		s.q.SetFrozen(wid, true)
	}
	s.mu.Lock()
	s.workers[wid] = ws
	s.byInstance[info.ID] = ws
	es := s.endpointLocked(epID)
	es.ep = ep
	s.mu.Unlock()
	s.log.Info("adopted worker container", "endpoint", epID, "worker", wid, "container", shortID(info.ID),
		"version", version, "current", version == ep.Version, "gpus", gpus, "frozen", info.Paused)
	if s.cfg.OnRun != nil && info.Running {
		s.cfg.OnRun(KindWorker, wid, epID, ws.gpuType, len(gpus), info.StartedAt, time.Time{})
	}
}

// launched: the worker's launch is done with it (its container was
// started, or the start failed), so reconcile may judge its container.
func launched(st wstate) bool { return st != wsStarting && st != wsCancelled }

func (s *Supervisor) gpuTypeOf(uuids []string) string {
	if len(uuids) == 0 || s.cfg.GPUs == nil {
		return ""
	}
	for _, st := range s.cfg.GPUs.Snapshot() {
		if st.UUID == uuids[0] {
			return st.TypeID
		}
	}
	return ""
}
