package queue

import (
	"container/heap"
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"berth/store"
)

// Service is the job queue of every endpoint. Start loads what is stored;
// Stop ends the timers and webhook deliveries.
type Service struct {
	cfg   Config
	st    Store
	clock clockwork.Clock

	mu        sync.Mutex
	jobs      map[string]*job  // loaded jobs: running, finished, or queued and looked at
	cold      map[string]*qent // queued jobs kept only as their queue entry
	exp       expiryHeap       // the cold entries by ttl
	expT      clockwork.Timer  // fires at exp's earliest ttl
	expAt     int64
	endpoints map[string]*endpointQ
	workers   map[string]*worker
	keys      map[string]string // key hash → worker id
	seq       uint64
	stopped   bool

	hq      hookQueue
	stopCh  chan struct{}
	wg      sync.WaitGroup
	started bool
}

type job struct {
	rec     store.Job
	input   json.RawMessage
	q       *qent // its queue entry while queued
	chunks  []json.RawMessage
	changed chan struct{} // closed on every change, then replaced
	timers  []clockwork.Timer
	execT   clockwork.Timer
	retT    clockwork.Timer
	gone    bool
}

type endpointQ struct {
	id      string
	fifo    ring
	waiters *list.List // of *takeWaiter
	low     int        // lowPriority jobs in fifo
	// counts of retained jobs
	inProgress, completed, failed, retried int
}

type takeWaiter struct {
	ch chan struct{}
	w  *worker
}

// nextWaiterLocked is the job-take to wake for a queued job: the longest
// waiting of a worker that is not frozen (FlashBoot), else the longest
// waiting; nil if none waits. A frozen worker's take only gets a job when
// no running worker is free, so no thaw is paid for needlessly.
func (ep *endpointQ) nextWaiterLocked() *takeWaiter {
	var first *takeWaiter
	for e := ep.waiters.Front(); e != nil; e = e.Next() {
		tw := e.Value.(*takeWaiter)
		if !tw.w.frozen {
			return tw
		}
		if first == nil {
			first = tw
		}
	}
	return first
}

type worker struct {
	rec      store.Worker
	lastSeen time.Time
	inflight map[string]*job
	toStop   []string
	stopWake chan struct{}
	reported map[string]bool // job ids of its last heartbeat
	lostT    clockwork.Timer
	lost     bool
	frozen   bool // its container is paused (FlashBoot): silent, never lost
}

// New makes a Service; call Start before use.
func New(st Store, cfg Config) *Service {
	cfg.defaults()
	return &Service{
		cfg: cfg, st: st, clock: cfg.Clock,
		jobs: map[string]*job{}, cold: map[string]*qent{}, endpoints: map[string]*endpointQ{},
		workers: map[string]*worker{}, keys: map[string]string{},
		hq: hookQueue{signal: make(chan struct{}, 1)}, stopCh: make(chan struct{}),
	}
}

func (s *Service) log() interface {
	Info(string, ...any)
	Warn(string, ...any)
	Error(string, ...any)
} {
	return s.cfg.Logger
}

