package runtime

// FlashBoot: an endpoint with flashboot on keeps an idle worker past its
// idleTimeout frozen (its container paused through the Engine API: the
// cgroup freezer stops every process, memory and GPUs stay held, nothing
// runs or is sent) instead of stopping it. The next job thaws it (unpause)
// and the worker's own job-take hands it the job. The eviction policy,
// least recently frozen first:
//
//   - GPUs: a worker of another endpoint (or of this one, at a new
//     version) or a pod that cannot get GPUs evicts the frozen workers
//     whose GPUs it needs, the fewest that make the allocation succeed;
//   - memory: while the host's MemAvailable (/proc/meminfo) is below
//     Config.FlashMinMemAvailable, one frozen worker is evicted per
//     autoscaler pass;
//   - time: a worker frozen longer than Config.FlashMaxFrozen is evicted.
//
// Evicting is draining: the instance is stopped (Docker delivers SIGTERM
// and resumes it) and its identity forgotten, like an idle timeout
// without FlashBoot. See docs/flashboot.md.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"berth/gpu"
)

// freezeAsync pauses an idle worker's container. The queue is told first,
// so the silence that follows never counts as a lost worker.
func (s *Supervisor) freezeAsync(ws *workerState) {
	s.mu.Lock()
	if ws.state != wsIdle || ws.instanceID == "" {
		s.mu.Unlock()
		return // changed since the plan
	}
	// Frozen time (eviction order, FlashMaxFrozen) counts from the decision.
	s.setStateLocked(ws, wsFreezing, "idle past idleTimeout (flashboot)")
	ws.frozenAt = s.clock.Now()
	cid := ws.instanceID
	s.wg.Add(1)
	s.mu.Unlock()
	s.log.Info("freezing idle worker (flashboot)", "endpoint", ws.endpointID, "worker", ws.id, "container", cid)
	go func() {
		defer s.wg.Done()
		s.q.SetFrozen(ws.id, true)
		err := s.b.Pause(s.ctx, cid)
		s.mu.Lock()
		pausing := ws.state == wsFreezing || ws.state == wsThawAsked
		if err != nil {
			if pausing {
				s.setStateLocked(ws, servingState(ws), "the pause failed")
			}
			s.mu.Unlock()
			s.q.SetFrozen(ws.id, false)
			if s.ctx.Err() == nil {
				s.log.Warn("freeze worker", "endpoint", ws.endpointID, "worker", ws.id, "container", cid, "err", err)
			}
			return
		}
		// Drained or gone meanwhile: its stop does not care that it is paused.
		thaw := ws.state == wsThawAsked
		if pausing {
			s.setStateLocked(ws, wsFrozen, "container paused")
		}
		s.mu.Unlock()
		if thaw {
			s.thawAsync(ws)
		}
		// A job may have reached its pending job-take meanwhile.
		s.Notify(ws.endpointID)
	}()
}

// thawAsync resumes a frozen worker; one still being frozen is resumed as
// soon as its pause completes.
func (s *Supervisor) thawAsync(ws *workerState) {
	s.mu.Lock()
	switch ws.state {
	case wsFreezing:
		s.setStateLocked(ws, wsThawAsked, "thaw asked while the pause is in flight")
		s.mu.Unlock()
		return
	case wsFrozen:
	default:
		s.mu.Unlock()
		return // changed since the plan
	}
	// Its idle time restarts now, so a thaw that finds no job refreezes
	// after a full idleTimeout.
	s.setStateLocked(ws, wsThawing, "wanted by the autoscaler")
	ws.idleSince = s.clock.Now()
	cid := ws.instanceID
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		t0 := time.Now()
		err := s.b.Unpause(s.ctx, cid)
		if err != nil && s.ctx.Err() != nil {
			return
		}
		if err != nil {
			// Not paused after all (unpaused by hand, or gone): treat it as
			// running; an exit is reported by its event.
			s.log.Warn("thaw worker", "endpoint", ws.endpointID, "worker", ws.id, "container", cid, "err", err)
		}
		s.q.SetFrozen(ws.id, false)
		s.mu.Lock()
		if ws.state == wsThawing {
			s.setStateLocked(ws, servingState(ws), "container unpaused")
		}
		s.mu.Unlock()
		s.log.Info("thawed worker (flashboot)", "endpoint", ws.endpointID, "worker", ws.id, "container", cid, "took", time.Since(t0).Round(time.Millisecond))
		s.Notify(ws.endpointID)
	}()
}

