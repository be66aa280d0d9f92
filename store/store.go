// Package store is Berth's only user of bbolt: it owns the buckets, the typed
// records kept in them and the group-commit writer that makes job writes
// durable without paying one fsync per request.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
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
	// Builds holds image builds by id; BuildLogs their logs (raw text,
	// capped), same key.
	Builds    = "builds"
	BuildLogs = "build_logs"
	// APIKeys holds the API keys (APIKey, by key id): their hashes, never
	// the secrets. Audit holds the audit trail (AuditEntry, by a time-
	// ordered key), trimmed to its newest entries (Tx.Trim).
	APIKeys = "api_keys"
	Audit   = "audit"
	// GitCredentials holds the git credentials builds clone with
	// (GitCredential, by id).
	GitCredentials = "git_credentials"
	// GitHooks holds each endpoint's push-to-deploy webhook secret and
	// recent deliveries (GitHook, by endpoint id).
	GitHooks = "git_hooks"
)

var allBuckets = []string{Meta, Templates, Endpoints, Jobs, JobInputs, JobIndex, Outbox, Workers, Pods, Volumes, RegistryAuths, Usage, Releases, Builds, BuildLogs, APIKeys, Audit, GitCredentials, GitHooks}

// fillPercent of the buckets whose keys grow with time (UUIDv7 job ids,
// sequence numbers): bbolt splits pages at half their size by default, which
// leaves every page of an append-only bucket half empty.
var fillPercent = map[string]float64{Jobs: 0.9, JobIndex: 1}

// ErrNotFound is returned when a keyed record does not exist.
var ErrNotFound = errors.New("not found")

// ErrLocked is returned by Open when another process holds the database.
var ErrLocked = errors.New("database is locked by another process")

// Op is one write: Value and Encode nil deletes Key.
type Op struct {
	Bucket string
	Key    string
	Value  []byte
	// Encode, when Value is nil, produces the value on the writer's
	// goroutine: a caller queues a snapshot under its own lock and the
	// encoding happens outside it. Hint is the value's expected size, for
	// the bound on pending writes.
	Encode func() ([]byte, error)
	Hint   int
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
	log  *slog.Logger

	mu           sync.Mutex
	pending      []*batchEntry
	pendingBytes int
	room         chan struct{} // closed (and replaced) when pending writes are taken
	seq          uint64
	kept         map[string]keptOp // failed writes to write again, by bucket and key
	damaged      error             // set when a write met a broken page
	damagedRecs  map[string]bool   // damaged records found (bucket, key)
	wake         chan struct{}
	closed       bool
	done         chan struct{}
	ws           writerStats

	maxBatch        int // queued writes sharing one transaction
	maxPending      int
	maxPendingBytes int
	admitTimeout    time.Duration

	onCommit func(time.Duration, int)
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
	// Logger gets failed writes and damage found [slog.Default].
	Logger *slog.Logger
	// MaxPending and MaxPendingBytes bound the writes waiting for the disk
	// [16384, 64 MiB]; Admit waits up to AdmitTimeout [5s] for room.
	MaxPending      int
	MaxPendingBytes int
	AdmitTimeout    time.Duration
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
	db := &DB{bolt: b, log: opts.Logger, wake: make(chan struct{}, 1), done: make(chan struct{}), room: make(chan struct{}),
		kept: map[string]keptOp{}, maxBatch: 4096, onCommit: opts.OnCommit,
		maxPending: opts.MaxPending, maxPendingBytes: opts.MaxPendingBytes, admitTimeout: opts.AdmitTimeout}
	if db.log == nil {
		db.log = slog.Default()
	}
	if db.maxPending <= 0 {
		db.maxPending = defaultMaxPending
	}
	if db.maxPendingBytes <= 0 {
		db.maxPendingBytes = defaultMaxPendingBytes
	}
	if db.admitTimeout <= 0 {
		db.admitTimeout = defaultAdmitTimeout
	}
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
	db.mu.Lock()
	damaged := db.damaged
	db.mu.Unlock()
	path := db.bolt.Path()
	if damaged != nil {
		// No last write into a damaged file, and no marker: the next Open
		// walks it (and refuses it).
		return errors.Join(damaged, db.bolt.Close())
	}
	db.bolt.NoFreelistSync = false
	var txid int
	err := db.bolt.Update(func(tx *bolt.Tx) error { txid = tx.ID(); return nil })
	if err = errors.Join(err, db.bolt.Close()); err == nil {
		writeCleanMarker(path, txid) // the next Open may skip its page walk
	}
	return err
}

// noteDamaged counts a damaged record a read met, logging it the first
// time.
func (db *DB) noteDamaged(e *DamagedError) {
	if db.noteProblem(Problem{Bucket: e.Bucket, Key: e.Key, Err: errors.New(e.Why)}) {
		db.log.Error("damaged record: it is skipped by lists and its own reads fail", "bucket", e.Bucket, "key", e.Key, "why", e.Why)
	}
}

