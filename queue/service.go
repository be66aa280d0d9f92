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
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"berth/store"
)

// Service is the job queue of every endpoint. Start loads what is stored;
// Stop ends the timers and webhook deliveries.
//
// The lock: one mutex guards the queue's memory, and nothing slow happens
// while it is held. No bbolt read (a job kept only as its entry is read
// with the lock released, then checked again under it), no encoding (the
// writes queued under it carry a snapshot that the store's writer
// encodes), no callback (OnQueueChange, OnJobFinished and webhook
// scheduling run after it is released: see unlock).
type Service struct {
	cfg   Config
	st    Store
	clock clockwork.Clock

	mu            sync.Mutex
	deferred      []func()         // run by unlock, after the lock is released
	jobs          map[string]*job  // loaded jobs: running, or queued and looked at
	cold          map[string]*qent // queued jobs kept only as their queue entry
	coldReady     chan struct{}    // closed once cold holds every entry (see Start)
	exp           expiryHeap       // cold and finished entries by their deadline
	expT          clockwork.Timer  // fires at exp's earliest deadline
	expAt         int64
	endpoints     map[string]*endpointQ
	workers       map[string]*worker
	keys          map[string]string // key hash → worker id
	streams       map[string]*streamBuf
	streamed      int // bytes in streams
	streamDropped uint64
	seq           uint64
	stopped       bool
	damaged       map[string]damagedJob // jobs whose record is damaged (see damaged.go)

	hq      hookQueue
	stopCh  chan struct{}
	wg      sync.WaitGroup
	started bool
}

type job struct {
	rec   store.Job
	input json.RawMessage
	q     *qent // its queue entry while queued
	// unseen: handed to a worker while its container was paused (frozen)
	// and not resumed since: the worker cannot have started it.
	unseen  bool
	changed chan struct{} // closed on every change, then replaced
	timers  []clockwork.Timer
	execT   clockwork.Timer
	gone    bool // removed, or retired to a finished entry
}

type endpointQ struct {
	id      string
	fifo    ring
	waiters *list.List // of *takeWaiter
	low     int        // lowPriority jobs in fifo
	// counts of retained jobs
	inProgress, completed, failed, retried int
	// done: finished jobs kept only as their entry (see retireLocked).
	done map[string]*qent
	// recent: the last finished jobs, listed once gone (recent.go).
	recent  recentRing
	workers map[string]*worker
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
		switch {
		case tw.w.draining: // leaving with nothing
		case !tw.w.frozen:
			return tw
		case first == nil:
			first = tw
		}
	}
	return first
}

func (ep *endpointQ) empty() bool {
	return ep.fifo.len() == 0 && ep.waiters.Len() == 0 && ep.inProgress == 0 && len(ep.done) == 0 && len(ep.workers) == 0
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
	// draining: the worker is being stopped (DrainWorker); it is never
	// handed a job again, and its long polls are answered at once.
	draining bool
}

