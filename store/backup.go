package store

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Backup writes a consistent copy of the whole database to w from one read
// transaction: writers keep committing meanwhile, and the copy is the
// database as of the moment the transaction began. It returns the bytes
// written.
func (db *DB) Backup(w io.Writer) (int64, error) {
	return db.BackupSized(func(int64) io.Writer { return w })
}

// BackupSized is Backup with the copy's size told first (an HTTP handler
// sets Content-Length from it): start gets the size and returns the writer.
func (db *DB) BackupSized(start func(size int64) io.Writer) (int64, error) {
	var n int64
	err := db.bolt.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(start(tx.Size()))
		return err
	})
	return n, err
}

// BackupFile writes a consistent copy to path: into a temporary file in the
// same folder, synced, then renamed, so path is either the old file or a
// complete copy.
func (db *DB) BackupFile(path string) (int64, error) {
	return WriteFileAtomic(path, db.Backup)
}

// WriteFileAtomic creates path from write's output: a temporary file beside
// it, fsynced and renamed over path.
func WriteFileAtomic(path string, write func(io.Writer) (int64, error)) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name()) // after a successful rename this fails harmlessly
	n, err := write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	return n, nil
}