// Start loads jobs, workers and pending webhooks from the store and resumes
// every timer from its stored time. Queued jobs are loaded from the job
// index alone; the others (running, finished, or queued with a worker that
// may still answer) in full.
func (s *Service) Start(ctx context.Context) error {
	now := s.clock.Now()
	var ws []store.Worker
	if err := s.st.Scan(store.Workers, func(key string, raw []byte) error {
		var w store.Worker
		if err := json.Unmarshal(raw, &w); err == nil {
			ws = append(ws, w)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("load workers: %w", err)
	}
	var hooks []*store.OutboxEntry
	if err := s.st.Scan(store.Outbox, func(key string, raw []byte) error {
		var e store.OutboxEntry
		if err := json.Unmarshal(raw, &e); err == nil {
			hooks = append(hooks, &e)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("load webhook outbox: %w", err)
	}

	s.mu.Lock()
	for _, w := range ws {
		s.addWorkerLocked(w, now)
	}
	// The index yields jobs in submission order: queued jobs go back in
	// their original order.
	loaded := 0
	var slab []qent // entries allocated in blocks: far fewer objects for the GC
	err := s.st.ScanJobIndex(func(e store.JobEntry, load func() (store.Job, json.RawMessage, error)) error {
		loaded++
		if e.Seq > s.seq {
			s.seq = e.Seq
		}
		ep := s.endpointLocked(e.EndpointID)
		if e.Status == store.InQueue && !e.HasWorker {
			if len(slab) == 0 {
				slab = make([]qent, 1024)
			}
			q := &slab[0]
			slab = slab[1:]
			*q = qent{id: e.ID, ep: ep, seq: e.Seq, queuedAt: e.QueuedAt.UnixNano(), expires: e.ExpiresAt.UnixNano(), low: e.LowPriority, hidx: int32(len(s.exp))}
			s.cold[e.ID] = q
			ep.fifo.pushBack(q)
			s.exp = append(s.exp, q) // ordered once, below
			if q.low {
				ep.low++
			}
			return nil
		}
		rec, input, err := load()
		if err != nil {
			s.log().Error("skipping unreadable job record", "endpoint", e.EndpointID, "job", e.ID, "err", err)
			return nil
		}
		j := &job{rec: rec, input: input, changed: make(chan struct{})}
		s.jobs[j.rec.ID] = j
		switch j.rec.Status {
		case store.InQueue:
			s.pushLocked(ep, j, false)
		case store.InProgress:
			// The worker may still be running it: keep it with its worker,
			// whose loss timer (or next ping) requeues it if not.
			ep.inProgress++
			w := s.workers[j.rec.WorkerID]
			if w == nil {
				w = s.addWorkerLocked(store.Worker{ID: j.rec.WorkerID, EndpointID: j.rec.EndpointID}, now)
			}
			w.inflight[j.rec.ID] = j
			s.armExecLocked(j)
		default:
			s.countTerminalLocked(ep, j.rec.Status, +1)
			s.armRetentionLocked(j)
		}
		s.armTTLLocked(j)
		return nil
	})
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("load jobs: %w", err)
	}
	heap.Init(&s.exp)
	s.armExpiryLocked()
	s.started = true
	s.mu.Unlock()

	for i := 0; i < s.cfg.WebhookWorkers; i++ {
		s.wg.Add(1)
		go s.webhookLoop()
	}
	for _, h := range hooks {
		s.scheduleHook(h)
	}
	s.log().Info("queue loaded", "jobs", loaded, "workers", len(ws), "webhooks", len(hooks))
	return nil
}

// Stop ends timers and deliveries and wakes every long poll.
func (s *Service) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	for _, j := range s.jobs {
		j.stopTimers()
	}
	if s.expT != nil {
		s.expT.Stop()
	}
	for _, w := range s.workers {
		if w.lostT != nil {
			w.lostT.Stop()
		}
		wakeStop(w)
	}
	for _, ep := range s.endpoints {
		for e := ep.waiters.Front(); e != nil; e = e.Next() {
			wake(e.Value.(*takeWaiter).ch)
		}
	}
	close(s.stopCh)
	s.mu.Unlock()
	s.wg.Wait()
}

func (j *job) stopTimers() {
	for _, t := range j.timers {
		t.Stop()
	}
	if j.execT != nil {
		j.execT.Stop()
	}
	if j.retT != nil {
		j.retT.Stop()
	}
}

func (s *Service) endpointLocked(id string) *endpointQ {
	ep := s.endpoints[id]
	if ep == nil {
		ep = &endpointQ{id: id, waiters: list.New()}
		s.endpoints[id] = ep
	}
	return ep
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// changedLocked wakes everyone waiting on the job (status-sync, runsync,
// stream).
func (j *job) changedLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// pushLocked queues j; front puts it ahead of the others (a requeue after a
// lost worker keeps its place).
func (s *Service) pushLocked(ep *endpointQ, j *job, front bool) {
	j.q = &qent{id: j.rec.ID, ep: ep, j: j, seq: j.rec.Seq, queuedAt: j.rec.QueuedAt.UnixNano(), low: j.rec.LowPriority, hidx: -1}
	if front {
		ep.fifo.pushFront(j.q)
	} else {
		ep.fifo.pushBack(j.q)
	}
	s.queuedLocked(ep, j.q)
}

// pushColdLocked queues a job kept only as its entry; its ttl is kept by
// the expiry heap.
func (s *Service) pushColdLocked(ep *endpointQ, q *qent) {
	ep.fifo.pushBack(q)
	s.exp.add(q)
	if s.started {
		s.armExpiryLocked()
	}
	s.queuedLocked(ep, q)
}

func (s *Service) queuedLocked(ep *endpointQ, q *qent) {
	if q.low {
		ep.low++
	}
	if tw := ep.nextWaiterLocked(); tw != nil {
		wake(tw.ch)
	}
	if s.cfg.OnQueueChange != nil && s.started {
		s.cfg.OnQueueChange(ep.id)
	}
}

func (s *Service) unqueueLocked(ep *endpointQ, j *job) {
	if j.q == nil {
		return
	}
	ep.fifo.remove(j.q)
	if j.q.low {
		ep.low--
	}
	j.q = nil
}

// takeFrontLocked removes the endpoint's first queued job and returns it
// loaded, or nil when the queue is empty.
func (s *Service) takeFrontLocked(ep *endpointQ) *job {
	for {
		q := ep.fifo.front()
		if q == nil {
			return nil
		}
		if q.j != nil {
			j := q.j
			s.unqueueLocked(ep, j)
			return j
		}
		j, err := s.warmLocked(q)
		if err != nil {
			continue // warmLocked dropped the entry
		}
		s.unqueueLocked(ep, j)
		return j
	}
}

// readLocked loads a cold entry's job from the store.
func (s *Service) readLocked(q *qent) (*job, error) {
	rec, input, err := s.st.LoadJob(q.id)
	if err != nil {
		s.log().Error("cannot read a queued job's record", "endpoint", q.ep.id, "job", q.id, "err", err)
		if errors.Is(err, store.ErrNotFound) {
			s.dropColdLocked(q)
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("load job: %w", err)
	}
	return &job{rec: rec, input: input, changed: make(chan struct{})}, nil
}

// warmLocked loads a cold entry's job and keeps it loaded, in its place in
// the queue, with its own timers (the caller changes or watches it).
func (s *Service) warmLocked(q *qent) (*job, error) {
	j, err := s.readLocked(q)
	if err != nil {
		return nil, err
	}
	q.j, j.q = j, q
	delete(s.cold, q.id)
	s.unexpireLocked(q)
	s.jobs[q.id] = j
	s.armTTLLocked(j)
	return j, nil
}

// dropColdLocked forgets a cold entry.
func (s *Service) dropColdLocked(q *qent) {
	q.ep.fifo.remove(q)
	if q.low {
		q.ep.low--
	}
	delete(s.cold, q.id)
	s.unexpireLocked(q)
}

// unexpireLocked takes q out of the expiry heap; the timer follows the
// earliest ttl exactly (tests count the fake clock's timers).
func (s *Service) unexpireLocked(q *qent) {
	first := q.hidx == 0
	s.exp.drop(q)
	if first && s.expT != nil {
		s.expT.Stop()
		s.expT = nil
		s.armExpiryLocked()
	}
}

// armExpiryLocked sets the timer for the earliest cold ttl. A timer set for
// an entry since loaded or removed fires, finds nothing due and re-arms.
func (s *Service) armExpiryLocked() {
	if len(s.exp) == 0 || s.stopped {
		return
	}
	at := s.exp[0].expires
	if s.expT != nil {
		if at >= s.expAt {
			return
		}
		s.expT.Stop()
	}
	s.expAt = at
	s.expT = s.clock.AfterFunc(time.Duration(at-s.clock.Now().UnixNano()), s.expireCold)
}

// expireCold removes the cold jobs whose ttl has passed, a bounded number
// per lock hold.
func (s *Service) expireCold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expT = nil
	if s.stopped {
		return
	}
	now := s.clock.Now().UnixNano()
	var ops []store.Op
	for n := 0; n < removeBatch && len(s.exp) > 0 && s.exp[0].expires <= now; n++ {
		q := heap.Pop(&s.exp).(*qent)
		s.log().Info("job expired (ttl)", "endpoint", q.ep.id, "job", q.id, "status", store.InQueue)
		s.dropColdLocked(q)
		ops = append(ops, store.DeleteJob(q.id, q.seq)...)
	}
	if len(ops) > 0 {
		s.st.WriteAsync(ops...)
	}
	s.armExpiryLocked()
}

// removeBatch bounds the jobs purged or expired per lock hold and
// transaction, so other requests wait for at most one batch.
const removeBatch = 500

func (s *Service) countTerminalLocked(ep *endpointQ, st store.JobStatus, d int) {
	switch st {
	case store.Completed:
		ep.completed += d
	case store.Failed, store.TimedOut:
		ep.failed += d
	}
}

func newJobID(sync bool) string {
	// Time-ordered (v7): inserts land on bbolt's last leaf page instead of
	// dirtying random pages across the tree.
	id := uuid.Must(uuid.NewV7()).String()
	if sync {
		return "sync-" + id
	}
	return id
}

func jobOps(j *job) []store.Op { return store.PutJob(&j.rec) }

// inlineInput is the largest input kept inside the job record; larger ones
// are stored once in their own bucket so state changes don't rewrite them.
const inlineInput = 4 << 10

// Submit stores a job and queues it. It returns only after the record is
// on disk.
func (s *Service) Submit(req SubmitRequest) (StatusResponse, error) {
	now := s.clock.Now()
	if req.TTL <= 0 {
		req.TTL = DefaultTTL
	}
	if req.ExecutionTimeout <= 0 {
		req.ExecutionTimeout = DefaultExecTimeout
	}
	j := &job{
		rec: store.Job{
			ID: newJobID(req.Sync), EndpointID: req.EndpointID, Status: store.InQueue, Sync: req.Sync,
			Webhook: req.Webhook, S3Config: req.S3Config, Policy: req.Policy,
			ExecutionTimeoutMs: req.ExecutionTimeout.Milliseconds(), LowPriority: req.LowPriority,
			CreatedAt: now, QueuedAt: now, ExpiresAt: now.Add(req.TTL),
		},
		input:   req.Input,
		changed: make(chan struct{}),
	}
	// Back-pressure: new work waits while the disk is behind.
	if err := s.st.Admit(context.Background()); err != nil {
		return StatusResponse{}, fmt.Errorf("store job: %w", err)
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return StatusResponse{}, ErrStopped
	}
	s.seq++
	j.rec.Seq = s.seq
	var done <-chan error
	if len(j.input) <= inlineInput {
		j.rec.Input = j.input
		done = s.st.Enqueue(jobOps(j)...)
	} else {
		done = s.st.Enqueue(append([]store.Op{store.PutRaw(store.JobInputs, j.rec.ID, j.input)}, jobOps(j)...)...)
	}
	s.mu.Unlock()
	if err := <-done; err != nil {
		return StatusResponse{}, fmt.Errorf("store job: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		// On disk: it is queued again at the next start.
		return s.viewLocked(j), nil
	}
	ep := s.endpointLocked(req.EndpointID)
	if req.Sync || ep.waiters.Len() > 0 {
		// Waited on at once (runsync), or about to be handed to a waiting
		// worker: keep it loaded.
		s.jobs[j.rec.ID] = j
		s.pushLocked(ep, j, false)
		s.armTTLLocked(j)
	} else {
		q := &qent{id: j.rec.ID, ep: ep, seq: j.rec.Seq, queuedAt: now.UnixNano(), expires: j.rec.ExpiresAt.UnixNano(), low: j.rec.LowPriority, hidx: -1}
		s.cold[q.id] = q
		s.pushColdLocked(ep, q)
	}
	return s.viewLocked(j), nil
}

func ms(d time.Duration) *int64 {
	v := d.Milliseconds()
	if v < 0 {
		v = 0
	}
	return &v
}

func (s *Service) viewLocked(j *job) StatusResponse {
	r := StatusResponse{ID: j.rec.ID, Status: j.rec.Status, WorkerID: j.rec.WorkerID, Retries: j.rec.Retries, Output: j.rec.Output}
	if !j.rec.StartedAt.IsZero() {
		r.DelayTime = ms(j.rec.StartedAt.Sub(j.rec.QueuedAt))
		end := j.rec.CompletedAt
		if end.IsZero() {
			end = s.clock.Now()
		}
		r.ExecutionTime = ms(end.Sub(j.rec.StartedAt))
	} else if j.rec.Status.Terminal() {
		r.DelayTime = ms(j.rec.CompletedAt.Sub(j.rec.QueuedAt))
	}
	if !j.rec.Status.Terminal() {
		r.Input = j.input
	}
	if j.rec.Error != "" {
		e := j.rec.Error
		r.Error = &e
	}
	return r
}

// lookupLocked finds a job, loading a cold one (and keeping it loaded:
// the caller changes or watches it).
func (s *Service) lookupLocked(endpointID, id string) (*job, error) {
	j := s.jobs[id]
	if j == nil {
		q := s.cold[id]
		if q == nil || q.ep.id != endpointID {
			return nil, ErrNotFound
		}
		return s.warmLocked(q)
	}
	if j.rec.EndpointID != endpointID {
		return nil, ErrNotFound
	}
	return j, nil
}

// peekLocked finds a job for reading only: a cold one is read from the
// store and stays cold.
func (s *Service) peekLocked(endpointID, id string) (*job, error) {
	if q := s.cold[id]; q != nil && s.jobs[id] == nil {
		if q.ep.id != endpointID {
			return nil, ErrNotFound
		}
		return s.readLocked(q)
	}
	return s.lookupLocked(endpointID, id)
}

// Status returns a job's status body. A ttl > 0 resets the job's expiry to
// now + ttl (and keeps a finished job's result at least that long).
func (s *Service) Status(endpointID, id string, ttl time.Duration) (StatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	find := s.peekLocked
	if ttl > 0 {
		find = s.lookupLocked
	}
	j, err := find(endpointID, id)
	if err != nil {
		return StatusResponse{}, err
	}
	if ttl > 0 {
		s.setTTLLocked(j, ttl)
	}
	return s.viewLocked(j), nil
}

// Wait blocks until the job is terminal, removed, or wait elapses, and
// returns its status then (for /runsync and /status-sync).
func (s *Service) Wait(ctx context.Context, endpointID, id string, wait time.Duration) (StatusResponse, error) {
	timer := s.hold(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		j, err := s.lookupLocked(endpointID, id)
		if err != nil {
			s.mu.Unlock()
			return StatusResponse{}, err
		}
		v := s.viewLocked(j)
		ch := j.changed
		s.mu.Unlock()
		if v.Status.Terminal() {
			return v, nil
		}
		select {
		case <-ch:
		case <-timer.C():
			return v, nil
		case <-ctx.Done():
			return v, nil
		case <-s.stopCh:
			return v, nil
		}
	}
}

// Stream drains the chunks buffered so far, waiting up to wait while there
// are none and the job is not finished.
func (s *Service) Stream(ctx context.Context, endpointID, id string, wait time.Duration) (StreamResponse, error) {
	timer := s.hold(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		j, err := s.lookupLocked(endpointID, id)
		if err != nil {
			s.mu.Unlock()
			return StreamResponse{}, err
		}
		if len(j.chunks) > 0 || j.rec.Status.Terminal() {
			r := StreamResponse{ID: id, Status: j.rec.Status, Stream: j.chunks}
			if r.Stream == nil {
				r.Stream = []json.RawMessage{}
			}
			if j.rec.Error != "" {
				e := j.rec.Error
				r.Error = &e
			}
			j.chunks = nil
			s.mu.Unlock()
			return r, nil
		}
		st := j.rec.Status
		ch := j.changed
		s.mu.Unlock()
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

// Cancel cancels a queued or running job. A finished job is left as is and
// its status returned.
func (s *Service) Cancel(endpointID, id string) (StatusResponse, error) {
	s.mu.Lock()
	j, err := s.lookupLocked(endpointID, id)
	if err != nil {
		s.mu.Unlock()
		return StatusResponse{}, err
	}
	if j.rec.Status.Terminal() {
		v := s.viewLocked(j)
		if ch := s.rewriteIfPendingLocked(j); ch != nil {
			s.mu.Unlock()
			if err := <-ch; err != nil {
				return StatusResponse{}, fmt.Errorf("store job: %w", err)
			}
			return v, nil
		}
		s.mu.Unlock()
		return v, nil
	}
	done := s.finishLocked(j, store.Cancelled, nil, "", true)
	v := s.viewLocked(j)
	s.mu.Unlock()
	if err := <-done; err != nil {
		return StatusResponse{}, fmt.Errorf("store cancel: %w", err)
	}
	return StatusResponse{ID: v.ID, Status: v.Status}, nil
}

// Retry requeues a FAILED or TIMED_OUT job under the same id with its
// original input; its previous output and error are removed.
func (s *Service) Retry(endpointID, id string) (StatusResponse, error) {
	s.mu.Lock()
	j, err := s.lookupLocked(endpointID, id)
	if err != nil {
		s.mu.Unlock()
		return StatusResponse{}, err
	}
	if j.rec.Status != store.Failed && j.rec.Status != store.TimedOut {
		v := s.viewLocked(j)
		s.mu.Unlock()
		return v, ErrNotRetryable
	}
	ep := s.endpointLocked(endpointID)
	s.countTerminalLocked(ep, j.rec.Status, -1)
	if j.retT != nil {
		j.retT.Stop()
		j.retT = nil
	}
	now := s.clock.Now()
	j.rec.Status = store.InQueue
	j.rec.Output, j.rec.Error, j.rec.WorkerID = nil, "", ""
	j.rec.StartedAt, j.rec.CompletedAt, j.rec.RetainUntil = time.Time{}, time.Time{}, time.Time{}
	j.rec.QueuedAt = now
	j.rec.Attempts = 0
	j.rec.Retries++
	j.chunks = nil
	ep.retried++
	done := s.st.EnqueueState(jobOps(j)...)
	s.pushLocked(ep, j, false)
	j.changedLocked()
	s.mu.Unlock()
	if err := <-done; err != nil {
		return StatusResponse{}, fmt.Errorf("store retry: %w", err)
	}
	return StatusResponse{ID: id, Status: store.InQueue}, nil
}

// CancelEndpoint cancels every job of the endpoint that is not finished,
// as Cancel does one: running jobs first (their workers are told to stop),
// then the queue, cold entries included, in batches of removeBatch per
// lock hold, as Purge works. Webhooks fire with CANCELLED. It returns the
// number cancelled once every write is on disk; used when an endpoint is
// deleted.
func (s *Service) CancelEndpoint(endpointID string) (int, error) {
	n := 0
	var firstErr error
	wait := func(dones []<-chan error) {
		for _, d := range dones {
			if err := <-d; err != nil && firstErr == nil {
				firstErr = fmt.Errorf("store cancel: %w", err)
			}
		}
	}
	s.mu.Lock()
	var dones []<-chan error
	for _, w := range s.workers {
		if w.rec.EndpointID != endpointID {
			continue
		}
		for _, j := range w.inflight { // finishLocked removes j from inflight
			dones = append(dones, s.finishLocked(j, store.Cancelled, nil, "", true))
			n++
		}
	}
	s.mu.Unlock()
	wait(dones)
	for {
		s.mu.Lock()
		ep := s.endpoints[endpointID]
		dones = nil
		for k := 0; ep != nil && k < removeBatch; k++ {
			q := ep.fifo.front()
			if q == nil {
				break
			}
			j := q.j
			if j == nil {
				var err error
				if j, err = s.warmLocked(q); errors.Is(err, ErrNotFound) {
					continue // its record is gone; warmLocked dropped the entry
				} else if err != nil {
					s.mu.Unlock()
					wait(dones)
					return n, err
				}
			}
			dones = append(dones, s.finishLocked(j, store.Cancelled, nil, "", true))
			n++
		}
		s.mu.Unlock()
		if len(dones) == 0 {
			return n, firstErr
		}
		wait(dones)
	}
}

// Purge removes every queued job of the endpoint; running jobs continue.
// It works in batches, each removed and written in its own lock hold and
// transaction, so a purge of a million jobs does not stall other requests;
// it returns once every batch is on disk.
func (s *Service) Purge(endpointID string) (int, error) {
	n := 0
	for {
		s.mu.Lock()
		ep := s.endpointLocked(endpointID)
		var ops []store.Op
		for k := 0; k < removeBatch; k++ {
			q := ep.fifo.front()
			if q == nil {
				break
			}
			if q.j != nil {
				ops = append(ops, s.removeLocked(q.j)...)
			} else {
				s.dropColdLocked(q)
				ops = append(ops, store.DeleteJob(q.id, q.seq)...)
			}
			n++
		}
		if len(ops) == 0 {
			s.mu.Unlock()
			return n, nil
		}
		done := s.st.EnqueueState(ops...)
		s.mu.Unlock()
		if err := <-done; err != nil {
			return n, fmt.Errorf("store purge: %w", err)
		}
	}
}

// Health returns the endpoint's job counts and the queue's view of its
// workers (idle / running); the runtime adds container states.
func (s *Service) Health(endpointID string) Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	var h Health
	if ep := s.endpoints[endpointID]; ep != nil {
		h.Jobs = JobCounts{Completed: ep.completed, Failed: ep.failed, InProgress: ep.inProgress, InQueue: ep.fifo.len(), Retried: ep.retried}
	}
	for _, w := range s.workers {
		if w.rec.EndpointID != endpointID || w.lost || w.lastSeen.IsZero() {
			continue
		}
		if w.frozen && len(w.inflight) == 0 {
			h.Workers.Frozen++
		} else if len(w.inflight) > 0 {
			h.Workers.Running++
		} else {
			h.Workers.Idle++
		}
	}
	return h
}

// QueueStats is what the autoscaler reads.
type QueueStats struct {
	InQueue     int
	LowPriority int // of InQueue
	InProgress  int
	// OldestWait is how long the oldest normal-priority queued job has
	// waited (QUEUE_DELAY scaling).
	OldestWait time.Duration
}

// Stats returns the autoscaler's view of an endpoint's queue.
func (s *Service) Stats(endpointID string) QueueStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.endpoints[endpointID]
	if ep == nil {
		return QueueStats{}
	}
	st := QueueStats{InQueue: ep.fifo.len(), LowPriority: ep.low, InProgress: ep.inProgress}
	now := s.clock.Now().UnixNano()
	ep.fifo.each(func(q *qent) bool {
		if q.low {
			return true
		}
		st.OldestWait = time.Duration(now - q.queuedAt)
		return false
	})
	return st
}

// finishLocked moves j to a terminal state, records it, queues its webhook
// in the same write, and tells its worker to stop if it was running.
func (s *Service) finishLocked(j *job, st store.JobStatus, output json.RawMessage, errMsg string, stop bool) <-chan error {
	ep := s.endpointLocked(j.rec.EndpointID)
	now := s.clock.Now()
	switch j.rec.Status {
	case store.InQueue:
		s.unqueueLocked(ep, j)
	case store.InProgress:
		ep.inProgress--
		if w := s.workers[j.rec.WorkerID]; w != nil {
			delete(w.inflight, j.rec.ID)
			if stop {
				w.toStop = append(w.toStop, j.rec.ID)
				wakeStop(w)
			}
		}
	}
	if j.execT != nil {
		j.execT.Stop()
		j.execT = nil
	}
	if f := s.cfg.OnJobFinished; f != nil && !j.rec.StartedAt.IsZero() {
		f(j.rec.EndpointID, st, j.rec.StartedAt.Sub(j.rec.QueuedAt), now.Sub(j.rec.StartedAt))
	}
	j.rec.Status = st
	j.rec.CompletedAt = now
	if output != nil {
		j.rec.Output = output
	}
	j.rec.Error = errMsg
	ret := s.cfg.RunRetention
	if j.rec.Sync {
		ret = s.cfg.SyncRetention
	}
	j.rec.RetainUntil = now.Add(ret)
	s.countTerminalLocked(ep, st, +1)
	s.armRetentionLocked(j)
	ops := jobOps(j)
	if j.rec.Webhook != "" {
		body, _ := json.Marshal(s.viewLocked(j))
		h := &store.OutboxEntry{ID: uuid.NewString(), JobID: j.rec.ID, EndpointID: j.rec.EndpointID, URL: j.rec.Webhook, Body: body, NextAt: now}
		ops = append(ops, store.Put(store.Outbox, h.ID, h))
		defer s.scheduleHook(h)
	}
	j.changedLocked()
	return s.st.EnqueueState(ops...)
}

// rewriteIfPendingLocked writes j's record again when its last write
// failed and waits to be retried: a request about to acknowledge the
// job's state (a repeated cancel or job-done) must not do so before it is
// on disk. Nil when nothing is pending.
func (s *Service) rewriteIfPendingLocked(j *job) <-chan error {
	if !s.st.Pending(store.Jobs, j.rec.ID) {
		return nil
	}
	return s.st.EnqueueState(jobOps(j)...)
}

// removeLocked deletes j from memory and returns the ops deleting it on disk.
func (s *Service) removeLocked(j *job) []store.Op {
	ep := s.endpointLocked(j.rec.EndpointID)
	switch j.rec.Status {
	case store.InQueue:
		s.unqueueLocked(ep, j)
	case store.InProgress:
		ep.inProgress--
		if w := s.workers[j.rec.WorkerID]; w != nil {
			delete(w.inflight, j.rec.ID)
			w.toStop = append(w.toStop, j.rec.ID)
			wakeStop(w)
		}
	default:
		s.countTerminalLocked(ep, j.rec.Status, -1)
	}
	j.stopTimers()
	j.gone = true
	delete(s.jobs, j.rec.ID)
	j.changedLocked()
	return store.DeleteJob(j.rec.ID, j.rec.Seq)
}

// ---- timers ----

func (s *Service) after(at time.Time, fn func()) clockwork.Timer {
	return s.clock.AfterFunc(at.Sub(s.clock.Now()), fn)
}

func (s *Service) armTTLLocked(j *job) {
	for _, t := range j.timers {
		t.Stop()
	}
	at := j.rec.ExpiresAt
	j.timers = []clockwork.Timer{s.after(at, func() { s.expire(j, at) })}
}

func (s *Service) setTTLLocked(j *job, ttl time.Duration) {
	now := s.clock.Now()
	j.rec.ExpiresAt = now.Add(ttl)
	if j.rec.Status.Terminal() && j.rec.RetainUntil.Before(j.rec.ExpiresAt) {
		j.rec.RetainUntil = j.rec.ExpiresAt
		s.armRetentionLocked(j)
	}
	s.armTTLLocked(j)
	s.st.WriteAsync(jobOps(j)...)
}

// expire is the hard ttl: the job goes in any state.
func (s *Service) expire(j *job, at time.Time) {
	s.mu.Lock()
	if j.gone || !j.rec.ExpiresAt.Equal(at) || s.stopped {
		s.mu.Unlock()
		return
	}
	s.log().Info("job expired (ttl)", "endpoint", j.rec.EndpointID, "job", j.rec.ID, "status", j.rec.Status)
	s.st.WriteAsync(s.removeLocked(j)...)
	s.mu.Unlock()
}

func (s *Service) armRetentionLocked(j *job) {
	if j.retT != nil {
		j.retT.Stop()
	}
	at := j.rec.RetainUntil
	j.retT = s.after(at, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if j.gone || s.stopped || !j.rec.Status.Terminal() || !j.rec.RetainUntil.Equal(at) {
			return
		}
		s.st.WriteAsync(s.removeLocked(j)...)
	})
}

func (s *Service) armExecLocked(j *job) {
	if j.execT != nil {
		j.execT.Stop()
	}
	at := j.rec.StartedAt.Add(time.Duration(j.rec.ExecutionTimeoutMs) * time.Millisecond)
	attempt := j.rec.Attempts
	j.execT = s.after(at, func() {
		s.mu.Lock()
		if j.gone || s.stopped || j.rec.Status != store.InProgress || j.rec.Attempts != attempt {
			s.mu.Unlock()
			return
		}
		msg := fmt.Sprintf("execution timeout: the job ran longer than %dms", j.rec.ExecutionTimeoutMs)
		done := s.finishLocked(j, store.TimedOut, nil, msg, true)
		s.mu.Unlock()
		if err := <-done; err != nil {
			s.log().Error("store timed-out job", "endpoint", j.rec.EndpointID, "job", j.rec.ID, "err", err)
		}
	})
}

// ---- helpers ----

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewID returns n random lowercase alphanumerics, RunPod's id shape.
func NewID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

func randomKey() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "bw_" + strings.ToLower(hex.EncodeToString(b))
}

// holdTimer bounds a long poll. Its clock timer starts only when the
// request first has to wait: most job-takes and runsyncs under load find
// their answer at once.
type holdTimer struct {
	clock clockwork.Clock
	d     time.Duration
	t     clockwork.Timer
}

func (s *Service) hold(d time.Duration) *holdTimer { return &holdTimer{clock: s.clock, d: d} }

func (h *holdTimer) C() <-chan time.Time {
	if h.t == nil {
		h.t = h.clock.NewTimer(h.d)
	}
	return h.t.Chan()
}

func (h *holdTimer) Stop() {
	if h.t != nil {
		h.t.Stop()
	}
}

// Watch returns a channel closed at the job's next change (state, output,
// stream chunk or removal).
func (s *Service) Watch(endpointID, id string) (<-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.lookupLocked(endpointID, id)
	if err != nil {
		return nil, err
	}
	return j.changed, nil
}
