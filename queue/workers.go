package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"berth/store"
)

// Registration is a new worker's identity.
type Registration struct {
	WorkerID   string
	EndpointID string
	Key        string // shown once; only its hash is stored
}

// RegisterWorker creates a worker identity with its own key, stored before
// it is returned.
func (s *Service) RegisterWorker(endpointID string, external bool) (Registration, error) {
	key := randomKey()
	rec := store.Worker{ID: NewID(14), EndpointID: endpointID, KeyHash: hashKey(key), External: external, CreatedAt: s.clock.Now()}
	if err := <-s.st.Enqueue(store.Put(store.Workers, rec.ID, rec)); err != nil {
		return Registration{}, fmt.Errorf("store worker: %w", err)
	}
	s.mu.Lock()
	w := s.addWorkerLocked(rec, time.Time{})
	w.lastSeen = time.Time{} // not seen until its first request
	s.unlock()
	return Registration{WorkerID: rec.ID, EndpointID: endpointID, Key: key}, nil
}

// SetFrozen tells the queue that a worker's container was paused (frozen,
// FlashBoot) or resumed. A frozen worker sends nothing, so it is never
// counted as lost; on thawing it gets a full WorkerTimeout from now to
// resume its heartbeat.
func (s *Service) SetFrozen(workerID string, frozen bool) {
	s.mu.Lock()
	defer s.unlock()
	w := s.workers[workerID]
	if w == nil || w.frozen == frozen {
		return
	}
	w.frozen = frozen
	if !frozen {
		for _, j := range w.inflight {
			j.unseen = false // it runs again: it can act on its jobs
		}
	}
	if !frozen && !w.lastSeen.IsZero() {
		w.lastSeen = s.clock.Now()
		w.lost = false
		s.armLostLocked(w)
	}
}

// DrainWorker tells the queue that a worker is being stopped (drained,
// killed, or its endpoint deleted); the runtime calls it where it decides
// the drain, before it signals the container. From then on the worker is
// never handed a job: its job-take held now is answered at once with the
// empty answer (204), later ones after DrainHold, and its job-stop poll at
// once whenever it holds no job (so the SDK's loops end and it exits in
// about a second). A job it holds that it cannot have started (handed over
// while its container was paused, see requeueLocked) is given back to the
// queue at once, without counting an attempt; the others stay its own, to
// finish within the drain's grace. It returns how many jobs the worker
// still holds. Unknown workers are ignored; a second call changes nothing
// more.
func (s *Service) DrainWorker(workerID string) int {
	s.mu.Lock()
	defer s.unlock()
	w := s.workers[workerID]
	if w == nil {
		return 0
	}
	if !w.draining {
		w.draining = true
		if ep := s.endpoints[w.rec.EndpointID]; ep != nil {
			for e := ep.waiters.Front(); e != nil; e = e.Next() {
				if tw := e.Value.(*takeWaiter); tw.w == w {
					wake(tw.ch)
				}
			}
		}
		wakeStop(w)
	}
	var ops []store.Op
	for _, j := range w.inflight {
		if !j.unseen {
			continue
		}
		if ch := s.requeueLocked(j, fmt.Sprintf("worker %s is stopping and cannot have started the job", workerID)); ch == nil {
			ops = append(ops, jobOps(j)...)
		}
	}
	if len(ops) > 0 {
		s.st.WriteAsync(ops...)
	}
	return len(w.inflight)
}

// dropInflightLocked removes job id from w's jobs; the job-stop poll of a
// draining worker, held while it had jobs, is answered once it has none.
func dropInflightLocked(w *worker, id string) {
	delete(w.inflight, id)
	if w.draining && len(w.inflight) == 0 {
		wakeStop(w)
	}
}

// ForgetWorker removes a worker identity (its container is gone for good);
// its jobs are requeued.
func (s *Service) ForgetWorker(workerID string) {
	s.mu.Lock()
	w := s.workers[workerID]
	if w == nil {
		s.unlock()
		return
	}
	done := s.loseWorkerLocked(w, "the worker was removed")
	s.dropWorkerLocked(w)
	s.unlock()
	<-done
	s.st.WriteAsync(store.Delete(store.Workers, workerID))
}

