package store

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The group-commit writer. Writes are queued (Enqueue, EnqueueState,
// WriteAsync, Write) and applied in queue order by one goroutine: while one
// transaction syncs, newly queued writes accumulate and go to disk together
// in the next. What it guarantees beyond that:
//
//   - One write's failure is its own. A write whose op fails (an unknown
//     bucket, an empty key, an encoding error) rolls back only its own
//     attempt: the transaction is run again without it, as bbolt's
//     DB.Batch retries a failing function alone, so only its caller fails.
//     A transaction whose commit fails (a full disk, an I/O error) is split
//     in halves, a bounded number of times, so a write that does not fit
//     does not take smaller ones down with it.
//   - No failure is silent. Every failed write is logged and counted
//     (Stats, on /metrics as berth_store_write_failures_total).
//   - State the caller already holds in memory reaches the disk. Writes
//     queued with EnqueueState or WriteAsync describe a change the caller
//     has already made in memory (a job taken, a ttl moved, a finished job
//     deleted); when they fail on an I/O error they are kept, per key, and
//     written again once the disk takes writes, unless a later write of the
//     same key landed first. Memory and disk then agree again. Enqueue's
//     writes are not kept: their caller changes nothing on failure (a job
//     refused at submission).
//   - The queue of pending writes is bounded. Admit (and Write, which calls
//     it) waits while more than maxPending writes or maxPendingBytes are
//     queued and gives up with ErrBusy after the admit timeout; callers
//     admit new work with it before taking their own locks. Enqueue never
//     blocks, so it may be called under a caller's lock.
//   - A panic inside bbolt (a damaged page met by a write) does not kill the
//     process: the writer stops taking writes, every write from then on
//     fails with ErrCorrupt, and reads go on.

// ErrUnavailable is wrapped by the error of a write that could not be made
// for a reason that may pass (the disk is full, an I/O error, too many
// writes queued): the caller may try again later. HTTP answers it 503.
var ErrUnavailable = errors.New("the database cannot be written right now")

// ErrBusy is returned by Admit when the pending writes stayed over their
// bound for the admit timeout.
var ErrBusy = fmt.Errorf("%w: too many writes are waiting for the disk", ErrUnavailable)

var errClosed = errors.New("store: database closed")

// Write-queue bounds and timings (Options may change the first three).
const (
	defaultMaxPending      = 16384
	defaultMaxPendingBytes = 64 << 20
	defaultAdmitTimeout    = 5 * time.Second
	retryDelay             = time.Second // between attempts at kept writes while the disk fails
	splitBudget            = 32          // extra transactions one failing batch may be split into
)

type batchEntry struct {
	ops  []Op
	done chan error // nil for fire-and-forget writes
	keep bool       // kept and written again after an I/O failure
	seq  uint64     // queue order
	size int
	kept []keptOp // the entry of kept writes written again
}

// keptOp is a failed write kept to be written again.
type keptOp struct {
	op  Op
	seq uint64
}

// WriteStats are the writer's counters.
type WriteStats struct {
	// Failed counts writes (one Enqueue, EnqueueState, WriteAsync or Write
	// call each) whose attempt failed; Kept of them were kept to be
	// written again.
	Failed, Kept uint64
	// Retrying is how many kept writes (by key) wait to be written again.
	Retrying int
	// Pending is how many writes are queued now.
	Pending int
	// Damaged is set once a write or Verify met a broken page: writes are
	// refused.
	Damaged bool
	// DamagedRecords counts the damaged records (and broken pages) found,
	// by reads or by Verify, each once.
	DamagedRecords int
}

// stats are updated on the commit goroutine and read by Stats.
type writerStats struct {
	failed, kept atomic.Uint64
	retrying     atomic.Int64
}

// Write queues ops and waits until they are on disk. It waits for room in
// the write queue first (see Admit).
func (db *DB) Write(ops ...Op) error {
	if err := db.Admit(context.Background()); err != nil {
		return err
	}
	return <-db.Enqueue(ops...)
}

// Enqueue queues ops and returns a channel that yields the commit result.
// It never blocks, so it may be called while holding a caller's lock. On
// failure the ops are dropped: the caller must not have changed anything
// it does not undo.
func (db *DB) Enqueue(ops ...Op) <-chan error {
	ch := make(chan error, 1)
	db.enqueue(&batchEntry{ops: ops, done: ch})
	return ch
}

// EnqueueState is Enqueue for a change the caller has already made in
// memory: if the write fails on an I/O error its ops are kept and written
// again once the disk takes writes (the channel still reports the failed
// attempt).
func (db *DB) EnqueueState(ops ...Op) <-chan error {
	ch := make(chan error, 1)
	db.enqueue(&batchEntry{ops: ops, done: ch, keep: true})
	return ch
}

// WriteAsync queues ops without waiting for them to reach disk, for changes
// already made in memory that are safe to lose in a crash (a taken job not
// yet recorded as taken is simply still queued after a restart). A failure
// is logged, counted and the ops kept to be written again, like
// EnqueueState's.
func (db *DB) WriteAsync(ops ...Op) {
	if len(ops) > 0 {
		db.enqueue(&batchEntry{ops: ops, keep: true})
	}
}

func (db *DB) enqueue(e *batchEntry) {
	for _, op := range e.ops {
		e.size += opSize(op)
	}
	db.mu.Lock()
	if err := db.refusing(); err != nil {
		db.mu.Unlock()
		if e.done != nil {
			e.done <- err
		}
		return
	}
	db.seq++
	e.seq = db.seq
	db.pending = append(db.pending, e)
	db.pendingBytes += e.size
	db.mu.Unlock()
	db.signal()
}

// refusing is why writes are refused now, if they are (db.mu held).
func (db *DB) refusing() error {
	if db.closed {
		return errClosed
	}
	return db.damaged
}

func opSize(op Op) int {
	n := len(op.Bucket) + len(op.Key) + len(op.Value)
	if op.Encode != nil {
		n += op.Hint
	}
	return n
}

// Admit waits until the write queue has room (fewer than its bound of
// pending writes and bytes), ctx ends or the admit timeout passes (then
// ErrBusy). Callers admit new work with it before queuing writes under
// their own locks; it does not reserve anything.
func (db *DB) Admit(ctx context.Context) error {
	var timer *time.Timer
	for {
		db.mu.Lock()
		if err := db.refusing(); err != nil {
			db.mu.Unlock()
			return err
		}
		if len(db.pending) < db.maxPending && db.pendingBytes < db.maxPendingBytes {
			db.mu.Unlock()
			return nil
		}
		room := db.room
		db.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(db.admitTimeout)
			defer timer.Stop()
		}
		select {
		case <-room:
		case <-timer.C:
			return ErrBusy
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stats returns the writer's counters.
func (db *DB) Stats() WriteStats {
	db.mu.Lock()
	pending, damaged, recs := len(db.pending), db.damaged != nil, len(db.damagedRecs)
	db.mu.Unlock()
	return WriteStats{Failed: db.ws.failed.Load(), Kept: db.ws.kept.Load(), Retrying: int(db.ws.retrying.Load()),
		Pending: pending, Damaged: damaged, DamagedRecords: recs}
}

// Pending reports whether a failed write of bucket/key is kept, waiting to
// be written again: the state it carries is not on disk yet.
func (db *DB) Pending(bucket, key string) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	_, ok := db.kept[bucket+"\x00"+key]
	return ok
}

// commitLoop is the group commit.
func (db *DB) commitLoop() {
	defer close(db.done)
	var retryAt time.Time // when kept writes are tried again; zero: at once
	for {
		db.mu.Lock()
		batch := db.pending
		if len(batch) > db.maxBatch {
			batch = batch[:db.maxBatch:db.maxBatch]
			db.pending = db.pending[db.maxBatch:]
		} else {
			db.pending = nil
		}
		for _, e := range batch {
			db.pendingBytes -= e.size
		}
		if len(batch) > 0 {
			close(db.room)
			db.room = make(chan struct{})
		}
		closed := db.closed
		retry := len(db.kept) > 0 && (closed || !time.Now().Before(retryAt))
		if retry {
			// The kept writes are older than anything queued now: they go
			// first, and a newer write of the same key in the batch wins.
			batch = append([]*batchEntry{db.keptEntryLocked()}, batch...)
		}
		waitKept := len(db.kept) > 0
		db.mu.Unlock()
		if len(batch) == 0 {
			if closed {
				return
			}
			if waitKept {
				t := time.NewTimer(time.Until(retryAt))
				select {
				case <-db.wake:
				case <-t.C:
				}
				t.Stop()
			} else {
				<-db.wake
			}
			continue
		}
		start := time.Now()
		ok := db.commitBatch(batch)
		if db.onCommit != nil {
			db.onCommit(time.Since(start), len(batch))
		}
		if ok {
			retryAt = time.Time{}
		} else {
			retryAt = time.Now().Add(retryDelay)
		}
		if closed && retry && len(batch) == 1 {
			// Closing: the kept writes had their last chance.
			db.mu.Lock()
			if n := len(db.kept); n > 0 {
				db.log.Error("store closed with failed writes not on disk", "writes", n)
				clear(db.kept)
				db.ws.retrying.Store(0)
			}
			db.mu.Unlock()
		}
	}
}

// keptEntryLocked is one entry carrying every kept write, in queue order.
func (db *DB) keptEntryLocked() *batchEntry {
	ks := make([]keptOp, 0, len(db.kept))
	for _, k := range db.kept {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b keptOp) int { return int(int64(a.seq - b.seq)) })
	e := &batchEntry{keep: true}
	for _, k := range ks {
		e.ops = append(e.ops, k.op)
	}
	e.kept = ks
	return e
}

// commitBatch writes the batch, isolating failures, and answers every
// entry. It reports whether everything landed.
func (db *DB) commitBatch(batch []*batchEntry) bool {
	// Encode lazy ops here, on the writer, not under the callers' locks.
	live := batch[:0:0]
	for _, e := range batch {
		if err := e.encode(); err != nil {
			err = fmt.Errorf("store: encode %w", err)
			db.log.Error("store write failed", "write", e.describe(), "err", err)
			db.finish(e, err, false)
			continue
		}
		live = append(live, e)
	}
	budget := splitBudget
	return db.commitGroup(live, &budget) && len(live) == len(batch)
}

// opError marks a transaction rolled back because one entry's op failed.
type opError struct {
	entry int
	err   error
}

func (e *opError) Error() string { return e.err.Error() }

// commitGroup commits entries in one transaction and answers each. When an
// entry's op fails, the entries before it are committed together, it is
// tried alone (as bbolt's Batch retries a failing function alone), then the
// entries after it: only its caller fails, and queue order is kept. A
// failed commit is split in halves while budget lasts. It reports whether
// every entry landed.
func (db *DB) commitGroup(entries []*batchEntry, budget *int) bool {
	if len(entries) == 0 {
		return true
	}
	err := db.tx(entries)
	if err == nil {
		for _, e := range entries {
			db.finish(e, nil, false)
		}
		return true
	}
	var oe *opError
	if errors.As(err, &oe) {
		if len(entries) == 1 {
			db.log.Error("store write failed", "write", entries[0].describe(), "err", oe.err)
			db.finish(entries[0], oe.err, false)
			return false
		}
		i := oe.entry
		a := db.commitGroup(entries[:i], budget)
		b := db.commitGroup(entries[i:i+1], budget)
		c := db.commitGroup(entries[i+1:], budget)
		return a && b && c
	}
	if len(entries) > 1 && *budget >= 2 && !errors.Is(err, ErrCorrupt) {
		*budget -= 2
		half := len(entries) / 2
		a := db.commitGroup(entries[:half], budget)
		b := db.commitGroup(entries[half:], budget)
		return a && b
	}
	if !errors.Is(err, ErrCorrupt) {
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	db.log.Error("store write failed", "writes", len(entries), "first", entries[0].describe(), "err", err)
	for _, e := range entries {
		db.finish(e, err, !errors.Is(err, ErrCorrupt))
	}
	return false
}

// tx runs entries' ops in one read-write transaction. A bbolt panic (a
// damaged page) is caught: the database is then marked damaged.
func (db *DB) tx(entries []*batchEntry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(db.bolt.Path(), fmt.Sprintf("a write met a broken page (%v); writes are refused until Berth is restarted on a checked file", r))
			db.markDamaged(err)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return db.bolt.Update(func(tx *bolt.Tx) error {
		for i, e := range entries {
			for _, op := range e.ops {
				if err := apply(tx, op); err != nil {
					return &opError{entry: i, err: fmt.Errorf("%s %q: %w", op.Bucket, op.Key, err)}
				}
			}
		}
		return nil
	})
}

// markDamaged refuses every write from now on with err.
func (db *DB) markDamaged(err error) {
	db.log.Error("database damaged: writes refused", "err", err)
	db.mu.Lock()
	if db.damaged == nil {
		db.damaged = fmt.Errorf("%w%s", err, advice)
	}
	db.mu.Unlock()
}

// finish answers an entry and keeps or forgets its ops: a kept entry that
// failed on an I/O error (retry) is kept per key; one that landed clears
// the older kept writes of its keys.
func (db *DB) finish(e *batchEntry, err error, retry bool) {
	if e.kept != nil {
		db.finishKept(e, err, retry)
		return
	}
	db.mu.Lock()
	switch {
	case err == nil:
		if len(db.kept) > 0 {
			for _, op := range e.ops {
				k := op.Bucket + "\x00" + op.Key
				if ko, ok := db.kept[k]; ok && ko.seq < e.seq {
					delete(db.kept, k)
				}
			}
		}
	case e.keep && retry:
		for _, op := range e.ops {
			k := op.Bucket + "\x00" + op.Key
			if ko, ok := db.kept[k]; !ok || ko.seq < e.seq {
				db.kept[k] = keptOp{op: op, seq: e.seq}
			}
		}
	}
	db.ws.retrying.Store(int64(len(db.kept)))
	db.mu.Unlock()
	if err != nil {
		db.ws.failed.Add(1)
		if e.keep && retry {
			db.ws.kept.Add(1)
		}
	}
	if e.done != nil {
		e.done <- err
	}
}

// finishKept settles the entry of kept writes: on success each is
// forgotten (unless a newer one of its key was kept meanwhile); a kept
// write whose op fails can never land and is dropped.
func (db *DB) finishKept(e *batchEntry, err error, retry bool) {
	if err != nil && retry {
		return // stays kept; the failure was logged with the batch
	}
	db.mu.Lock()
	for _, ko := range e.kept {
		k := ko.op.Bucket + "\x00" + ko.op.Key
		if cur, ok := db.kept[k]; ok && cur.seq == ko.seq {
			delete(db.kept, k)
		}
	}
	db.ws.retrying.Store(int64(len(db.kept)))
	db.mu.Unlock()
	if err != nil {
		db.log.Error("store: dropping kept writes that cannot be applied", "writes", len(e.kept), "err", err)
		return
	}
	db.log.Info("store: failed writes written after all", "writes", len(e.kept))
}

// encode fills the values of lazy ops.
func (e *batchEntry) encode() error {
	for i := range e.ops {
		op := &e.ops[i]
		if op.Encode == nil || op.Value != nil {
			continue
		}
		v, err := op.Encode()
		if err != nil {
			return fmt.Errorf("%s %q: %w", op.Bucket, op.Key, err)
		}
		if v == nil {
			v = []byte{}
		}
		op.Value, op.Encode = v, nil
	}
	return nil
}

func (e *batchEntry) describe() string {
	if len(e.ops) == 0 {
		return "(empty)"
	}
	return e.ops[0].Bucket + "/" + e.ops[0].Key
}

// RetryAfter is what HTTP tells a client refused because the database
// cannot be written for now (the Retry-After header, in seconds).
const RetryAfter = "5"

// Fault classifies an error from a write for a client: a write that could
// not be made for a reason that may pass (ErrUnavailable) is retryable; a
// damaged file (ErrCorrupt) is unavailable but waiting does not help. Both
// are the server's condition, not the client's mistake or a bug: HTTP
// answers them 503, with Retry-After when retryable.
func Fault(err error) (unavailable, retryable bool) {
	switch {
	case errors.Is(err, ErrUnavailable):
		return true, true
	case errors.Is(err, ErrCorrupt):
		return true, false
	}
	return false, false
}
