package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// ErrNoSpace is returned (wrapped in a *NoSpaceError) when a snapshot
// would not leave the data directory its reserve of free space.
var ErrNoSpace = errors.New("not enough free disk space")

// NoSpaceError says how much a snapshot needed and how much was free.
type NoSpaceError struct {
	Need, Free int64 // bytes: the copy plus the reserve; available to Berth
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("%v: a copy of the database needs %d MB free (its size plus a reserve for the database's own writes), and %d MB are",
		ErrNoSpace, (e.Need+(1<<20)-1)>>20, e.Free>>20)
}

func (e *NoSpaceError) Unwrap() error { return ErrNoSpace }

// Snapshot writes a consistent copy of the database into an unnamed
// temporary file in dir and returns it, rewound, with its size; the caller
// reads it at its own pace and closes it. The read transaction lasts only
// as long as the copy to disk: a slow reader of the snapshot holds a file,
// not the database (a long read transaction blocks bbolt's remap when the
// file grows, which stops every writer, then every reader). The file is
// unlinked as soon as it is created, so it goes with its last descriptor,
// even after a crash. It refuses with a *NoSpaceError, before writing,
// when dir would have less than reserve bytes free after the copy: a full
// disk would fail the database's own writes.
func (db *DB) Snapshot(dir string, reserve int64) (*os.File, int64, error) {
	f, err := os.CreateTemp(dir, ".berth-snapshot-*.db")
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	var n int64
	err = db.bolt.View(func(tx *bolt.Tx) error {
		free, err := freeBytes(dir)
		if err != nil {
			return err
		}
		if need := tx.Size() + reserve; free < need {
			return &NoSpaceError{Need: need, Free: free}
		}
		n, err = tx.WriteTo(f)
		return err
	})
	if err == nil {
		_, err = f.Seek(0, 0)
	}
	if err != nil {
		f.Close()
		var nse *NoSpaceError
		if errors.As(err, &nse) {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	return f, n, nil
}

// freeBytes is the space available to an unprivileged writer in dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