// dropWorkerLocked removes a worker identity and its key from memory.
func (s *Service) dropWorkerLocked(w *worker) {
	if w.lostT != nil {
		w.lostT.Stop()
	}
	if w.rec.KeyHash != "" {
		delete(s.keys, w.rec.KeyHash)
	}
	delete(s.workers, w.rec.ID)
	if ep := s.endpoints[w.rec.EndpointID]; ep != nil && ep.workers[w.rec.ID] == w {
		delete(ep.workers, w.rec.ID)
	}
	wakeStop(w)
}

// ForgetWorkersOf forgets the idle worker identities (with their keys) of
// endpoints that no longer exist (live reports false); one still holding a
// job stays until the job ends. The cleaner calls it; it returns how many
// went.
func (s *Service) ForgetWorkersOf(live func(endpointID string) bool) int {
	s.mu.Lock()
	var eps []string
	for id, ep := range s.endpoints {
		if len(ep.workers) > 0 {
			eps = append(eps, id)
		}
	}
	s.unlock()
	n := 0
	var ops []store.Op
	for _, id := range eps {
		if live(id) { // outside the lock: it may read the store
			continue
		}
		s.mu.Lock()
		if ep := s.endpoints[id]; ep != nil {
			for _, w := range ep.workers {
				if len(w.inflight) > 0 || w.frozen {
					continue
				}
				if w.rec.KeyHash != "" {
					ops = append(ops, store.Delete(store.Workers, w.rec.ID))
				}
				s.dropWorkerLocked(w)
				n++
			}
		}
		s.unlock()
	}
	if len(ops) > 0 {
		s.st.WriteAsync(ops...)
	}
	return n
}

// ExpireWorkers forgets the worker identities nobody uses: those the
// operator's key created on the fly, WorkerRetention after their last
// request, and those with their own key (worker-env, the runtime's),
// KeyedWorkerRetention after their last request (or their registration,
// if they never made one), their key with them. A worker holding a job or
// frozen by FlashBoot is kept. The cleaner calls it; it returns how many
// went.
func (s *Service) ExpireWorkers() int {
	now := s.clock.Now()
	s.mu.Lock()
	var ops []store.Op
	n := 0
	for _, w := range s.workers {
		if w.frozen || len(w.inflight) > 0 {
			continue
		}
		last, keep := w.lastSeen, s.cfg.WorkerRetention
		if last.IsZero() {
			last = w.rec.CreatedAt
		}
		if w.rec.KeyHash != "" {
			keep = s.cfg.KeyedWorkerRetention
			ops = append(ops, store.Delete(store.Workers, w.rec.ID))
		}
		if now.Sub(last) < keep {
			if w.rec.KeyHash != "" {
				ops = ops[:len(ops)-1]
			}
			continue
		}
		s.dropWorkerLocked(w)
		n++
	}
	s.unlock()
	if len(ops) > 0 {
		s.st.WriteAsync(ops...)
	}
	if n > 0 {
		s.log().Info("forgot unused worker identities", "workers", n, "keys", len(ops))
	}
	return n
}

// WorkerGone is called by the runtime when a worker's container exited: its
// jobs go back to the queue (or fail once their attempts are used up).
func (s *Service) WorkerGone(workerID, reason string) {
	s.mu.Lock()
	w := s.workers[workerID]
	if w == nil {
		s.unlock()
		return
	}
	done := s.loseWorkerLocked(w, reason)
	s.unlock()
	<-done
}

func (s *Service) addWorkerLocked(rec store.Worker, now time.Time) *worker {
	w := &worker{rec: rec, lastSeen: now, inflight: map[string]*job{}, stopWake: make(chan struct{}, 1)}
	if old := s.workers[rec.ID]; old != nil {
		s.dropWorkerLocked(old)
	}
	s.workers[rec.ID] = w
	s.endpointLocked(rec.EndpointID).workers[rec.ID] = w
	if rec.KeyHash != "" {
		s.keys[rec.KeyHash] = rec.ID
	}
	if !now.IsZero() {
		s.armLostLocked(w)
	}
	return w
}

