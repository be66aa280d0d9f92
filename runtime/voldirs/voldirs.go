// Package voldirs keeps network volumes as host directories, <root>/<id>:
// the Docker runtime bind-mounts them, and Berth without a runtime still
// keeps them (runtime.Volumes). The size is what the operator asked for
// and what billing charges; the bytes used are measured, not enforced.
package voldirs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/runtime"
)

// usageTTL is how long a measured usage is reused before the volume's
// directory is walked again.
const usageTTL = 30 * time.Second

// Store is the volumes' directories under one root. Safe for concurrent
// use.
type Store struct {
	root  string
	clock clockwork.Clock

	mu    sync.Mutex
	usage map[string]usage // by volume id
}

type usage struct {
	bytes int64
	at    time.Time
}

var _ runtime.Volumes = (*Store)(nil)

// New returns the Store of the directories under root (made when the
// first volume is; Berth's: <data dir>/volumes). clock dates the usage
// measurements [the real clock].
func New(root string, clock clockwork.Clock) *Store {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Store{root: root, clock: clock, usage: map[string]usage{}}
}

// Path is volume id's directory.
func (s *Store) Path(id string) string { return filepath.Join(s.root, id) }

// aside is where a volume being deleted waits for its record's deletion
// to be stored.
func (s *Store) aside(id string) string { return filepath.Join(s.root, ".deleting-"+id) }

// CreateVolume makes volume id's empty directory; the size is not
// enforced.
func (s *Store) CreateVolume(_ context.Context, id string, _ int) (runtime.VolumeStatus, error) {
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return runtime.VolumeStatus{}, fmt.Errorf("create volumes directory: %w", err)
	}
	// 0755: containers running as another user can read it; root in the
	// container (the usual case) writes.
	if err := os.Mkdir(s.Path(id), 0o755); err != nil {
		return runtime.VolumeStatus{}, fmt.Errorf("create volume directory: %w", err)
	}
	// Empty: nothing to measure, nor to cache (files may come at once).
	s.mu.Lock()
	delete(s.usage, id)
	s.mu.Unlock()
	return runtime.VolumeStatus{Path: s.Path(id)}, nil
}

// GrowVolume has nothing to do: a directory has no size.
func (s *Store) GrowVolume(context.Context, string, int) error { return nil }

// SetAsideVolume renames the directory aside (quick, and a rename back
// undoes it).
func (s *Store) SetAsideVolume(id string) error {
	if err := os.Rename(s.Path(id), s.aside(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move volume directory aside: %w", err)
	}
	return nil
}

// RestoreVolume renames a set-aside directory back.
func (s *Store) RestoreVolume(id string) error {
	if err := os.Rename(s.aside(id), s.Path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restore volume directory: %w", err)
	}
	return nil
}

// RemoveVolume removes the volume's files, set aside or not.
func (s *Store) RemoveVolume(_ context.Context, id string) error {
	s.mu.Lock()
	delete(s.usage, id)
	s.mu.Unlock()
	return errors.Join(removeAll(s.aside(id)), removeAll(s.Path(id)))
}

func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove volume files: %w", err)
	}
	return nil
}

// VolumeStatus is the directory and the bytes its files hold, measured
// at most every usageTTL.
func (s *Store) VolumeStatus(id string) runtime.VolumeStatus {
	return runtime.VolumeStatus{Path: s.Path(id), UsedBytes: s.used(id)}
}

func (s *Store) used(id string) int64 {
	now := s.clock.Now()
	s.mu.Lock()
	e, ok := s.usage[id]
	s.mu.Unlock()
	if ok && now.Sub(e.at) < usageTTL {
		return e.bytes
	}
	var n int64
	filepath.WalkDir(s.Path(id), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable entries are skipped, not fatal
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	s.mu.Lock()
	s.usage[id] = usage{n, now}
	s.mu.Unlock()
	return n
}
