package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// JobIndex holds one small entry per job, written in the same transaction
// as the job's record: what the queue needs to order and hand out jobs and
// to find the ones it must load in full at start-up. Keys are the job's
// sequence number (8 bytes, big-endian) followed by its id, so a scan
// yields jobs in submission order without decoding any record.
const JobIndex = "job_index"

// layoutKey in Meta names the file's layout version; files without it
// predate the job index and are migrated on Open.
const (
	layoutKey     = "layout"
	layoutVersion = "2"
)

// JobEntry is a job's index entry.
type JobEntry struct {
	ID          string
	EndpointID  string
	Seq         uint64
	Status      JobStatus
	LowPriority bool
	// HasWorker: the record names a worker (a queued job with it is one
	// whose worker was presumed lost and whose late result is welcome).
	HasWorker bool
	QueuedAt  time.Time
	ExpiresAt time.Time
	// RetainUntil is a finished job's retention end; zero in entries
	// written before it was indexed (the record has it then).
	RetainUntil time.Time
}

// Entry returns the job's index entry.
func (j *Job) Entry() JobEntry {
	return JobEntry{ID: j.ID, EndpointID: j.EndpointID, Seq: j.Seq, Status: j.Status, LowPriority: j.LowPriority,
		HasWorker: j.WorkerID != "", QueuedAt: j.QueuedAt, ExpiresAt: j.ExpiresAt, RetainUntil: j.RetainUntil}
}

var statusCodes = []JobStatus{InQueue, InProgress, Completed, Failed, Cancelled, TimedOut}

const (
	flagLow = 1 << iota
	flagWorker
	flagRetain // 8 bytes of retainUntil follow the fixed fields
)

func indexKey(seq uint64, id string) []byte {
	k := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(k, seq)
	return append(k, id...)
}

// encode: status code, flags, queuedAt and expiresAt (Unix ns), for a
// finished job retainUntil (Unix ns, with flagRetain), endpoint id.
func (e JobEntry) encode() []byte {
	b := make([]byte, 18, 26+len(e.EndpointID))
	for i, s := range statusCodes {
		if s == e.Status {
			b[0] = byte(i)
		}
	}
	if e.LowPriority {
		b[1] |= flagLow
	}
	if e.HasWorker {
		b[1] |= flagWorker
	}
	binary.BigEndian.PutUint64(b[2:], uint64(e.QueuedAt.UnixNano()))
	binary.BigEndian.PutUint64(b[10:], uint64(e.ExpiresAt.UnixNano()))
	if !e.RetainUntil.IsZero() {
		b[1] |= flagRetain
		b = binary.BigEndian.AppendUint64(b, uint64(e.RetainUntil.UnixNano()))
	}
	return append(b, e.EndpointID...)
}

// decodeEntry reuses endpoint when the entry names the same one (the
// compiler compares without allocating): a scan allocates only the ids.
func decodeEntry(k, v []byte, endpoint string) (JobEntry, error) {
	if len(k) < 8 || len(v) < 18 || int(v[0]) >= len(statusCodes) {
		return JobEntry{}, errors.New("malformed job index entry")
	}
	var retain time.Time
	rest := v[18:]
	if v[1]&flagRetain != 0 {
		if len(rest) < 8 {
			return JobEntry{}, errors.New("malformed job index entry")
		}
		retain = time.Unix(0, int64(binary.BigEndian.Uint64(rest)))
		rest = rest[8:]
	}
	if string(rest) != endpoint {
		endpoint = string(rest)
	}
	return JobEntry{
		RetainUntil: retain,
		Seq:         binary.BigEndian.Uint64(k), ID: string(k[8:]), Status: statusCodes[v[0]],
		LowPriority: v[1]&flagLow != 0, HasWorker: v[1]&flagWorker != 0,
		QueuedAt:   time.Unix(0, int64(binary.BigEndian.Uint64(v[2:]))),
		ExpiresAt:  time.Unix(0, int64(binary.BigEndian.Uint64(v[10:]))),
		EndpointID: endpoint,
	}, nil
}