// AuthWorker returns the worker id and endpoint a worker key belongs to.
func (s *Service) AuthWorker(key string) (workerID, endpointID string, ok bool) {
	h := hashKey(key)
	s.mu.Lock()
	defer s.unlock()
	id, ok := s.keys[h]
	if !ok {
		return "", "", false
	}
	return id, s.workers[id].rec.EndpointID, true
}

// seenLocked notes a request from a worker (any worker route counts as a
// sign of life). Unknown ids reaching here were authorised by the operator's
// key, so they are registered on the fly.
func (s *Service) seenLocked(endpointID, workerID string) *worker {
	now := s.clock.Now()
	w := s.workers[workerID]
	if w == nil {
		w = s.addWorkerLocked(store.Worker{ID: workerID, EndpointID: endpointID, CreatedAt: now}, now)
	}
	first := w.lastSeen.IsZero()
	w.lastSeen = now
	if w.lost || first {
		w.lost = false
		s.armLostLocked(w)
	}
	return w
}

func (s *Service) armLostLocked(w *worker) {
	if w.lostT != nil {
		w.lostT.Stop()
	}
	w.lostT = s.clock.AfterFunc(s.cfg.WorkerTimeout, func() { s.checkLost(w) })
}

func (s *Service) checkLost(w *worker) {
	s.mu.Lock()
	if s.stopped || s.workers[w.rec.ID] != w || w.lost || w.frozen {
		s.unlock()
		return // a frozen worker's timer is re-armed when it thaws
	}
	idle := s.clock.Since(w.lastSeen)
	if idle < s.cfg.WorkerTimeout {
		w.lostT = s.clock.AfterFunc(s.cfg.WorkerTimeout-idle, func() { s.checkLost(w) })
		s.unlock()
		return
	}
	s.logLocked().Warn("worker lost: no request within the worker timeout", "worker", w.rec.ID, "endpoint", w.rec.EndpointID, "timeout", s.cfg.WorkerTimeout)
	done := s.loseWorkerLocked(w, fmt.Sprintf("worker %s lost (no heartbeat for %s)", w.rec.ID, s.cfg.WorkerTimeout))
	s.unlock()
	<-done
}

// loseWorkerLocked requeues the worker's jobs, failing those out of attempts.
func (s *Service) loseWorkerLocked(w *worker, reason string) <-chan error {
	w.lost = true
	var ops []store.Op
	var waits []<-chan error
	for _, j := range w.inflight {
		if ch := s.requeueLocked(j, reason); ch != nil {
			waits = append(waits, ch)
		} else {
			ops = append(ops, jobOps(j)...)
		}
	}
	w.toStop = nil
	waits = append(waits, s.st.EnqueueState(ops...))
	out := make(chan error, 1)
	go func() {
		var first error
		for _, ch := range waits {
			if err := <-ch; err != nil && first == nil {
				first = err
			}
		}
		out <- first
	}()
	return out
}

// requeueLocked puts a running job back at the head of its queue, or fails
// it when its attempts are used up (returning that write's channel).
// Attempts count only hand-overs the worker could have acted on: one it
// could not (j.unseen: the reply never reached it, or its container was
// paused since and is being stopped) is not counted.
func (s *Service) requeueLocked(j *job, reason string) <-chan error {
	ep := s.endpointLocked(j.rec.EndpointID)
	workerOf := j.rec.WorkerID
	if j.unseen {
		j.unseen = false
		j.rec.Attempts--
	}
	if j.rec.Attempts >= s.cfg.MaxAttempts {
		msg := fmt.Sprintf("%s; gave up after %d attempts", reason, j.rec.Attempts)
		s.logLocked().Warn("job failed", "endpoint", j.rec.EndpointID, "job", j.rec.ID, "worker", workerOf, "reason", msg)
		return s.finishLocked(j, store.Failed, nil, msg, false)
	}
	if w := s.workers[j.rec.WorkerID]; w != nil {
		dropInflightLocked(w, j.rec.ID)
	}
	if j.execT != nil {
		j.execT.Stop()
		j.execT = nil
	}
	ep.inProgress--
	ep.retried++
	j.rec.Status = store.InQueue
	j.rec.StartedAt = time.Time{}
	j.rec.Output = nil
	s.dropStreamLocked(j.rec.ID)
	s.pushLocked(ep, j, true)
	j.changedLocked()
	s.logLocked().Info("job requeued", "endpoint", j.rec.EndpointID, "job", j.rec.ID, "worker", workerOf, "reason", reason, "attempts", j.rec.Attempts)
	return nil
}