// New makes a Service; call Start before use.
func New(st Store, cfg Config) *Service {
	cfg.defaults()
	return &Service{
		cfg: cfg, st: st, clock: cfg.Clock,
		jobs: map[string]*job{}, cold: map[string]*qent{}, endpoints: map[string]*endpointQ{},
		workers: map[string]*worker{}, keys: map[string]string{}, streams: map[string]*streamBuf{},
		hq: hookQueue{signal: make(chan struct{}, 1)}, stopCh: make(chan struct{}), coldReady: closedChan,
	}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// awaitIndexLocked makes a look-up of id wait, after a start, until the id
// map of cold entries is complete, unless id is found already (a start fills
// the map in the background: see Start). Call it right after taking the
// lock, before reading anything under it.
func (s *Service) awaitIndexLocked(id string) {
	select {
	case <-s.coldReady:
		return
	default:
	}
	if s.jobs[id] != nil || s.cold[id] != nil {
		return
	}
	ch := s.coldReady
	s.mu.Unlock() // nothing was deferred yet
	<-ch
	s.mu.Lock()
}

func (s *Service) log() interface {
	Info(string, ...any)
	Warn(string, ...any)
	Error(string, ...any)
} {
	return s.cfg.Logger
}

// logLocked is the logger for a line made under the lock: the line is
// written once the lock is released (a slow log sink must not hold it).
func (s *Service) logLocked() deferredLog { return deferredLog{s} }

type deferredLog struct{ s *Service }

func (d deferredLog) Info(msg string, args ...any) {
	l := d.s.cfg.Logger
	d.s.afterLocked(func() { l.Info(msg, args...) })
}

func (d deferredLog) Warn(msg string, args ...any) {
	l := d.s.cfg.Logger
	d.s.afterLocked(func() { l.Warn(msg, args...) })
}

func (d deferredLog) Error(msg string, args ...any) {
	l := d.s.cfg.Logger
	d.s.afterLocked(func() { l.Error(msg, args...) })
}

// unlock releases the lock, then runs the callbacks queued under it.
func (s *Service) unlock() {
	post := s.deferred
	s.deferred = nil
	s.mu.Unlock()
	for _, f := range post {
		f()
	}
}

// afterLocked queues f to run once the lock is released.
func (s *Service) afterLocked(f func()) { s.deferred = append(s.deferred, f) }

// Start loads jobs, workers and pending webhooks from the store and resumes
// every timer from its stored time. Queued and finished jobs are loaded
// from the job index alone; the others (running, or queued with a worker
// that may still answer) in full.
func (s *Service) Start(ctx context.Context) error {
	now := s.clock.Now()
	var ws []store.Worker
	if err := s.st.Scan(store.Workers, func(key string, raw []byte) error {
		var w store.Worker
		if err := json.Unmarshal(raw, &w); err != nil {
			s.log().Error("skipping unreadable worker record", "worker", key, "err", err)
			return nil
		}
		ws = append(ws, w)
		return nil
	}); err != nil {
		return fmt.Errorf("load workers: %w", err)
	}
	var hooks []*store.OutboxEntry
	if err := s.st.Scan(store.Outbox, func(key string, raw []byte) error {
		var e store.OutboxEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			s.log().Error("skipping unreadable webhook outbox record", "key", key, "err", err)
			return nil
		}
		hooks = append(hooks, &e)
		return nil
	}); err != nil {
		return fmt.Errorf("load webhook outbox: %w", err)
	}

	s.mu.Lock()
	for _, w := range ws {
		s.addWorkerLocked(w, now)
	}
	// The scan allocates a million small objects and keeps them all: no
	// collection can free anything meanwhile, so none runs (one does after).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// The index yields jobs in submission order: queued jobs go back in
	// their original order. The maps are made at their final size after
	// the scan (growing them entry by entry cost most of a start).
	var colds, dones []*qent
	loaded := 0
	var slab []qent // entries allocated in blocks: far fewer objects for the GC
	entry := func() *qent {
		if len(slab) == 0 {
			slab = make([]qent, 1024)
		}
		q := &slab[0]
		slab = slab[1:]
		return q
	}
	err := s.st.ScanJobIndex(func(e store.JobEntry, load func() (store.Job, json.RawMessage, error)) error {
		loaded++
		if e.Seq > s.seq {
			s.seq = e.Seq
		}
		ep := s.endpointLocked(e.EndpointID)
		switch {
		case e.Status == store.InQueue && !e.HasWorker:
			q := entry()
			*q = qent{id: e.ID, ep: ep, seq: e.Seq, queuedAt: e.QueuedAt.UnixNano(), expires: e.ExpiresAt.UnixNano(), low: e.LowPriority, hidx: int32(len(s.exp))}
			colds = append(colds, q)
			ep.fifo.pushBack(q)
			s.exp = append(s.exp, q) // ordered once, below
			if q.low {
				ep.low++
			}
			return nil
		case e.Status.Terminal() && !e.RetainUntil.IsZero():
			q := entry()
			*q = qent{id: e.ID, ep: ep, seq: e.Seq, expires: deadline(e.ExpiresAt, e.RetainUntil), fin: finCode(e.Status), hidx: int32(len(s.exp))}
			dones = append(dones, q)
			s.exp = append(s.exp, q)
			s.countTerminalLocked(ep, e.Status, +1)
			return nil
		}
		rec, input, err := load()
		if errors.Is(err, store.ErrDamaged) {
			s.noteDamagedLocked(e.EndpointID, e.ID, err)
			return nil
		}
		if err != nil {
			s.log().Error("skipping unreadable job record", "endpoint", e.EndpointID, "job", e.ID, "err", err)
			return nil
		}
		j := &job{rec: rec, input: input, changed: make(chan struct{})}
		switch j.rec.Status {
		case store.InQueue:
			s.jobs[j.rec.ID] = j
			s.pushLocked(ep, j, false)
		case store.InProgress:
			// The worker may still be running it: keep it with its worker,
			// whose loss timer (or next ping) requeues it if not.
			s.jobs[j.rec.ID] = j
			ep.inProgress++
			w := s.workers[j.rec.WorkerID]
			if w == nil {
				w = s.addWorkerLocked(store.Worker{ID: j.rec.WorkerID, EndpointID: j.rec.EndpointID}, now)
			}
			w.inflight[j.rec.ID] = j
			s.armExecLocked(j)
		default: // finished, from before the index kept the retention
			q := entry()
			*q = qent{id: j.rec.ID, ep: ep, seq: j.rec.Seq, expires: deadline(j.rec.ExpiresAt, j.rec.RetainUntil), fin: finCode(j.rec.Status), hidx: int32(len(s.exp))}
			dones = append(dones, q)
			s.exp = append(s.exp, q)
			s.countTerminalLocked(ep, j.rec.Status, +1)
			return nil
		}
		s.armTTLLocked(j)
		return nil
	}, func(id string, err error) { s.noteDamagedLocked("", id, err) })
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("load jobs: %w", err)
	}
	// The id map of the cold entries is filled in the background, a batch
	// per lock hold: a million inserts are a third of a start. Meanwhile a
	// look-up that misses waits for it (awaitIndexLocked); the queue itself
	// (taking, submitting, counting) does not need it.
	s.cold = make(map[string]*qent, len(colds)+len(s.cold))
	if len(colds) > 0 {
		ready := make(chan struct{})
		s.coldReady = ready
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(ready)
			for i := 0; i < len(colds); i += indexBatch {
				s.mu.Lock()
				for _, q := range colds[i:min(i+indexBatch, len(colds))] {
					if !q.removed && q.j == nil { // not gone or loaded meanwhile
						s.cold[q.id] = q
					}
				}
				s.mu.Unlock()
			}
		}()
	}
	perEp := map[*endpointQ]int{}
	for _, q := range dones {
		perEp[q.ep]++
	}
	for ep, n := range perEp {
		ep.done = make(map[string]*qent, n)
	}
	for _, q := range dones {
		q.ep.done[q.id] = q
	}
	heap.Init(&s.exp)
	s.armExpiryLocked()
	s.started = true
	s.deferred = nil // nothing changed that a hook needs to hear about
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
	j.timers = nil
	if j.execT != nil {
		j.execT.Stop()
		j.execT = nil
	}
}

