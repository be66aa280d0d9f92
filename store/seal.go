package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	bolt "go.etcd.io/bbolt"
)

// Record checksums. bbolt checksums only its header pages: a changed byte
// inside a record (one that keeps its JSON valid included) passed every
// check. So every value is stored in an envelope,
//
//	0xB5 | CRC-32C of the payload (4 bytes, big-endian) | payload
//
// verified on every read (Tx.Get, ForEach, LoadJob, the job index scan),
// by the background check (Verify), by Open for the small buckets and by
// 'berth check'. 0xB5 starts no value written before: JSON starts with
// ASCII, a job index entry with a status code below 6, the meta values are
// ASCII. A file from before checksums is sealed on its first Open (every
// record rewritten in its envelope, in transactions of sealChunk records,
// resumed after a crash), then marked with sealedKey; from then on a value
// without the envelope is damage too.

const (
	sealTag   = 0xB5
	sealSize  = 5
	sealedKey = "records"
	sealedVal = "crc32c"
	sealChunk = 10000
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrDamaged is wrapped by the error of a read of a record whose checksum
// does not match (or that does not decode): that record alone cannot be
// read. 'berth check' names every such record; 'berth check --repair'
// writes a copy without them.
var ErrDamaged = errors.New("the stored record is damaged")

// DamagedError names a damaged record.
type DamagedError struct {
	Bucket, Key string
	Why         string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("%s %s: %v (%s); stop Berth and run 'berth check' for the full list, 'berth check --repair' to set damaged records aside", e.Bucket, e.Key, ErrDamaged, e.Why)
}

func (e *DamagedError) Unwrap() error { return ErrDamaged }

// seal returns v in its envelope.
func seal(v []byte) []byte {
	out := make([]byte, sealSize+len(v))
	out[0] = sealTag
	binary.BigEndian.PutUint32(out[1:], crc32.Checksum(v, crcTable))
	copy(out[sealSize:], v)
	return out
}

// unseal returns the payload of a stored value, or why it is damaged.
// legacy accepts a value without the envelope (a file not sealed yet).
func unseal(v []byte, legacy bool) ([]byte, string) {
	if len(v) > 0 && v[0] == sealTag {
		if len(v) < sealSize {
			return nil, "shorter than its checksum"
		}
		p := v[sealSize:]
		if crc32.Checksum(p, crcTable) != binary.BigEndian.Uint32(v[1:]) {
			return nil, "checksum mismatch"
		}
		return p, ""
	}
	if legacy {
		return v, ""
	}
	return nil, "no checksum: the envelope's first byte is lost"
}

// sealedFile reports whether every record of the file carries a checksum.
func sealedFile(tx *bolt.Tx) bool {
	m := tx.Bucket([]byte(Meta))
	if m == nil {
		return false
	}
	p, why := unseal(m.Get([]byte(sealedKey)), true)
	return why == "" && string(p) == sealedVal
}

// sealAll puts every record of a file written before checksums in its
// envelope, sealChunk records per transaction (a crash in between leaves
// records of both kinds, which the next Open goes on with), then marks the
// file sealed.
func sealAll(b *bolt.DB) error {
	var done bool
	if err := b.View(func(tx *bolt.Tx) error { done = sealedFile(tx); return nil }); err != nil || done {
		return err
	}
	type kv struct{ k, v []byte }
	for _, name := range allBuckets {
		var after []byte
		for more := true; more; {
			// Read in a read transaction; write only what needs it (a
			// new file's buckets are empty: no write transaction each).
			var todo []kv
			more = false
			err := b.View(func(tx *bolt.Tx) error {
				c := tx.Bucket([]byte(name)).Cursor()
				k, v := c.First()
				if after != nil {
					if k, v = c.Seek(after); k != nil && string(k) == string(after) {
						k, v = c.Next()
					}
				}
				for ; k != nil; k, v = c.Next() {
					if len(todo) == sealChunk {
						more = true
						break
					}
					if v != nil && (len(v) == 0 || v[0] != sealTag) {
						todo = append(todo, kv{append([]byte(nil), k...), seal(v)})
					}
					after = append(after[:0], k...)
				}
				return nil
			})
			if err == nil && len(todo) > 0 {
				err = b.Update(func(tx *bolt.Tx) error {
					bk := tx.Bucket([]byte(name))
					if f, ok := fillPercent[name]; ok {
						bk.FillPercent = f
					}
					for _, e := range todo {
						if err := bk.Put(e.k, e.v); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err != nil {
				return fmt.Errorf("add checksums to bucket %s: %w", name, err)
			}
		}
	}
	return b.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(Meta)).Put([]byte(sealedKey), seal([]byte(sealedVal)))
	})
}
