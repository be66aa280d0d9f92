// Package store is Berth's only user of bbolt: it owns the buckets, the typed
// records kept in them and the group-commit writer that makes job writes
// durable without paying one fsync per request.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bucket names. Every bucket is created on Open.
const (
	Meta          = "meta"
	Templates     = "templates"
	Endpoints     = "endpoints"
	Jobs          = "jobs"
	JobInputs     = "job_inputs"
	Outbox        = "webhook_outbox"
	Workers       = "workers"
	Pods          = "pods"
	Volumes       = "network_volumes"
	RegistryAuths = "registry_auths"
	Usage         = "usage"
	// Releases holds each endpoint version ("<endpointId>/<version, 10
	// digits>"); SSH keys live in Meta under "ssh_keys".
	Releases = "releases"
)

var allBuckets = []string{Meta, Templates, Endpoints, Jobs, JobInputs, JobIndex, Outbox, Workers, Pods, Volumes, RegistryAuths, Usage, Releases}

// fillPercent of the buckets whose keys grow with time (UUIDv7 job ids,
// sequence numbers): bbolt splits pages at half their size by default, which
// leaves every page of an append-only bucket half empty.
var fillPercent = map[string]float64{Jobs: 0.9, JobIndex: 1}

// ErrNotFound is returned when a keyed record does not exist.
var ErrNotFound = errors.New("not found")

// ErrLocked is returned by Open when another process holds the database.
var ErrLocked = errors.New("database is locked by another process")

// Op is one write: Value nil deletes Key.
type Op struct {
	Bucket string
	Key    string
	Value  []byte
}

// Put returns an Op storing v as JSON. It panics only on values that cannot
// be marshalled, which are programming errors (all records are plain structs).
func Put(bucket, key string, v any) Op {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("store: marshal %s/%s: %v", bucket, key, err))
	}
	return Op{Bucket: bucket, Key: key, Value: b}
}

// PutRaw returns an Op storing raw bytes.
func PutRaw(bucket, key string, raw []byte) Op {
	if raw == nil {
		raw = []byte{}
	}
	return Op{Bucket: bucket, Key: key, Value: raw}
}

// Delete returns an Op removing key.
func Delete(bucket, key string) Op { return Op{Bucket: bucket, Key: key} }

// Procs is the GOMAXPROCS Berth runs with: twice the CPUs. The group
// commit blocks in fdatasync twice per transaction; with no spare P it then
// waits behind every runnable request goroutine, which halves durable
// throughput on small machines (see the README's performance section).
func Procs() int { return 2 * goruntime.NumCPU() }

// DB is an open Berth database.
type DB struct {
	bolt *bolt.DB

	mu      sync.Mutex
	pending []*batchEntry
	wake    chan struct{}
	closed  bool
	done    chan struct{}

	// MaxBatch bounds how many queued writes share one transaction.
	maxBatch int

	onCommit func(time.Duration, int)
}

type batchEntry struct {
	ops  []Op
	done chan error // nil for fire-and-forget writes
}

// Options tunes Open.
type Options struct {
	// NoSync turns fsync off. Only benchmarks comparing against a memory
	// ceiling use it; Berth itself never does.
	NoSync bool
	// OnCommit, if set, is told how long each group-commit transaction
	// took (fsync included) and how many writes it carried. For metrics;
	// called on the commit goroutine: must not block.
	OnCommit func(took time.Duration, writes int)
}

// Open opens (creating if needed) the database file at path.
func Open(path string, opts Options) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	b, err := openBolt(path, &bolt.Options{
		Timeout:        time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		NoSync:         opts.NoSync,
	}, func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return migrate(tx)
	})
	if err != nil {
		return nil, err
	}
	db := &DB{bolt: b, wake: make(chan struct{}, 1), done: make(chan struct{}), maxBatch: 4096, onCommit: opts.OnCommit}
	db.releaseMapped()
	go db.commitLoop()
	return db, nil
}

// Path is the database file's path.
func (db *DB) Path() string { return db.bolt.Path() }

// Close flushes queued writes and closes the file.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	db.mu.Unlock()
	db.signal()
	<-db.done
	// The last commit writes the free-page list, so the next Open reads it
	// instead of rebuilding it by walking and checking every page of the
	// file (seconds for a million jobs). Commits in between skip it (it is
	// costly once many pages are free); after a crash Open walks the file.
	db.bolt.NoFreelistSync = false
	var txid int
	err := db.bolt.Update(func(tx *bolt.Tx) error { txid = tx.ID(); return nil })
	path := db.bolt.Path()
	if err = errors.Join(err, db.bolt.Close()); err == nil {
		writeCleanMarker(path, txid) // the next Open may skip its page walk
	}
	return err
}

func (db *DB) signal() {
	select {
	case db.wake <- struct{}{}:
	default:
	}
}