// Take hands up to n queued jobs to a worker, holding the request until one
// is queued or the hold elapses (then it returns none). Jobs kept only as
// queue entries are read from the store with the lock released.
func (s *Service) Take(ctx context.Context, endpointID, workerID string, n int) ([]TakenJob, error) {
	if n < 1 {
		n = 1
	}
	timer := s.hold(s.cfg.TakeHold)
	defer timer.Stop()
	var tw *takeWaiter
	for {
		s.mu.Lock()
		if s.stopped {
			s.unlock()
			return nil, nil
		}
		w := s.seenLocked(endpointID, workerID)
		held := tw != nil
		if tw != nil {
			// pass a wake-up we may not use on to the next waiter
			s.removeWaiterLocked(endpointID, tw)
			tw = nil
		}
		ep := s.endpointLocked(endpointID)
		if w.draining {
			// Never a job for a worker being stopped: a job whose wake-up
			// this take consumed goes to the next waiter.
			if ep.fifo.len() > 0 {
				if next := ep.nextWaiterLocked(); next != nil {
					wake(next.ch)
				}
			}
			s.unlock()
			if !held {
				s.drainedPause(ctx)
			}
			return nil, nil
		}
		if ep.fifo.len() > 0 {
			s.loadFrontLocked(ep, n)
			out := s.assignLocked(ep, w, n)
			if len(out) > 0 || ep.fifo.len() == 0 {
				s.unlock()
				return out, nil
			}
			// Others took what was loaded: read the new front.
			s.unlock()
			continue
		}
		tw = &takeWaiter{ch: make(chan struct{}, 1), w: w}
		ep.waiters.PushBack(tw)
		s.unlock()

		select {
		case <-tw.ch:
			continue
		case <-ctx.Done():
		case <-timer.C():
		}
		s.mu.Lock()
		s.removeWaiterLocked(endpointID, tw)
		s.unlock()
		return nil, nil
	}
}