// servingState is the state a worker leaving FlashBoot's cycle returns to:
// running when a job reached it meanwhile, else idle.
func servingState(ws *workerState) wstate {
	if ws.running > 0 {
		return wsRunning
	}
	return wsIdle
}

// evictLocked drains a frozen worker: its container is stopped (Docker
// resumes a paused container to deliver the signal) and its GPUs freed.
// The caller runs stopAsync on it after unlocking.
func (s *Supervisor) evictLocked(ws *workerState, reason string) {
	s.drainLocked(ws, drain{kind: drainEvict, reason: "flashboot eviction: " + reason, grace: s.cfg.IdleStopGrace})
}

// evicting: the worker was drained by a FlashBoot eviction and still holds
// its GPUs (it is not forgotten yet).
func (ws *workerState) evicting() bool {
	return (ws.state.stopping() || ws.state == wsExited) && ws.drain.kind == drainEvict
}

// frozenByAgeLocked lists the frozen workers not being stopped, least
// recently frozen first.
func (s *Supervisor) frozenByAgeLocked() []*workerState {
	var out []*workerState
	for _, ws := range s.workers {
		if ws.state == wsFrozen {
			out = append(out, ws)
		}
	}
	slices.SortFunc(out, func(a, b *workerState) int {
		if c := a.frozenAt.Compare(b.frozenAt); c != 0 {
			return c
		}
		return cmpString(a.id, b.id)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// gpuEvictionLocked picks the frozen workers to evict so that count GPUs
// of typeIDs can be allocated: least recently frozen first, only as many
// as needed (found by releasing their GPUs in the allocator, probing and
// restoring them, all under s.mu). GPUs of workers already being evicted
// count as free, so repeated passes while they stop evict no more. ok is
// false when eviction cannot help; pending are the evictions under way.
func (s *Supervisor) gpuEvictionLocked(typeIDs []string, count int) (victims, pending []*workerState, ok bool) {
	if s.cfg.GPUs == nil {
		return nil, nil, false
	}
	var released []*workerState
	defer func() {
		for _, ws := range released {
			if err := s.cfg.GPUs.Restore(ws.id, ws.gpus); err != nil {
				s.log.Error("flashboot: restore GPUs after an eviction probe", "endpoint", ws.endpointID, "worker", ws.id, "err", err)
			}
		}
	}()
	fits := func() bool {
		if _, err := s.cfg.GPUs.Allocate(probeHolder, typeIDs, count); err != nil {
			return false
		}
		s.cfg.GPUs.Release(probeHolder)
		return true
	}
	for _, ws := range s.workers {
		if ws.evicting() && len(ws.gpus) > 0 {
			s.cfg.GPUs.Release(ws.id) // still held until forgotten, which s.mu excludes
			released = append(released, ws)
			pending = append(pending, ws)
		}
	}
	if len(pending) > 0 && fits() {
		return nil, pending, true
	}
	for _, ws := range s.frozenByAgeLocked() {
		if len(ws.gpus) == 0 {
			continue
		}
		s.cfg.GPUs.Release(ws.id)
		released = append(released, ws)
		victims = append(victims, ws)
		if fits() {
			return victims, pending, true
		}
	}
	return nil, nil, false
}

// evictForGPUs evicts the frozen workers whose GPUs a new worker or a pod
// (who) needs, and returns a channel closed once they (and evictions
// already under way) are gone, their GPUs released; nil when no eviction
// helps.
func (s *Supervisor) evictForGPUs(typeIDs []string, count int, who string) <-chan struct{} {
	s.mu.Lock()
	victims, pending, ok := s.gpuEvictionLocked(typeIDs, count)
	if !ok {
		s.mu.Unlock()
		return nil
	}
	var gone []<-chan struct{}
	for _, ws := range victims {
		s.evictLocked(ws, who+" needs its GPUs")
	}
	for _, ws := range append(victims, pending...) {
		gone = append(gone, s.goneChanLocked(ws))
	}
	s.mu.Unlock()
	for _, ws := range victims {
		s.stopAsync(ws)
	}
	done := make(chan struct{})
	go func() {
		for _, g := range gone {
			select {
			case <-g:
			case <-s.ctx.Done():
				return
			}
		}
		close(done)
	}()
	return done
}

// flashHousekeeping evicts frozen workers past FlashMaxFrozen and, while
// the host is short of memory, the least recently frozen one (one at a
// time: its memory shows as available only once it has stopped).
func (s *Supervisor) flashHousekeeping() {
	now := s.clock.Now()
	var evict []*workerState
	s.mu.Lock()
	frozen := s.frozenByAgeLocked()
	if s.cfg.FlashMaxFrozen > 0 {
		for _, ws := range frozen {
			if d := now.Sub(ws.frozenAt); d >= s.cfg.FlashMaxFrozen {
				s.evictLocked(ws, fmt.Sprintf("frozen for %s (limit %s)", d.Round(time.Second), s.cfg.FlashMaxFrozen))
				evict = append(evict, ws)
			}
		}
	}
	memBusy := s.memEvict != nil && s.workers[s.memEvict.id] == s.memEvict
	s.mu.Unlock()
	if len(frozen) > len(evict) && !memBusy && s.cfg.FlashMinMemAvailable > 0 {
		avail, err := s.cfg.MemAvailable()
		if err != nil {
			s.log.Warn("flashboot: read available memory", "err", err)
		} else if avail < s.cfg.FlashMinMemAvailable {
			s.mu.Lock()
			if rest := s.frozenByAgeLocked(); len(rest) > 0 {
				ws := rest[0]
				s.evictLocked(ws, fmt.Sprintf("the host has %d MiB of memory available (threshold %d MiB)",
					avail>>20, s.cfg.FlashMinMemAvailable>>20))
				s.memEvict = ws
				evict = append(evict, ws)
			}
			s.mu.Unlock()
		}
	}
	for _, ws := range evict {
		s.stopAsync(ws)
	}
}

// goneChanLocked returns a channel closed once ws is forgotten (its
// container exited and its GPUs were released).
func (s *Supervisor) goneChanLocked(ws *workerState) <-chan struct{} {
	if ws.gone == nil {
		ws.gone = make(chan struct{})
		if s.workers[ws.id] != ws {
			close(ws.gone)
		}
	}
	return ws.gone
}

// forgetLocked removes a worker from the Supervisor's table.
func (s *Supervisor) forgetLocked(ws *workerState) {
	if s.workers[ws.id] == ws {
		delete(s.workers, ws.id)
	}
	if ws.gone != nil {
		select {
		case <-ws.gone:
		default:
			close(ws.gone)
		}
	}
}

// MemAvailable reads MemAvailable from /proc/meminfo, in bytes.
func MemAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemAvailable:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/meminfo has no MemAvailable")
}

// allocatePodGPUs allocates a pod's GPUs, evicting frozen workers when
// that is what it takes (waiting until their containers have stopped).
func (s *Supervisor) allocatePodGPUs(ctx context.Context, podID string, typeIDs []string, count int) ([]gpu.Device, error) {
	s.mu.Lock()
	devs, err := s.cfg.GPUs.Allocate(podID, typeIDs, count)
	s.mu.Unlock()
	if !errors.Is(err, gpu.ErrNoCapacity) {
		return devs, err
	}
	done := s.evictForGPUs(typeIDs, count, "pod "+podID)
	if done == nil {
		return nil, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.GPUs.Allocate(podID, typeIDs, count)
}

// restorePodGPUs gives a stopped pod back its own GPUs, evicting frozen
// workers that hold any of them.
func (s *Supervisor) restorePodGPUs(ctx context.Context, podID string, uuids []string) error {
	s.mu.Lock()
	err := s.cfg.GPUs.Restore(podID, uuids)
	if err == nil {
		s.mu.Unlock()
		return nil
	}
	var victims []*workerState
	var gone []<-chan struct{}
	for _, ws := range s.frozenByAgeLocked() {
		if slices.ContainsFunc(ws.gpus, func(u string) bool { return slices.Contains(uuids, u) }) {
			s.evictLocked(ws, "pod "+podID+" needs its GPUs")
			victims = append(victims, ws)
			gone = append(gone, s.goneChanLocked(ws))
		}
	}
	s.mu.Unlock()
	if len(victims) == 0 {
		return err
	}
	for _, ws := range victims {
		s.stopAsync(ws)
	}
	for _, g := range gone {
		select {
		case <-g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.GPUs.Restore(podID, uuids)
}