// Write queues ops for the group-commit writer and waits until they are on
// disk. Writes are applied in the order they were queued, across Write and
// WriteAsync, so callers that queue under their own lock get that order.
func (db *DB) Write(ops ...Op) error {
	return <-db.Enqueue(ops...)
}

// Enqueue queues ops and returns a channel that yields the commit result.
// It never blocks, so it may be called while holding a caller's lock.
func (db *DB) Enqueue(ops ...Op) <-chan error {
	ch := make(chan error, 1)
	db.enqueue(&batchEntry{ops: ops, done: ch})
	return ch
}

// WriteAsync queues ops without waiting for them to reach disk. Used for
// transitions that are safe to lose in a crash (a taken job that is not yet
// recorded as taken is simply still queued after a restart).
func (db *DB) WriteAsync(ops ...Op) {
	db.enqueue(&batchEntry{ops: ops})
}

func (db *DB) enqueue(e *batchEntry) {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		if e.done != nil {
			e.done <- errors.New("store: database closed")
		}
		return
	}
	db.pending = append(db.pending, e)
	db.mu.Unlock()
	db.signal()
}

// commitLoop is the group commit: while one transaction is being synced,
// newly queued writes accumulate and go to disk together in the next one.
func (db *DB) commitLoop() {
	defer close(db.done)
	for {
		db.mu.Lock()
		batch := db.pending
		if len(batch) > db.maxBatch {
			batch = batch[:db.maxBatch:db.maxBatch]
			db.pending = db.pending[db.maxBatch:]
		} else {
			db.pending = nil
		}
		closed := db.closed
		db.mu.Unlock()
		if len(batch) == 0 {
			if closed {
				return
			}
			<-db.wake
			continue
		}
		start := time.Now()
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			for _, e := range batch {
				for _, op := range e.ops {
					if err := apply(tx, op); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if db.onCommit != nil {
			db.onCommit(time.Since(start), len(batch))
		}
		for _, e := range batch {
			if e.done != nil {
				e.done <- err
			}
		}
	}
}

func apply(tx *bolt.Tx, op Op) error {
	b := tx.Bucket([]byte(op.Bucket))
	if b == nil {
		return fmt.Errorf("store: unknown bucket %q", op.Bucket)
	}
	if f, ok := fillPercent[op.Bucket]; ok {
		b.FillPercent = f
	}
	if op.Value == nil {
		return b.Delete([]byte(op.Key))
	}
	return b.Put([]byte(op.Key), op.Value)
}

// Tx is a closure transaction over the typed buckets.
type Tx struct{ tx *bolt.Tx }

// Update runs fn in its own read-write transaction (not group-committed);
// management writes that must read and check before writing use it.
// It waits for queued group-commit writes first so it sees them.
func (db *DB) Update(fn func(tx *Tx) error) error {
	if err := db.Write(); err != nil {
		return err
	}
	return db.bolt.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx}) })
}

// View runs fn in a read-only transaction.
func (db *DB) View(fn func(tx *Tx) error) error {
	return db.bolt.View(func(tx *bolt.Tx) error { return fn(&Tx{tx}) })
}

// Get decodes the JSON record at bucket/key into v.
func (t *Tx) Get(bucket, key string, v any) error {
	raw := t.tx.Bucket([]byte(bucket)).Get([]byte(key))
	if raw == nil {
		return fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode %s %q: %w", bucket, key, err)
	}
	return nil
}

// GetRaw returns a copy of the bytes at bucket/key, or nil.
func (t *Tx) GetRaw(bucket, key string) []byte {
	raw := t.tx.Bucket([]byte(bucket)).Get([]byte(key))
	if raw == nil {
		return nil
	}
	return append([]byte(nil), raw...)
}

// Apply performs ops inside this transaction.
func (t *Tx) Apply(ops ...Op) error {
	for _, op := range ops {
		if err := apply(t.tx, op); err != nil {
			return err
		}
	}
	return nil
}

// ForEach calls fn for each key in bucket in key order. raw is only valid
// during the call.
func (t *Tx) ForEach(bucket string, fn func(key string, raw []byte) error) error {
	return t.tx.Bucket([]byte(bucket)).ForEach(func(k, v []byte) error { return fn(string(k), v) })
}

// Scan reads every record of bucket in its own transaction.
func (db *DB) Scan(bucket string, fn func(key string, raw []byte) error) error {
	return db.View(func(tx *Tx) error { return tx.ForEach(bucket, fn) })
}

// Check verifies the file's internal consistency (bbolt's tx.Check). It
// runs in a write transaction so no commit changes the freelist under it.
func (db *DB) Check() error {
	if err := db.Write(); err != nil {
		return err
	}
	return db.bolt.Update(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}