// drainedPause holds a draining worker's new job-take for DrainHold: it
// gets nothing, and a worker that keeps polling is not answered in a busy
// loop.
func (s *Service) drainedPause(ctx context.Context) {
	t := s.hold(s.cfg.DrainHold)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

// loadFrontLocked loads the cold entries among the first n of the queue,
// reading them with the lock released (held on entry and on return). An
// entry that changed meanwhile is left as it is now.
func (s *Service) loadFrontLocked(ep *endpointQ, n int) {
	var need []*qent
	k := 0
	ep.fifo.each(func(q *qent) bool {
		if q.j == nil {
			need = append(need, q)
		}
		k++
		return k < n
	})
	if len(need) == 0 {
		return
	}
	type read struct {
		rec   store.Job
		input json.RawMessage
		err   error
	}
	got := make([]read, len(need))
	s.unlock()
	for i, q := range need {
		got[i].rec, got[i].input, got[i].err = s.st.LoadJob(q.id)
	}
	s.mu.Lock()
	for i, q := range need {
		if q.removed || q.j != nil {
			continue // taken, cancelled, expired or loaded meanwhile
		}
		if got[i].err != nil {
			s.unreadableLocked(q, got[i].err)
			continue
		}
		s.warmLocked(q, got[i].rec, got[i].input)
	}
}

func (s *Service) removeWaiterLocked(endpointID string, tw *takeWaiter) {
	ep := s.endpointLocked(endpointID)
	for e := ep.waiters.Front(); e != nil; e = e.Next() {
		if e.Value.(*takeWaiter) == tw {
			ep.waiters.Remove(e)
			break
		}
	}
	select {
	case <-tw.ch:
		// it was woken but is not taking: wake the next one instead
		if ep.fifo.len() > 0 {
			if next := ep.nextWaiterLocked(); next != nil {
				wake(next.ch)
			}
		}
	default:
	}
}

// assignLocked hands the loaded jobs at the front of the queue (up to n,
// stopping at one kept only as its entry) to w.
func (s *Service) assignLocked(ep *endpointQ, w *worker, n int) []TakenJob {
	now := s.clock.Now()
	var out []TakenJob
	var ops []store.Op
	for len(out) < n {
		q := ep.fifo.front()
		if q == nil || q.j == nil {
			break
		}
		j := q.j
		s.unqueueLocked(ep, j)
		j.rec.Status = store.InProgress
		j.rec.WorkerID = w.rec.ID
		j.rec.StartedAt = now
		j.rec.Attempts++
		j.unseen = w.frozen // a paused worker acts on nothing until resumed
		ep.inProgress++
		w.inflight[j.rec.ID] = j
		s.armExecLocked(j)
		j.changedLocked()
		ops = append(ops, jobOps(j)...)
		t := TakenJob{ID: j.rec.ID, Input: j.input, S3Config: j.rec.S3Config, Policy: j.rec.Policy}
		if j.rec.Webhook != "" {
			wh := j.rec.Webhook
			t.Webhook = &wh
		}
		out = append(out, t)
	}
	// Losing this write in a crash only leaves the job queued.
	s.st.WriteAsync(ops...)
	return out
}

// Untake returns jobs handed out on a request whose client went away before
// it could read them.
func (s *Service) Untake(endpointID, workerID string, ids []string) {
	s.mu.Lock()
	defer s.unlock()
	var ops []store.Op
	for _, id := range ids {
		j := s.jobs[id]
		if j == nil || j.rec.Status != store.InProgress || j.rec.WorkerID != workerID {
			continue
		}
		j.unseen = true // the reply never reached the worker
		s.requeueLocked(j, "the worker's job-take request was closed")
		ops = append(ops, jobOps(j)...)
	}
	s.st.WriteAsync(ops...)
}

// Done records a worker's job-done report. Reports for jobs the worker no
// longer holds (cancelled, timed out, expired, requeued elsewhere) change
// nothing and return false.
func (s *Service) Done(endpointID, workerID, jobID string, r DoneReport) (bool, error) {
	if !r.Progress {
		if err := s.st.Admit(context.Background()); err != nil {
			return false, fmt.Errorf("store result: %w", err)
		}
	}
	s.mu.Lock()
	w := s.seenLocked(endpointID, workerID)
	j := s.jobs[jobID]
	if j == nil || j.rec.EndpointID != endpointID {
		q := s.entryLocked(endpointID, jobID)
		again := q != nil && q.fin != 0 && q.x != nil && q.x.rec != nil && q.x.rec.WorkerID == workerID
		s.unlock()
		if again {
			// A repeated report (the first got an error): acknowledge
			// it once the result is on disk.
			if err := s.rewrite(endpointID, jobID); err != nil {
				return false, fmt.Errorf("store result: %w", err)
			}
		}
		return false, nil
	}
	switch {
	case j.rec.Status == store.InProgress && j.rec.WorkerID == workerID:
	case j.rec.Status == store.InQueue && j.rec.WorkerID == workerID && !r.Progress:
		// A late result from the worker we gave up on: take it.
		j.rec.Status = store.InProgress
		s.endpointLocked(endpointID).inProgress++
		s.unqueueLocked(s.endpointLocked(endpointID), j)
		j.rec.StartedAt = j.rec.QueuedAt
		w.inflight[j.rec.ID] = j
	default:
		s.unlock()
		return false, nil
	}
	if r.Progress {
		if r.Output != nil {
			j.rec.Output = r.Output
			j.changedLocked()
		}
		s.unlock()
		return true, nil
	}
	st := store.Completed
	if r.Failed {
		st = store.Failed
	}
	out := r.Output
	if out == nil {
		// Drop a progress value: the final body decides the output.
		j.rec.Output = nil
	}
	done := s.finishLocked(j, st, out, r.Error, false)
	s.unlock()
	if r.StopPod && s.cfg.OnStopPod != nil {
		s.cfg.OnStopPod(endpointID, workerID)
	}
	if err := <-done; err != nil {
		return false, fmt.Errorf("store result: %w", err)
	}
	return true, nil
}

// StopPoll holds a worker's job-stop request until a job of its must stop
// or the hold elapses. A draining worker's is held only while it has jobs.
func (s *Service) StopPoll(ctx context.Context, endpointID, workerID string) []string {
	timer := s.hold(s.cfg.TakeHold)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if s.stopped {
			s.unlock()
			return nil
		}
		w := s.seenLocked(endpointID, workerID)
		if len(w.toStop) > 0 {
			ids := w.toStop
			w.toStop = nil
			s.unlock()
			return ids
		}
		if w.draining && len(w.inflight) == 0 {
			// Nothing left to stop: the worker's loop may end.
			s.unlock()
			return nil
		}
		ch := w.stopWake
		s.unlock()
		select {
		case <-ch:
			continue
		case <-ctx.Done():
			return nil
		case <-timer.C():
			return nil
		}
	}
}

