package store

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrCorrupt is returned by Open and Check when the file is damaged: its
// header pages are invalid, it is shorter than its header says, or its page
// tree is broken. Berth refuses to serve from such a file rather than guess.
var ErrCorrupt = errors.New("database file is corrupt")

// corrupt wraps a finding about path as ErrCorrupt with advice.
func corrupt(path, what string) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, what)
}

// preflight finds the damage that bbolt would otherwise meet as a crash,
// serve from silently or paper over, before the read-write open. It is the
// same check for 'berth serve' (full false) and 'berth check' (full true),
// so serve refuses every file check rejects:
//   - a zero-length file, which bbolt would initialise as a new, empty
//     database;
//   - invalid header (meta) pages: bbolt reads the newer valid one and
//     silently falls back to the older, so both are read and compared
//     (checkMetas);
//   - a file shorter than its header says: reading pages past the end of a
//     truncated file faults, which no recover can catch;
//   - a broken free-page list (checkFreelist), which bbolt would load as
//     it is and hand out pages in use;
//   - a broken page tree: walk visits every page through cursors on this
//     goroutine (bbolt's own open walk panics on another, which kills the
//     process), then structure runs bbolt's tx.Check: every page reachable
//     once and not free, keys in order within and across pages. A branch
//     page whose key or child pointer changed passes a walk but sends a
//     look-up to the wrong leaf (jobs answered 404).
//
// Its cost grows with the file (the README's Hardening section gives it
// for a million jobs). A missing file is fine: Open creates it.
func preflight(path string, full bool) error {
	var marker []byte
	if !full {
		// Consumed before the read-write open: a crash leaves none.
		if m, err := os.ReadFile(markerPath(path)); err == nil && os.Remove(markerPath(path)) == nil {
			marker = m
		}
	} else if m, err := os.ReadFile(markerPath(path)); err == nil {
		marker = m
	}
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if info.IsDir() {
		return fmt.Errorf("open %s: is a directory", path)
	}
	if info.Size() == 0 {
		return corrupt(path, "the file is empty (0 bytes): it was truncated")
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return openErr(path, err)
	}
	defer b.Close()
	return b.View(func(tx *bolt.Tx) (err error) {
		if hwm := tx.Size(); info.Size() < hwm {
			return corrupt(path, fmt.Sprintf("the file is truncated: it is %d bytes but its header says its pages reach %d bytes", info.Size(), hwm))
		}
		if !full {
			// The records outside the job buckets are few: every one
			// must verify and decode (the jobs are verified in the
			// background, by DB.Verify), before anything is written.
			defer func() {
				if err == nil {
					err = decodeSmall(path, tx)
				}
			}()
		}
		clean := marker != nil && strings.HasPrefix(string(marker), fileStamp(info, -1))
		if err := checkMetas(path, tx, clean); err != nil {
			return err
		}
		if err := walk(path, tx); err != nil {
			return err
		}
		return structure(path, tx)
	})
}

// The clean-close marker, berth.db.clean, records the file's size, mtime
// and last transaction id as a clean Close left them. A write from outside
// (a copy, a restore, dd) changes the mtime or the size; a crash leaves no
// marker, since Open removes it first. What it cannot see is damage that
// changes neither (bit rot on the disk): 'berth check' finds that.
func markerPath(path string) string { return path + ".clean" }

// fileStamp is the marker's text; txid < 0 gives the part before the txid.
func fileStamp(info os.FileInfo, txid int) string {
	s := fmt.Sprintf("size=%d mtime=%d txid=", info.Size(), info.ModTime().UnixNano())
	if txid < 0 {
		return s
	}
	return s + fmt.Sprint(txid)
}

// writeCleanMarker is called once the file is closed after txid, its last
// transaction. A marker that fails to be written only costs a walk.
func writeCleanMarker(path string, txid int) {
	if info, err := os.Stat(path); err == nil {
		_ = os.WriteFile(markerPath(path), []byte(fileStamp(info, txid)), 0o600)
	}
}

// walk visits every branch and leaf page of every bucket through cursors,
// turning bbolt's panics on a broken page into ErrCorrupt.
func walk(path string, tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(path, fmt.Sprintf("its page tree is broken (%v)", r))
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var visit func(b *bolt.Bucket)
	visit = func(b *bolt.Bucket) {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				if child := b.Bucket(k); child != nil {
					visit(child)
				}
			}
		}
	}
	return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { visit(b); return nil })
}

// openErr maps bbolt's open errors to Berth's.
func openErr(path string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("open %s: %w", path, ErrLocked)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum):
		return corrupt(path, "neither header (meta) page is valid: "+err.Error())
	case errors.Is(err, berrors.ErrVersionMismatch):
		return corrupt(path, "not a bbolt file of a known version: "+err.Error())
	}
	return fmt.Errorf("open %s: %w", path, err)
}

// advice is what Open adds to ErrCorrupt: Berth never repairs by itself.
const advice = "; Berth will not start on it: run 'berth check' for a full report, then 'berth check --repair' (a copy without the damaged records; the file is kept) or restore a backup"

// openBolt opens the file read-write and runs init in a write transaction.
// With NoFreelistSync bbolt rebuilds the free list at open by walking every
// reachable page and panics on what that walk finds broken; that panic, or
// one from init meeting a broken page, becomes ErrCorrupt here.
func openBolt(path string, o *bolt.Options, init func(*bolt.Tx) error) (b *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			if b != nil {
				b.Close()
			}
			b, err = nil, corrupt(path, fmt.Sprintf("its page tree is broken (%v)", r))
		}
		if errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("%w%s", err, advice)
		}
	}()
	if err := preflight(path, false); err != nil {
		return nil, err
	}
	// A page pointer past the mapping faults; on this goroutine that is a
	// panic (caught above) rather than a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if b, err = bolt.Open(path, 0o600, o); err != nil {
		return nil, openErr(path, err)
	}
	if err := b.Update(init); err != nil {
		b.Close()
		return nil, err
	}
	if err := sealAll(b); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Check runs the checks Open makes (header pages, length, free list, page
// tree: see preflight) on the file at path, read-only, then verifies every
// record's checksum and decodes it with its bucket's type, naming the
// bucket and key of each that fails. It needs the file not to be open read-write
// elsewhere: a running Berth holds it, and Check then fails with ErrLocked.
// The error lists every problem found, at most maxProblems of them.
func Check(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if err := preflight(path, true); err != nil {
		return err
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return openErr(path, err)
	}
	defer b.Close()
	var problems []string
	n := 0
	err = b.View(func(tx *bolt.Tx) error {
		// Every record's checksum verified and the record decoded with its
		// bucket's type.
		legacy := !sealedFile(tx)
		for _, name := range allBuckets {
			decodeBucket(name, tx.Bucket([]byte(name)), legacy, func(p Problem) bool {
				if n++; n <= maxProblems {
					problems = append(problems, p.String())
				}
				return false
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if n == 0 {
		return nil
	}
	more := ""
	if n > maxProblems {
		more = fmt.Sprintf("\n  … and %d more", n-maxProblems)
	}
	return corrupt(path, fmt.Sprintf("%d problem(s):\n  %s%s", n, strings.Join(problems, "\n  "), more))
}

const maxProblems = 20
