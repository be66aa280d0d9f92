package store

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
)

// RepairReport is what Repair did.
type RepairReport struct {
	Kept     int      // records copied
	SetAside int      // records left out (written to the aside file)
	Lost     []string // what could not be read at all (a broken page)
}

// asideRecord is one line of the aside file.
type asideRecord struct {
	Bucket  string `json:"bucket"`
	Key     string `json:"key"`
	Problem string `json:"problem"`
	Value   string `json:"valueHex"`
}

// Repair writes to out a copy of the database at path holding every record
// that verifies and decodes, and writes each record it leaves out (with its
// problem and its bytes in hex) as a JSON line to aside. A job is kept or
// left out whole: a damaged record, input or index entry sets all three
// aside. Records on pages the page tree no longer reaches cannot be found
// and are not in the copy (Lost names the buckets whose walk broke off):
// compare with a backup. The file at path is only read; it must not be
// open read-write elsewhere (ErrLocked). out is written beside itself and
// renamed, then checked (Check).
func Repair(path, out string, aside io.Writer) (RepairReport, error) {
	var rep RepairReport
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return rep, openErr(path, err)
	}
	defer b.Close()
	type rec struct{ k, v []byte }
	good := map[string][]rec{}
	badJobs := map[string]bool{}
	var bad []asideRecord
	err = b.View(func(tx *bolt.Tx) error {
		legacy := !sealedFile(tx)
		for _, name := range allBuckets {
			bk := tx.Bucket([]byte(name))
			if bk == nil {
				continue
			}
			if err := salvage(bk, func(k, v []byte) {
				if err := checkRecord(name, k, v, legacy); err != nil {
					key := recordKey(name, k)
					bad = append(bad, asideRecord{Bucket: name, Key: key, Problem: Problem{Bucket: name, Key: key, Err: err}.String(), Value: hex.EncodeToString(v)})
					if id := jobID(name, k); id != "" {
						badJobs[id] = true
					}
					return
				}
				good[name] = append(good[name], rec{append([]byte(nil), k...), append([]byte(nil), v...)})
			}); err != nil {
				rep.Lost = append(rep.Lost, fmt.Sprintf("bucket %s: %v", name, err))
			}
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	// A job is kept or set aside whole.
	for _, name := range []string{Jobs, JobInputs, JobIndex} {
		kept := good[name][:0]
		for _, r := range good[name] {
			if badJobs[jobID(name, r.k)] {
				key := recordKey(name, r.k)
				bad = append(bad, asideRecord{Bucket: name, Key: key, Problem: "set aside with the rest of its job", Value: hex.EncodeToString(r.v)})
				continue
			}
			kept = append(kept, r)
		}
		good[name] = kept
	}
	enc := json.NewEncoder(aside)
	for _, r := range bad {
		if err := enc.Encode(r); err != nil {
			return rep, fmt.Errorf("write the records set aside: %w", err)
		}
	}
	rep.SetAside = len(bad)
	tmp := out + ".tmp"
	os.Remove(tmp)
	nb, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return rep, fmt.Errorf("create %s: %w", tmp, err)
	}
	defer os.Remove(tmp)
	for _, name := range allBuckets {
		recs := good[name]
		for i := 0; i < len(recs); i += sealChunk {
			chunk := recs[i:min(i+sealChunk, len(recs))]
			err := nb.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte(name))
				if err != nil {
					return err
				}
				for _, r := range chunk {
					if err := bk.Put(r.k, r.v); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				nb.Close()
				return rep, fmt.Errorf("write %s: %w", tmp, err)
			}
			rep.Kept += len(chunk)
		}
	}
	if err := nb.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		nb.Close()
		return rep, err
	}
	if err := errors.Join(nb.Sync(), nb.Close()); err != nil {
		return rep, fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := Check(tmp); err != nil {
		return rep, fmt.Errorf("the repaired copy does not pass the check: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return rep, err
	}
	return rep, nil
}

// salvage calls fn for every record the cursor reaches, stopping at a
// broken page (a panic or fault in bbolt) with an error.
func salvage(bk *bolt.Bucket, fn func(k, v []byte)) (err error) {
	var at []byte
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("broken page after key %s (%v): the records past it cannot be read", showKey(at), r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	c := bk.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		at = k
		if v != nil {
			fn(k, v)
		}
	}
	return nil
}

// jobID is the job a record of a job bucket belongs to, else "".
func jobID(bucket string, k []byte) string {
	switch bucket {
	case Jobs, JobInputs:
		return string(k)
	case JobIndex:
		if len(k) > 8 {
			return string(k[8:])
		}
	}
	return ""
}