func wakeStop(w *worker) {
	select {
	case w.stopWake <- struct{}{}:
	default:
	}
}

// PendingStops returns the jobs a worker was told to stop and has not let
// go of: stops it has not fetched (workers without the job-stop channel)
// and jobs its last heartbeat still reported although they are no longer
// its own (workers that fetch a stop and ignore it). The runtime stops
// containers that keep such jobs.
func (s *Service) PendingStops(workerID string) []string {
	s.mu.Lock()
	defer s.unlock()
	w := s.workers[workerID]
	if w == nil {
		return nil
	}
	out := append([]string(nil), w.toStop...)
	for id := range w.reported {
		if w.inflight[id] == nil && !slices.Contains(out, id) && !s.lateResultLocked(id, workerID) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// lateResultLocked: the job was requeued after its worker was presumed
// lost, and that worker's result is still welcome.
func (s *Service) lateResultLocked(jobID, workerID string) bool {
	j := s.jobs[jobID]
	return j != nil && j.rec.Status == store.InQueue && j.rec.WorkerID == workerID
}

// Ping records a heartbeat with the job ids the worker reports running.
// A job the worker was given more than ReconcileGrace ago and no longer
// reports is requeued: its job-take reply or its result never arrived.
func (s *Service) Ping(endpointID, workerID string, jobIDs []string) {
	s.mu.Lock()
	defer s.unlock()
	w := s.seenLocked(endpointID, workerID)
	has := map[string]bool{}
	for _, id := range jobIDs {
		has[strings.TrimSpace(id)] = true
	}
	// A job the worker still runs but no longer holds (cancelled, timed
	// out, expired, or now another worker's) is sent to job-stop again: a
	// stop that reached the worker before it registered the job, or that
	// was lost, is repeated at each heartbeat until the worker lets go.
	delete(has, "")
	w.reported = has
	for id := range has {
		if w.inflight[id] != nil || slices.Contains(w.toStop, id) || s.lateResultLocked(id, workerID) {
			continue
		}
		w.toStop = append(w.toStop, id)
		wakeStop(w)
	}
	now := s.clock.Now()
	var ops []store.Op
	for id, j := range w.inflight {
		if has[id] || now.Sub(j.rec.StartedAt) < s.cfg.ReconcileGrace {
			continue
		}
		if ch := s.requeueLocked(j, fmt.Sprintf("worker %s no longer reports the job", workerID)); ch == nil {
			ops = append(ops, jobOps(j)...)
		}
	}
	if len(ops) > 0 {
		s.st.WriteAsync(ops...)
	}
}

// WorkerLoad is one worker's view for /health and the runtime.
type WorkerLoad struct {
	WorkerID   string
	EndpointID string
	Running    int
	LastSeen   time.Time
	Lost       bool
	External   bool
	Frozen     bool // paused by FlashBoot (SetFrozen)
}

// Workers lists the known workers of an endpoint ("" for all).
func (s *Service) Workers(endpointID string) []WorkerLoad {
	s.mu.Lock()
	defer s.unlock()
	ws := s.workers
	if endpointID != "" {
		ep := s.endpoints[endpointID]
		if ep == nil {
			return nil
		}
		ws = ep.workers
	}
	var out []WorkerLoad
	for _, w := range ws {
		out = append(out, WorkerLoad{WorkerID: w.rec.ID, EndpointID: w.rec.EndpointID, Running: len(w.inflight), LastSeen: w.lastSeen, Lost: w.lost, External: w.rec.External, Frozen: w.frozen})
	}
	return out
}