// PutJob returns the ops storing a job's record and its index entry. The
// record is encoded without reflection (see jobjson.go) and not here: the
// op holds a copy of j and the writer encodes it, so a caller may queue it
// under its own lock without paying for the encoding there.
func PutJob(j *Job) []Op {
	snap := *j // the fields are replaced, never changed in place
	e := snap.Entry()
	return []Op{
		{Bucket: Jobs, Key: snap.ID, Encode: snap.MarshalJSON, Hint: 300 + len(snap.Input) + len(snap.Output) + len(snap.Error)},
		{Bucket: JobIndex, Key: string(indexKey(e.Seq, e.ID)), Value: e.encode()},
	}
}

// DeleteJob returns the ops removing a job: record, stored input, index.
func DeleteJob(id string, seq uint64) []Op {
	return []Op{Delete(Jobs, id), Delete(JobInputs, id), Delete(JobIndex, string(indexKey(seq, id)))}
}

// LoadJob reads a job's record and its input (kept in the record or, when
// large, in JobInputs).
func (db *DB) LoadJob(id string) (Job, json.RawMessage, error) {
	var j Job
	var input json.RawMessage
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		j, input, err = db.loadJob(tx, id)
		return err
	})
	return j, input, err
}

// A record whose checksum does not match, or that does not decode, is an
// error wrapping ErrDamaged.
func (db *DB) loadJob(tx *bolt.Tx, id string) (Job, json.RawMessage, error) {
	var j Job
	raw := tx.Bucket([]byte(Jobs)).Get([]byte(id))
	if raw == nil {
		return j, nil, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	raw, err := db.open(Jobs, id, raw)
	if err != nil {
		return j, nil, err
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return j, nil, &DamagedError{Bucket: Jobs, Key: id, Why: "does not decode: " + err.Error()}
	}
	input := j.Input
	if input == nil {
		if raw := tx.Bucket([]byte(JobInputs)).Get([]byte(id)); raw != nil {
			p, err := db.open(JobInputs, id, raw)
			if err != nil {
				return j, nil, err
			}
			input = append(json.RawMessage(nil), p...)
		}
	}
	return j, input, nil
}

// ScanJobIndex calls fn for every job's index entry in sequence order,
// decoding no record; load reads the entry's record and input when fn
// needs them. A damaged entry is skipped and reported to damaged with the
// job's id (and counted, see DamagedRecords): its job is not served.
func (db *DB) ScanJobIndex(fn func(e JobEntry, load func() (Job, json.RawMessage, error)) error, damaged func(id string, err error)) error {
	defer db.releaseMapped()
	return db.view(func(tx *bolt.Tx) error {
		var lastEndpoint string
		return tx.Bucket([]byte(JobIndex)).ForEach(func(k, v []byte) error {
			id := recordKey(JobIndex, k)
			p, err := db.open(JobIndex, id, v)
			var e JobEntry
			if err == nil {
				if e, err = decodeEntry(k, p, lastEndpoint); err != nil {
					err = &DamagedError{Bucket: JobIndex, Key: id, Why: err.Error()}
					db.noteDamaged(err.(*DamagedError))
				}
			}
			if err != nil {
				if damaged != nil && len(k) > 8 {
					damaged(string(k[8:]), err)
				}
				return nil
			}
			lastEndpoint = e.EndpointID
			return fn(e, func() (Job, json.RawMessage, error) { return db.loadJob(tx, e.ID) })
		})
	})
}

// migrate brings a file written before the job index up to date: it builds
// the index from the job records, in the transaction that creates the
// buckets, so a crash leaves either the old layout or the new one.
func migrate(tx *bolt.Tx) error {
	meta := tx.Bucket([]byte(Meta))
	if v, _ := unseal(meta.Get([]byte(layoutKey)), true); string(v) == layoutVersion {
		return nil
	}
	idx := tx.Bucket([]byte(JobIndex))
	idx.FillPercent = 1
	err := tx.Bucket([]byte(Jobs)).ForEach(func(k, v []byte) error {
		var j Job
		v, why := unseal(v, true)
		if why != "" {
			return nil // found by the checks
		}
		if err := json.Unmarshal(v, &j); err != nil {
			// Unreadable before too (the queue skipped it): leave it be.
			return nil
		}
		j.ID = string(k)
		e := j.Entry()
		return idx.Put(indexKey(e.Seq, e.ID), seal(e.encode()))
	})
	if err != nil {
		return fmt.Errorf("build job index: %w", err)
	}
	return meta.Put([]byte(layoutKey), seal([]byte(layoutVersion)))
}
