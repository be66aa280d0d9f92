package store

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
	"strings"
	"time"
	"unicode"

	bolt "go.etcd.io/bbolt"
)

// Record-level checks. bbolt's own checks (its page walk, tx.Check) see the
// page tree, not what the pages hold: a zeroed block inside a record's
// overflow pages passes them and fails only when the record is decoded
// (every /v2/registries call answered 500 over one such record). So every
// record is decoded with its bucket's type:
//   - berth check decodes all of them (Check);
//   - Open decodes the small buckets (everything but the jobs) and refuses
//     the file if one does not decode, naming the bucket and key;
//   - a running Berth decodes the jobs, and walks every page when the
//     clean-close marker let Open skip it, in the background (Verify).

// decoders decode one record of each bucket; nil means the value is any
// bytes.
var decoders = map[string]func(k, v []byte) error{
	Meta:           decodeMeta,
	Templates:      jsonInto[Template],
	Endpoints:      jsonInto[Endpoint],
	Jobs:           jsonInto[Job],
	JobInputs:      validJSON,
	JobIndex:       func(k, v []byte) error { _, err := decodeEntry(k, v, ""); return err },
	Outbox:         jsonInto[OutboxEntry],
	Workers:        jsonInto[Worker],
	Pods:           jsonInto[Pod],
	Volumes:        jsonInto[NetworkVolume],
	RegistryAuths:  jsonInto[RegistryAuth],
	Usage:          decodeUsage,
	Releases:       jsonInto[Release],
	Builds:         jsonInto[Build],
	BuildLogs:      nil,
	APIKeys:        jsonInto[APIKey],
	Audit:          jsonInto[AuditEntry],
	GitCredentials: jsonInto[GitCredential],
	GitHooks:       jsonInto[GitHook],
}

// jobBuckets are decoded in the background by a running Berth, not by Open:
// a million jobs take seconds.
var jobBuckets = map[string]bool{Jobs: true, JobInputs: true, JobIndex: true}

func jsonInto[T any](_, v []byte) error {
	var x T
	return json.Unmarshal(v, &x)
}

func validJSON(_, v []byte) error {
	if !json.Valid(v) {
		return errors.New("not valid JSON")
	}
	return nil
}

func decodeMeta(k, v []byte) error {
	switch string(k) {
	case "api_key_hash":
		if b, err := hex.DecodeString(string(v)); err != nil || len(b) != 32 {
			return errors.New("not a SHA-256 hash in hex")
		}
	case layoutKey:
		if len(v) == 0 || strings.Trim(string(v), "0123456789") != "" {
			return errors.New("not a layout number")
		}
	case aliveKey:
		_, err := time.Parse(time.RFC3339Nano, string(v))
		return err
	case "ssh_keys":
		var keys []string
		return json.Unmarshal(v, &keys)
	}
	return nil
}

func decodeUsage(k, v []byte) error {
	switch {
	case strings.HasPrefix(string(k), ivPrefix):
		return jsonInto[UsageInterval](k, v)
	case strings.HasPrefix(string(k), openPrefix):
		if !strings.HasPrefix(string(v), ivPrefix) || !printable(v) {
			return errors.New("not the key of an interval")
		}
		return nil
	}
	return errors.New("unexpected key in the usage bucket")
}

// Problem is a record that does not decode, or a page that is broken.
type Problem struct {
	Bucket string
	Key    string // printable, else hex
	Err    error
	Page   bool // the page tree is broken (not only one record)
}

func (p Problem) String() string {
	var ce checksumError
	switch {
	case p.Page:
		return fmt.Sprintf("bucket %s near key %s: broken page: %v", p.Bucket, p.Key, p.Err)
	case errors.As(p.Err, &ce):
		return fmt.Sprintf("bucket %s key %s: the record is damaged: %v", p.Bucket, p.Key, p.Err)
	}
	return fmt.Sprintf("bucket %s key %s: the record does not decode: %v", p.Bucket, p.Key, p.Err)
}

func showKey(k []byte) string {
	if printable(k) {
		return string(k)
	}
	return "0x" + hex.EncodeToString(k)
}