// noteProblem counts a problem once; it reports whether it is new.
func (db *DB) noteProblem(p Problem) bool {
	k := fmt.Sprint(p.Page, "\x00", p.Bucket, "\x00", p.Key)
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.damagedRecs[k] {
		return false
	}
	if db.damagedRecs == nil {
		db.damagedRecs = map[string]bool{}
	}
	db.damagedRecs[k] = true
	return true
}

func (db *DB) signal() {
	select {
	case db.wake <- struct{}{}:
	default:
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
	if op.Value == nil && op.Encode == nil {
		return b.Delete([]byte(op.Key))
	}
	if op.Value == nil {
		v, err := op.Encode()
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		op.Value = v
	}
	return b.Put([]byte(op.Key), seal(op.Value))
}

// Tx is a closure transaction over the typed buckets.
type Tx struct {
	tx *bolt.Tx
	db *DB
}

// value is the verified payload of bucket/key: nil when absent, an error
// wrapping ErrDamaged when its checksum does not match.
func (t *Tx) value(bucket, key string) ([]byte, error) {
	raw := t.tx.Bucket([]byte(bucket)).Get([]byte(key))
	if raw == nil {
		return nil, nil
	}
	return t.db.open(bucket, key, raw)
}

// open verifies a stored value; a damaged one is noted (logged once,
// counted on /metrics).
func (db *DB) open(bucket, key string, raw []byte) ([]byte, error) {
	p, why := unseal(raw, false)
	if why != "" {
		err := &DamagedError{Bucket: bucket, Key: showKey([]byte(key)), Why: why}
		db.noteDamaged(err)
		return nil, err
	}
	return p, nil
}

// Update runs fn in its own read-write transaction (not group-committed);
// management writes that must read and check before writing use it.
// It waits for queued group-commit writes first so it sees them.
// An error of fn is returned as it is; a failed commit wraps
// ErrUnavailable, and a damaged page met on the way ErrCorrupt.
func (db *DB) Update(fn func(tx *Tx) error) (err error) {
	if err := db.Write(); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(db.bolt.Path(), fmt.Sprintf("a write met a broken page (%v); writes are refused until Berth is restarted on a checked file", r))
			db.markDamaged(err)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	tx, err := db.bolt.Begin(true)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer tx.Rollback() // after a commit: a no-op
	if err := fn(&Tx{tx, db}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// View runs fn in a read-only transaction. A damaged page met on the way
// is an error wrapping ErrCorrupt, not a panic.
func (db *DB) View(fn func(tx *Tx) error) error {
	return db.view(func(tx *bolt.Tx) error { return fn(&Tx{tx, db}) })
}

// view is bbolt's View with its panics on a broken page (and faults past
// the mapping) turned into ErrCorrupt.
func (db *DB) view(fn func(tx *bolt.Tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(db.bolt.Path(), fmt.Sprintf("a read met a broken page (%v)", r))
			db.log.Error("database damaged: a read met a broken page", "err", err)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return db.bolt.View(fn)
}

// Get decodes the JSON record at bucket/key into v. A record whose
// checksum does not match is an error wrapping ErrDamaged.
func (t *Tx) Get(bucket, key string, v any) error {
	raw, err := t.value(bucket, key)
	if err != nil {
		return err
	}
	if raw == nil {
		return fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode %s %q: %w", bucket, key, err)
	}
	return nil
}

// GetRaw returns a copy of the bytes at bucket/key, or nil when there is
// no record. A damaged record's bytes are returned all the same (callers
// test for existence with it; Get then reports the damage).
func (t *Tx) GetRaw(bucket, key string) []byte {
	raw := t.tx.Bucket([]byte(bucket)).Get([]byte(key))
	if raw == nil {
		return nil
	}
	if p, why := unseal(raw, false); why == "" {
		raw = p
	} else if len(raw) >= sealSize && raw[0] == sealTag {
		raw = raw[sealSize:]
	}
	return append([]byte{}, raw...)
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

// ForEach calls fn for each record of bucket in key order. raw is only
// valid during the call. A damaged record is skipped (logged and counted
// once: see DamagedRecords).
func (t *Tx) ForEach(bucket string, fn func(key string, raw []byte) error) error {
	return t.tx.Bucket([]byte(bucket)).ForEach(func(k, v []byte) error {
		p, err := t.db.open(bucket, string(k), v)
		if err != nil {
			return nil
		}
		return fn(string(k), p)
	})
}

// Trim deletes the first (oldest, for time-ordered keys) records of
// bucket until at most max remain; it returns how many it deleted.
func (t *Tx) Trim(bucket string, max int) (int, error) {
	b := t.tx.Bucket([]byte(bucket))
	extra := b.Stats().KeyN - max
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil && n < extra; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// ForEachKey calls fn for each key of bucket, damaged records included.
func (t *Tx) ForEachKey(bucket string, fn func(key string) error) error {
	return t.tx.Bucket([]byte(bucket)).ForEach(func(k, _ []byte) error { return fn(string(k)) })
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
