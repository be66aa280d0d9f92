package store

import (
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// releaseMapped drops the process's mappings of the file's pages
// (MADV_DONTNEED on bbolt's read-only shared mapping). The pages stay in
// the page cache and fault back in when read; the process's resident set
// no longer counts the whole file after Open's free-page walk or the
// start-up scan touched every page. The read transaction keeps bbolt from
// remapping meanwhile.
func (db *DB) releaseMapped() {
	db.view(func(tx *bolt.Tx) error {
		syscall.Syscall(syscall.SYS_MADVISE, db.bolt.Info().Data, uintptr(tx.Size()), syscall.MADV_DONTNEED)
		return nil
	})
}