func printable(b []byte) bool {
	for _, r := range string(b) {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// decodeBucket verifies and decodes every record of bucket b, calling fn
// for each that does not; stop ends the walk early when fn says so.
// legacy accepts records without a checksum (a file not sealed yet).
func decodeBucket(name string, b *bolt.Bucket, legacy bool, fn func(Problem) (stop bool)) {
	if b == nil {
		return
	}
	b.ForEach(func(k, v []byte) error {
		if v == nil {
			return nil
		}
		if err := checkRecord(name, k, v, legacy); err != nil && fn(Problem{Bucket: name, Key: recordKey(name, k), Err: err}) {
			return errStop
		}
		return nil
	})
}

// checkRecord verifies a stored value's checksum and decodes it with its
// bucket's type.
func checkRecord(name string, k, v []byte, legacy bool) error {
	p, why := unseal(v, legacy)
	if why != "" {
		return checksumError(why)
	}
	if dec := decoders[name]; dec != nil {
		return dec(k, p)
	}
	return nil
}

// checksumError is a record whose checksum does not match.
type checksumError string

func (e checksumError) Error() string { return string(e) }

// recordKey shows a key: a job index entry's as "<job id> (index entry
// <seq>)", so every problem names the job.
func recordKey(bucket string, k []byte) string {
	if bucket == JobIndex && len(k) > 8 && printable(k[8:]) {
		return fmt.Sprintf("%s (index entry %d)", k[8:], binary.BigEndian.Uint64(k))
	}
	return showKey(k)
}

var errStop = errors.New("stop")

// decodeSmall decodes every record outside the job buckets (Open): the
// first that does not decode refuses the file.
func decodeSmall(path string, tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(path, fmt.Sprintf("its page tree is broken (%v)", r))
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	legacy := !sealedFile(tx)
	for _, name := range allBuckets {
		if jobBuckets[name] {
			continue
		}
		decodeBucket(name, tx.Bucket([]byte(name)), legacy, func(p Problem) bool {
			err = corrupt(path, p.String())
			return true
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// verifyChunk is how many records one read transaction of Verify visits:
// it never holds a transaction (which would keep bbolt from remapping a
// growing file) for long.
const verifyChunk = 5000

// Verify walks every page and decodes every record of the database, in
// short read transactions, calling problem for each record that does not
// decode and each broken page it meets. A broken page marks the database
// damaged: writes are refused from then on (a write meeting it would fail
// anyway, or worse). It returns the records visited; a running Berth calls
// it in the background after it starts.
//
// It yields as it goes (after each chunk it rests as long as the chunk
// took), so on a busy machine it takes at most half a core, and it drops
// the pages it read from the process's resident set (see releaseMapped).
func (db *DB) Verify(ctx context.Context, problem func(Problem)) (int, error) {
	n := 0
	count := func(p Problem) {
		db.noteProblem(p)
		problem(p)
	}
	defer db.releaseMapped()
	for _, name := range allBuckets {
		var after []byte // the last key visited
		for {
			if err := ctx.Err(); err != nil {
				return n, err
			}
			start := time.Now()
			done, last, k, err := db.verifyChunk(name, after, count)
			n += k
			if err != nil {
				return n, err
			}
			if done {
				break
			}
			after = last
			db.releaseMapped()
			select {
			case <-time.After(time.Since(start)):
			case <-ctx.Done():
			}
		}
	}
	return n, nil
}

// verifyChunk visits up to verifyChunk records of bucket name after the
// key after (nil: from the first).
func (db *DB) verifyChunk(name string, after []byte, problem func(Problem)) (done bool, last []byte, n int, err error) {
	at := after
	err = db.bolt.View(func(tx *bolt.Tx) (err error) {
		defer func() {
			if r := recover(); r != nil {
				p := Problem{Bucket: name, Key: showKey(at), Err: fmt.Errorf("%v", r), Page: true}
				problem(p)
				db.markDamaged(corrupt(db.bolt.Path(), p.String()))
				done, err = true, nil // nothing more can be read past it
			}
		}()
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		b := tx.Bucket([]byte(name))
		if b == nil {
			done = true
			return nil
		}
		c := b.Cursor()
		var k, v []byte
		if after == nil {
			k, v = c.First()
		} else if k, v = c.Seek(after); k != nil && string(k) == string(after) {
			k, v = c.Next()
		}
		for ; k != nil; k, v = c.Next() {
			at = k
			if n == verifyChunk {
				last = append([]byte(nil), k...)
				return nil
			}
			n++
			if v != nil {
				if err := checkRecord(name, k, v, false); err != nil {
					problem(Problem{Bucket: name, Key: recordKey(name, k), Err: err})
				}
			}
		}
		done = true
		return nil
	})
	// A record just after the chunk's end is visited by the next chunk:
	// the count of this one stops before it.
	return done, last, n, err
}

// ---- the cheap checks of a file a clean close left ----

// bbolt's on-disk layout, as far as these checks read it: a page header
// (id u64, flags u16, count u16, overflow u32), then for a meta page magic,
// version, page size, flags (u32 each), the root bucket (root u64,
// sequence u64), the freelist's page, the high-water mark, the txid and the
// FNV-64a checksum of the fields before it.
const (
	pageHeader   = 16
	metaMagic    = 0xED0CDAED
	metaSumEnd   = 56 // bytes of the meta the checksum covers
	freelistFlag = 0x10
)

type rawMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	hwm      uint64
	txid     uint64
}

// readMeta reads and checks the meta page at off.
func readMeta(f *os.File, off int64) (rawMeta, error) {
	buf := make([]byte, pageHeader+metaSumEnd+8)
	if _, err := f.ReadAt(buf, off); err != nil {
		return rawMeta{}, err
	}
	m := buf[pageHeader:]
	le := binary.LittleEndian
	if le.Uint32(m[0:]) != metaMagic {
		return rawMeta{}, errors.New("bad magic")
	}
	h := fnv.New64a()
	h.Write(m[:metaSumEnd])
	if h.Sum64() != le.Uint64(m[metaSumEnd:]) {
		return rawMeta{}, errors.New("checksum mismatch")
	}
	return rawMeta{pageSize: le.Uint32(m[8:]), root: le.Uint64(m[16:]), freelist: le.Uint64(m[32:]), hwm: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, nil
}

// checkMetas reads both header (meta) pages. bbolt uses the newer valid
// one and silently falls back to the older when the newer fails its
// checksum, which serves the state of one transaction back (and the first
// write then overwrites the evidence). Both must be valid, of the same page
// size, one transaction apart (every commit writes the other slot); the free
// page list the newer one names must be sane (a copy written by bbolt's
// WriteTo, a backup, has the same layout). clean: the file is as a
// clean stop left it (the marker), so a bad page cannot be a write cut by
// a power loss.
func checkMetas(path string, tx *bolt.Tx, clean bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	size := int64(tx.DB().Info().PageSize)
	var m [2]rawMeta
	for i := range m {
		mi, err := readMeta(f, int64(i)*size)
		if err != nil {
			why := "a write cut short by a power loss, or damage"
			if clean {
				why = "damage: the file is as a clean stop left it"
			}
			return corrupt(path, fmt.Sprintf("header (meta) page %d is invalid (%v; %s), and bbolt would silently fall back to the other, transaction %d: 'berth check --repair' writes a sound copy from it", i, err, why, tx.ID()))
		}
		m[i] = mi
	}
	switch {
	case m[0].pageSize != m[1].pageSize || int64(m[0].pageSize) != size:
		return corrupt(path, fmt.Sprintf("the header (meta) pages disagree on the page size (%d, %d)", m[0].pageSize, m[1].pageSize))
	case m[0].txid != m[1].txid+1 && m[1].txid != m[0].txid+1:
		return corrupt(path, fmt.Sprintf("the header (meta) pages are not one transaction apart (%d and %d): a write was lost", m[0].txid, m[1].txid))
	}
	newest := m[0]
	if m[1].txid > m[0].txid {
		newest = m[1]
	}
	if int(newest.txid) != tx.ID() {
		return corrupt(path, fmt.Sprintf("bbolt reads transaction %d but the newest header page says %d", tx.ID(), newest.txid))
	}
	if err := checkFreelist(f, newest, size); err != nil {
		return corrupt(path, "its free-page list is broken: "+err.Error())
	}
	return nil
}

// structure runs bbolt's consistency check (tx.Check): every page
// reachable once and not free, every page below the high-water mark either
// reachable or free, keys in order within each page and between a branch
// page and its children. walk has run first, so no page pointer leads out
// of the file (tx.Check runs on a goroutine of its own, where a fault
// could not be caught).
func structure(path string, tx *bolt.Tx) error {
	var problems []string
	n := 0
	for e := range tx.Check() {
		if n++; n <= maxProblems {
			problems = append(problems, e.Error())
		}
	}
	if n == 0 {
		return nil
	}
	more := ""
	if n > maxProblems {
		more = fmt.Sprintf("\n  … and %d more", n-maxProblems)
	}
	return corrupt(path, fmt.Sprintf("its page tree is broken: %d problem(s):\n  %s%s", n, strings.Join(problems, "\n  "), more))
}

func checkFreelist(f *os.File, m rawMeta, pageSize int64) error {
	const noFreelist = 0xffffffffffffffff
	if m.freelist == noFreelist {
		return nil // not written: bbolt rebuilds it by walking
	}
	if m.freelist < 2 || m.freelist >= m.hwm {
		return fmt.Errorf("its page %d is outside the file (high-water mark %d)", m.freelist, m.hwm)
	}
	hdr := make([]byte, pageHeader+8)
	if _, err := f.ReadAt(hdr, int64(m.freelist)*pageSize); err != nil {
		return err
	}
	le := binary.LittleEndian
	if id := le.Uint64(hdr); id != m.freelist {
		return fmt.Errorf("page %d says it is page %d", m.freelist, id)
	}
	if flags := le.Uint16(hdr[8:]); flags&freelistFlag == 0 {
		return fmt.Errorf("page %d is not a free-list page (flags %#x)", m.freelist, flags)
	}
	count, start := uint64(le.Uint16(hdr[10:])), int64(pageHeader)
	if count == 0xFFFF {
		count, start = le.Uint64(hdr[pageHeader:]), pageHeader+8
	}
	if overflow := uint64(le.Uint32(hdr[12:])); start+int64(count)*8 > int64(overflow+1)*pageSize || count > m.hwm {
		return fmt.Errorf("%d ids do not fit its %d page(s)", count, overflow+1)
	}
	ids := make([]byte, count*8)
	if _, err := f.ReadAt(ids, int64(m.freelist)*pageSize+start); err != nil {
		return err
	}
	var prev uint64
	for i := uint64(0); i < count; i++ {
		id := le.Uint64(ids[i*8:])
		switch {
		case id < 2 || id >= m.hwm:
			return fmt.Errorf("free page %d is outside the file (high-water mark %d)", id, m.hwm)
		case i > 0 && id <= prev:
			return fmt.Errorf("free page %d follows %d: not sorted, or listed twice", id, prev)
		}
		prev = id
	}
	return nil
}