func (s *Service) endpointLocked(id string) *endpointQ {
	ep := s.endpoints[id]
	if ep == nil {
		ep = &endpointQ{id: id, waiters: list.New(), done: map[string]*qent{}, workers: map[string]*worker{}}
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
	if f := s.cfg.OnQueueChange; f != nil && s.started {
		id := ep.id
		s.afterLocked(func() { f(id) })
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

// warmLocked keeps a cold entry's job loaded, in its place in the queue,
// with its own timers (the caller changes or watches it). rec and input
// were read from the store while the entry was cold: a cold job changes
// only by being warmed first, so they are its current state.
func (s *Service) warmLocked(q *qent, rec store.Job, input json.RawMessage) *job {
	j := &job{rec: rec, input: input, changed: make(chan struct{})}
	q.j, j.q = j, q
	delete(s.cold, q.id)
	s.unexpireLocked(q)
	s.jobs[q.id] = j
	s.armTTLLocked(j)
	return j
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
// earliest deadline exactly (tests count the fake clock's timers).
func (s *Service) unexpireLocked(q *qent) {
	first := q.hidx == 0
	s.exp.drop(q)
	if first && s.expT != nil {
		s.expT.Stop()
		s.expT = nil
		s.armExpiryLocked()
	}
}

// armExpiryLocked sets the timer for the earliest deadline. A timer set for
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
	s.expT = s.clock.AfterFunc(time.Duration(at-s.clock.Now().UnixNano()), s.expireEntries)
}

// expireEntries removes the cold queued jobs whose ttl has passed and the
// finished ones whose retention (or ttl) has, a bounded number per lock
// hold.
func (s *Service) expireEntries() {
	s.mu.Lock()
	defer s.unlock()
	s.expT = nil
	if s.stopped {
		return
	}
	now := s.clock.Now().UnixNano()
	var ops []store.Op
	for n := 0; n < removeBatch && len(s.exp) > 0 && s.exp[0].expires <= now; n++ {
		q := heap.Pop(&s.exp).(*qent)
		if q.fin == 0 {
			s.logLocked().Info("job expired (ttl)", "endpoint", q.ep.id, "job", q.id, "status", store.InQueue)
			s.dropColdLocked(q)
		} else {
			s.dropDoneLocked(q)
		}
		ops = append(ops, store.DeleteJob(q.id, q.seq)...)
	}
	if len(ops) > 0 {
		s.st.WriteAsync(ops...)
	}
	s.armExpiryLocked()
}

// indexBatch is how many cold entries a start's background fill puts in
// the id map per lock hold (a few milliseconds).
const indexBatch = 10000

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
	var inputOp []store.Op
	if len(j.input) <= inlineInput {
		j.rec.Input = j.input
	} else {
		inputOp = []store.Op{store.PutRaw(store.JobInputs, j.rec.ID, j.input)}
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
	// The sequence and the write are taken under the lock so that the
	// index's order is the queue's.
	s.seq++
	j.rec.Seq = s.seq
	done := s.st.Enqueue(append(inputOp, jobOps(j)...)...)
	s.mu.Unlock()
	if err := <-done; err != nil {
		return StatusResponse{}, fmt.Errorf("store job: %w", err)
	}
	s.mu.Lock()
	defer s.unlock()
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

func (s *Service) viewLocked(j *job) StatusResponse { return view(j, s.clock.Now()) }

// view is a job's status body; it reads only j (no lock needed for a job
// nobody else holds).
func view(j *job, now time.Time) StatusResponse {
	r := StatusResponse{ID: j.rec.ID, Status: j.rec.Status, WorkerID: j.rec.WorkerID, Retries: j.rec.Retries, Output: j.rec.Output}
	if !j.rec.StartedAt.IsZero() {
		r.DelayTime = ms(j.rec.StartedAt.Sub(j.rec.QueuedAt))
		end := j.rec.CompletedAt
		if end.IsZero() {
			end = now
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

// ---- finding jobs without reading under the lock ----

// lockJob finds a job and keeps it loaded, with the lock held on return
// (also on error: the caller unlocks). A job kept only as an entry (cold
// queued, or finished) is read from the store with the lock released,
// then the entry is checked again and the job loaded in its place; if the
// entry changed meanwhile the look-up starts over.
func (s *Service) lockJob(endpointID, id string) (*job, error) {
	s.mu.Lock()
	s.awaitIndexLocked(id)
	for {
		if j := s.jobs[id]; j != nil {
			if j.rec.EndpointID != endpointID {
				return nil, ErrNotFound
			}
			return j, nil
		}
		q := s.entryLocked(endpointID, id)
		if q == nil {
			return nil, s.missingLocked(endpointID, id)
		}
		rec, input, err := s.readEntry(q)
		if !s.entryStillLocked(q) {
			continue
		}
		if err != nil {
			return nil, s.unreadableLocked(q, err)
		}
		if q.fin == 0 {
			return s.warmLocked(q, rec, input), nil
		}
		return s.reviveLocked(q, rec, input), nil
	}
}

// entryLocked is the entry of a job kept only as one (cold queued or
// finished), or nil.
func (s *Service) entryLocked(endpointID, id string) *qent {
	if q := s.cold[id]; q != nil {
		if q.ep.id != endpointID {
			return nil
		}
		return q
	}
	if ep := s.endpoints[endpointID]; ep != nil {
		if q := ep.done[id]; q != nil {
			return q
		}
	}
	return nil
}

// entryStillLocked: q is still where readEntry found it.
func (s *Service) entryStillLocked(q *qent) bool {
	if q.fin == 0 {
		return !q.removed && q.j == nil // still queued, still cold
	}
	return q.ep.done[q.id] == q
}

// readEntry reads an entry's job with the lock released (held on entry and
// on return). A finished job whose final write is not on disk yet is
// served from the copy its entry holds.
func (s *Service) readEntry(q *qent) (store.Job, json.RawMessage, error) {
	if q.x != nil && q.x.rec != nil {
		return *q.x.rec, q.x.input, nil
	}
	s.unlock()
	rec, input, err := s.st.LoadJob(q.id)
	s.mu.Lock()
	return rec, input, err
}

// unreadableLocked drops an entry whose record is gone or cannot be read:
// it cannot be handed out or shown (berth check names the damage).
func (s *Service) unreadableLocked(q *qent, err error) error {
	if errors.Is(err, store.ErrDamaged) {
		s.noteDamagedLocked(q.ep.id, q.id, err)
	} else {
		s.logLocked().Error("cannot read a job's record; dropping the job from memory", "endpoint", q.ep.id, "job", q.id, "err", err)
	}
	if q.fin == 0 {
		s.dropColdLocked(q)
	} else {
		s.dropDoneLocked(q)
	}
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	return fmt.Errorf("load job: %w", err)
}

// peek returns a job for reading only: a loaded job is viewed under the
// lock with fn; a job kept as an entry is read from the store (outside the
// lock) into a private copy that fn views without it. It keeps nothing
// loaded.
func (s *Service) peek(endpointID, id string, fn func(j *job, chunks []json.RawMessage)) error {
	s.mu.Lock()
	s.awaitIndexLocked(id)
	for {
		if j := s.jobs[id]; j != nil {
			if j.rec.EndpointID != endpointID {
				s.unlock()
				return ErrNotFound
			}
			fn(j, s.streamLocked(id))
			s.unlock()
			return nil
		}
		q := s.entryLocked(endpointID, id)
		if q == nil {
			err := s.missingLocked(endpointID, id)
			s.unlock()
			return err
		}
		rec, input, err := s.readEntry(q)
		if !s.entryStillLocked(q) {
			continue
		}
		if err != nil {
			err = s.unreadableLocked(q, err)
			s.unlock()
			return err
		}
		chunks := s.streamLocked(id)
		s.unlock()
		fn(&job{rec: rec, input: input}, chunks)
		return nil
	}
}

// Status returns a job's status body. A ttl > 0 resets the job's expiry to
// now + ttl (and keeps a finished job's result at least that long).
func (s *Service) Status(endpointID, id string, ttl time.Duration) (StatusResponse, error) {
	if ttl <= 0 {
		var v StatusResponse
		now := s.clock.Now()
		err := s.peek(endpointID, id, func(j *job, _ []json.RawMessage) { v = view(j, now) })
		return v, err
	}
	if err := s.st.Admit(context.Background()); err != nil {
		return StatusResponse{}, fmt.Errorf("store ttl: %w", err)
	}
	j, err := s.lockJob(endpointID, id)
	defer s.unlock()
	if err != nil {
		return StatusResponse{}, err
	}
	s.setTTLLocked(j, ttl)
	return s.viewLocked(j), nil
}

// Wait blocks until the job is terminal, removed, or wait elapses, and
// returns its status then (for /runsync and /status-sync).
func (s *Service) Wait(ctx context.Context, endpointID, id string, wait time.Duration) (StatusResponse, error) {
	timer := s.hold(wait)
	defer timer.Stop()
	for {
		v, ch, err := s.watchView(endpointID, id)
		if err != nil {
			return StatusResponse{}, err
		}
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

// watchView is the job's view and, while it is not finished, the channel
// closed at its next change (a cold queued job is loaded to be watched).
func (s *Service) watchView(endpointID, id string) (StatusResponse, <-chan struct{}, error) {
	s.mu.Lock()
	s.awaitIndexLocked(id)
	var q *qent
	if s.jobs[id] == nil {
		q = s.entryLocked(endpointID, id)
	}
	fin := q != nil && q.fin != 0
	s.unlock()
	if fin {
		var v StatusResponse
		now := s.clock.Now()
		err := s.peek(endpointID, id, func(j *job, _ []json.RawMessage) { v = view(j, now) })
		if err == nil && v.Status.Terminal() {
			return v, nil, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return v, nil, err
		}
		// Retried or removed meanwhile: look again below.
	}
	j, err := s.lockJob(endpointID, id)
	defer s.unlock()
	if err != nil {
		return StatusResponse{}, nil, err
	}
	return s.viewLocked(j), j.changed, nil
}

// Cancel cancels a queued or running job. A finished job is left as is and
// its status returned.
func (s *Service) Cancel(endpointID, id string) (StatusResponse, error) {
	if err := s.st.Admit(context.Background()); err != nil {
		return StatusResponse{}, fmt.Errorf("store cancel: %w", err)
	}
	s.mu.Lock()
	s.awaitIndexLocked(id)
	if q := s.entryLocked(endpointID, id); q != nil && q.fin != 0 && s.jobs[id] == nil {
		// Finished: its status, read like /status reads it.
		pending := q.x != nil && q.x.rec != nil && s.st.Pending(store.Jobs, id)
		s.unlock()
		var v StatusResponse
		now := s.clock.Now()
		err := s.peek(endpointID, id, func(j *job, _ []json.RawMessage) { v = view(j, now) })
		if err == nil && pending {
			err = s.rewrite(endpointID, id)
		}
		return v, err
	}
	s.unlock()
	j, err := s.lockJob(endpointID, id)
	if err != nil {
		s.unlock()
		return StatusResponse{}, err
	}
	if j.rec.Status.Terminal() {
		v := s.viewLocked(j)
		s.unlock()
		return v, nil
	}
	done := s.finishLocked(j, store.Cancelled, nil, "", true)
	v := s.viewLocked(j)
	s.unlock()
	if err := <-done; err != nil {
		return StatusResponse{}, fmt.Errorf("store cancel: %w", err)
	}
	return StatusResponse{ID: v.ID, Status: v.Status}, nil
}

// rewrite writes a finished job's record again when its last write failed
// and is still waiting to be retried, and waits for it: a request about to
// acknowledge the job's state (a repeated cancel or job-done) must not do
// so before it is on disk.
func (s *Service) rewrite(endpointID, id string) error {
	s.mu.Lock()
	q := s.entryLocked(endpointID, id)
	if q == nil || q.x == nil || q.x.rec == nil || !s.st.Pending(store.Jobs, id) {
		s.unlock()
		return nil
	}
	ch := s.st.EnqueueState(store.PutJob(q.x.rec)...)
	s.unlock()
	if err := <-ch; err != nil {
		return fmt.Errorf("store job: %w", err)
	}
	return nil
}

// Retry requeues a FAILED or TIMED_OUT job under the same id with its
// original input; its previous output and error are removed.
func (s *Service) Retry(endpointID, id string) (StatusResponse, error) {
	if err := s.st.Admit(context.Background()); err != nil {
		return StatusResponse{}, fmt.Errorf("store retry: %w", err)
	}
	j, err := s.lockJob(endpointID, id)
	if err != nil {
		s.unlock()
		return StatusResponse{}, err
	}
	if j.rec.Status != store.Failed && j.rec.Status != store.TimedOut {
		v := s.viewLocked(j)
		if j.rec.Status.Terminal() {
			// Loaded back for nothing: it goes back to its entry.
			s.reretireLocked(j)
		}
		s.unlock()
		return v, ErrNotRetryable
	}
	ep := s.endpointLocked(endpointID)
	s.countTerminalLocked(ep, j.rec.Status, -1)
	now := s.clock.Now()
	j.rec.Status = store.InQueue
	j.rec.Output, j.rec.Error, j.rec.WorkerID = nil, "", ""
	j.rec.StartedAt, j.rec.CompletedAt, j.rec.RetainUntil = time.Time{}, time.Time{}, time.Time{}
	j.rec.QueuedAt = now
	j.rec.Attempts = 0
	j.rec.Retries++
	s.dropStreamLocked(id)
	ep.retried++
	done := s.st.EnqueueState(jobOps(j)...)
	s.pushLocked(ep, j, false)
	s.armTTLLocked(j)
	j.changedLocked()
	s.unlock()
	if err := <-done; err != nil {
		return StatusResponse{}, fmt.Errorf("store retry: %w", err)
	}
	return StatusResponse{ID: id, Status: store.InQueue}, nil
}

// CancelEndpoint cancels every job of the endpoint that is not finished,
// as Cancel does one: running jobs first (their workers are told to stop),
// then the queue, cold entries included (read with the lock released, as
// Take reads them), in batches of removeBatch per lock hold, as Purge
// works. Webhooks fire with CANCELLED. It returns the number cancelled once
// every write is on disk; used when an endpoint is deleted.
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
	if ep := s.endpoints[endpointID]; ep != nil {
		for _, w := range ep.workers {
			for _, j := range w.inflight { // finishLocked removes j from inflight
				dones = append(dones, s.finishLocked(j, store.Cancelled, nil, "", true))
				n++
			}
		}
	}
	s.unlock()
	wait(dones)
	for {
		s.mu.Lock()
		ep := s.endpoints[endpointID]
		dones = nil
		if ep != nil {
			s.loadFrontLocked(ep, removeBatch)
		}
		for k := 0; ep != nil && k < removeBatch; k++ {
			q := ep.fifo.front()
			if q == nil || q.j == nil {
				break // empty, or cold again: read the next batch
			}
			dones = append(dones, s.finishLocked(q.j, store.Cancelled, nil, "", true))
			n++
		}
		empty := ep == nil || ep.fifo.len() == 0
		s.unlock()
		wait(dones)
		if empty || (len(dones) == 0 && firstErr != nil) {
			return n, firstErr
		}
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
			s.unlock()
			return n, nil
		}
		done := s.st.EnqueueState(ops...)
		s.unlock()
		if err := <-done; err != nil {
			return n, fmt.Errorf("store purge: %w", err)
		}
	}
}

// Health returns the endpoint's job counts and the queue's view of its
// workers (idle / running); the runtime adds container states.
func (s *Service) Health(endpointID string) Health {
	s.mu.Lock()
	defer s.unlock()
	var h Health
	ep := s.endpoints[endpointID]
	if ep == nil {
		return h
	}
	h.Jobs = JobCounts{Completed: ep.completed, Failed: ep.failed, InProgress: ep.inProgress, InQueue: ep.fifo.len(), Retried: ep.retried}
	for _, w := range ep.workers {
		if w.lost || w.lastSeen.IsZero() {
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
	defer s.unlock()
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
// in the same write, tells its worker to stop if it was running, and
// retires it to a finished entry (see retireLocked).
func (s *Service) finishLocked(j *job, st store.JobStatus, output json.RawMessage, errMsg string, stop bool) <-chan error {
	ep := s.endpointLocked(j.rec.EndpointID)
	now := s.clock.Now()
	switch j.rec.Status {
	case store.InQueue:
		s.unqueueLocked(ep, j)
	case store.InProgress:
		ep.inProgress--
		if w := s.workers[j.rec.WorkerID]; w != nil {
			dropInflightLocked(w, j.rec.ID)
			if stop {
				w.toStop = append(w.toStop, j.rec.ID)
				wakeStop(w)
			}
		}
	}
	if f := s.cfg.OnJobFinished; f != nil && !j.rec.StartedAt.IsZero() {
		id, delay, exec := j.rec.EndpointID, j.rec.StartedAt.Sub(j.rec.QueuedAt), now.Sub(j.rec.StartedAt)
		s.afterLocked(func() { f(id, st, delay, exec) })
	}
	if f := s.cfg.OnJobEnded; f != nil {
		id, started := j.rec.EndpointID, !j.rec.StartedAt.IsZero()
		var delay, exec time.Duration
		if started {
			delay, exec = j.rec.StartedAt.Sub(j.rec.QueuedAt), now.Sub(j.rec.StartedAt)
		}
		s.afterLocked(func() { f(id, st, started, delay, exec) })
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
	s.recordRecentLocked(ep, j) // recent.go
	ops := jobOps(j)
	var hook *store.OutboxEntry
	if j.rec.Webhook != "" {
		// The body is encoded by the store's writer, with the entry.
		body := s.viewLocked(j)
		hook = &store.OutboxEntry{ID: uuid.NewString(), JobID: j.rec.ID, EndpointID: j.rec.EndpointID, URL: j.rec.Webhook, NextAt: now}
		h := *hook
		ops = append(ops, store.Op{Bucket: store.Outbox, Key: hook.ID, Hint: 300 + len(body.Output), Encode: func() ([]byte, error) {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, err
			}
			hook.Body, h.Body = b, b
			return json.Marshal(h)
		}})
	}
	j.changedLocked()
	return s.retireLocked(j, s.st.EnqueueState(ops...), hook)
}

// retireLocked replaces a finished job in memory by its entry (id, status,
// deadline: a hundred bytes), its record and output staying in bbolt. Until
// the record's write is on disk, the entry keeps the record to serve from;
// a write that failed keeps it until the retried write is known to land
// (then reads come from the store again). hook, when set, is scheduled
// for delivery once the write is done. It returns the write's result.
func (s *Service) retireLocked(j *job, write <-chan error, hook *store.OutboxEntry) <-chan error {
	ep := s.endpointLocked(j.rec.EndpointID)
	j.stopTimers()
	j.gone = true
	delete(s.jobs, j.rec.ID)
	rec := j.rec
	q := &qent{id: rec.ID, ep: ep, seq: rec.Seq, expires: deadline(rec.ExpiresAt, rec.RetainUntil), fin: finCode(rec.Status), hidx: -1,
		x: &qextra{rec: &rec, input: j.input}}
	ep.done[q.id] = q
	s.exp.add(q)
	s.armExpiryLocked()
	out := make(chan error, 1)
	go func() {
		err := <-write
		if err == nil {
			s.mu.Lock()
			if q.ep.done[q.id] == q && q.x != nil {
				// On disk: read from there from now on.
				if q.x.rec, q.x.input = nil, nil; q.x.changed == nil {
					q.x = nil
				}
			}
			s.mu.Unlock()
		}
		if hook != nil {
			s.scheduleHook(hook)
		}
		out <- err
	}()
	return out
}

// reretireLocked puts a finished job loaded back for nothing back to its
// entry; its record is on disk unless a failed write of it is pending.
func (s *Service) reretireLocked(j *job) {
	ch := doneChan(nil)
	if s.st.Pending(store.Jobs, j.rec.ID) {
		ch = s.st.EnqueueState(jobOps(j)...)
	}
	s.retireLocked(j, ch, nil)
}

func doneChan(err error) <-chan error {
	ch := make(chan error, 1)
	ch <- err
	return ch
}

// dropDoneLocked forgets a finished entry (its retention or ttl ended, or
// its record cannot be read).
func (s *Service) dropDoneLocked(q *qent) {
	delete(q.ep.done, q.id)
	s.unexpireLocked(q)
	s.countTerminalLocked(q.ep, finStatus[q.fin], -1)
	s.dropStreamLocked(q.id)
	if q.x != nil && q.x.changed != nil {
		close(q.x.changed)
		q.x.changed = nil
	}
}

// reviveLocked loads a finished entry's job back (a retry, a new ttl, a
// watch): the job gets its timers again and the entry goes.
func (s *Service) reviveLocked(q *qent, rec store.Job, input json.RawMessage) *job {
	delete(q.ep.done, q.id)
	s.unexpireLocked(q)
	j := &job{rec: rec, input: input, changed: make(chan struct{})}
	if q.x != nil && q.x.changed != nil {
		j.changed = q.x.changed // whoever watched the entry watches the job
		q.x.changed = nil
	}
	s.jobs[q.id] = j
	s.armTTLLocked(j)
	return j
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
			dropInflightLocked(w, j.rec.ID)
			w.toStop = append(w.toStop, j.rec.ID)
			wakeStop(w)
		}
	default:
		s.countTerminalLocked(ep, j.rec.Status, -1)
	}
	j.stopTimers()
	j.gone = true
	delete(s.jobs, j.rec.ID)
	s.dropStreamLocked(j.rec.ID)
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
	if j.rec.Status.Terminal() {
		if j.rec.RetainUntil.Before(j.rec.ExpiresAt) {
			j.rec.RetainUntil = j.rec.ExpiresAt
		}
		s.retireLocked(j, s.st.EnqueueState(jobOps(j)...), nil)
		return
	}
	s.armTTLLocked(j)
	s.st.WriteAsync(jobOps(j)...)
}

// expire is the hard ttl of a loaded job: it goes in any state.
func (s *Service) expire(j *job, at time.Time) {
	s.mu.Lock()
	defer s.unlock()
	if j.gone || !j.rec.ExpiresAt.Equal(at) || s.stopped {
		return
	}
	s.logLocked().Info("job expired (ttl)", "endpoint", j.rec.EndpointID, "job", j.rec.ID, "status", j.rec.Status)
	s.st.WriteAsync(s.removeLocked(j)...)
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
			s.unlock()
			return
		}
		msg := fmt.Sprintf("execution timeout: the job ran longer than %dms", j.rec.ExecutionTimeoutMs)
		done := s.finishLocked(j, store.TimedOut, nil, msg, true)
		s.unlock()
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
	s.awaitIndexLocked(id)
	if j := s.jobs[id]; j == nil {
		if q := s.entryLocked(endpointID, id); q != nil && q.fin != 0 {
			// A finished entry: closed when it goes or is revived.
			if q.x == nil {
				q.x = &qextra{}
			}
			if q.x.changed == nil {
				q.x.changed = make(chan struct{})
			}
			ch := q.x.changed
			s.unlock()
			return ch, nil
		}
	}
	s.unlock()
	j, err := s.lockJob(endpointID, id)
	defer s.unlock()
	if err != nil {
		return nil, err
	}
	return j.changed, nil
}

// PruneEndpoints forgets the queue state of endpoints that no longer exist
// (live reports false) and hold nothing: no queued, running or retained
// job, no waiting take, no worker. The cleaner calls it; it returns how
// many went.
func (s *Service) PruneEndpoints(live func(endpointID string) bool) int {
	s.mu.Lock()
	var ids []string
	for id, ep := range s.endpoints {
		if ep.empty() {
			ids = append(ids, id)
		}
	}
	s.unlock()
	n := 0
	for _, id := range ids {
		if live(id) { // outside the lock: it may read the store
			continue
		}
		s.mu.Lock()
		if ep := s.endpoints[id]; ep != nil && ep.empty() {
			delete(s.endpoints, id)
			n++
		}
		s.unlock()
	}
	return n
}
