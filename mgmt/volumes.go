package mgmt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"berth/queue"
	"berth/store"
)

// Network volumes: a directory per volume under <data dir>/volumes. The
// size is what the operator asked for and what billing charges; Berth
// reports the bytes used but does not enforce the size.

const (
	// usageTTL is how long a measured usage is reused before the volume's
	// directory is walked again.
	usageTTL = 30 * time.Second
)

// VolumeInput creates or updates a network volume. DataCenterID is
// creation-only (required there); any well-formed id is recorded.
type VolumeInput struct {
	Name         *string
	Size         *int // GB
	DataCenterID *string
	Type         *string // STANDARD or HIGH_PERFORMANCE; creation-only
}

// Volume is a network volume with Berth's usage fields.
type Volume struct {
	store.NetworkVolume
	UsedBytes int64  `json:"usedBytes"` // bytes held by its files
	Path      string `json:"path"`      // host directory
	// Claim is its PersistentVolumeClaim on the kubernetes runtime, once
	// a worker or pod mounted it (Config.VolumeClaim); nil otherwise.
	Claim *VolumeClaim `json:"claim,omitempty"`
}

// VolumeClaim is a network volume's claim as the cluster has it (Berth's
// field): its name, phase (Pending, Bound, Lost) and, when it is not
// bound, why — what the endpoints that mount it say too.
type VolumeClaim struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// VolumePath is the host directory of network volume id under dataDir; the
// runtime mounts it into containers.
func VolumePath(dataDir, id string) string { return filepath.Join(dataDir, "volumes", id) }

func (s *Service) volumesDir() string          { return filepath.Join(s.cfg.DataDir, "volumes") }
func (s *Service) volumePath(id string) string { return VolumePath(s.cfg.DataDir, id) }

// usageCache keeps measured volume usage by directory.
type usageCache struct {
	mu sync.Mutex
	m  map[string]usageEntry
}

type usageEntry struct {
	bytes int64
	at    time.Time
}

// dirUsage returns the bytes used by the files under dir, measured at most
// every usageTTL.
func (s *Service) dirUsage(dir string) int64 {
	now := s.cfg.Clock.Now()
	s.usage.mu.Lock()
	e, ok := s.usage.m[dir]
	s.usage.mu.Unlock()
	if ok && now.Sub(e.at) < usageTTL {
		return e.bytes
	}
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
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
	s.usage.mu.Lock()
	if s.usage.m == nil {
		s.usage.m = map[string]usageEntry{}
	}
	s.usage.m[dir] = usageEntry{n, now}
	s.usage.mu.Unlock()
	return n
}

func (s *Service) forgetUsage(dir string) {
	s.usage.mu.Lock()
	delete(s.usage.m, dir)
	s.usage.mu.Unlock()
}

// ViewVolume adds the usage fields to a record.
func (s *Service) ViewVolume(v store.NetworkVolume) Volume {
	dir := s.volumePath(v.ID)
	out := Volume{NetworkVolume: v, UsedBytes: s.dirUsage(dir), Path: dir}
	if s.cfg.VolumeClaim != nil {
		if c, ok := s.cfg.VolumeClaim(v.ID); ok {
			out.Claim = &c
		}
	}
	return out
}

func checkSize(size int) error { return LimitVolumeSize.Check(int64(size)) }

// CheckVolume checks a volume's input without storing anything: on a
// create every required field, on an update what may change; with cur
// (the volume updated), also that its size only grows. The warning is for
// a data centre Berth does not know.
func CheckVolume(in VolumeInput, create bool, cur *store.NetworkVolume) (warning string, err error) {
	if create {
		switch {
		case in.Name == nil:
			return "", invalid("name", "name is required")
		case in.Size == nil:
			return "", invalid("size", "size is required (GB)")
		case in.DataCenterID == nil:
			return "", invalid("dataCenterId", "dataCenterId is required: this Berth host is the one data centre %q", DataCenterID)
		}
		if warning, err = CheckDataCenter("dataCenterId", *in.DataCenterID); err != nil {
			return "", err
		}
		if in.Type != nil && *in.Type != "STANDARD" && *in.Type != "HIGH_PERFORMANCE" {
			return "", invalid("type", "type must be STANDARD or HIGH_PERFORMANCE, got %q", *in.Type)
		}
	} else {
		if in.DataCenterID != nil {
			return "", invalid("dataCenterId", "dataCenterId cannot be changed: a volume stays where it was created")
		}
		if in.Type != nil {
			return "", invalid("type", "type cannot be changed after a volume is created")
		}
	}
	if in.Name != nil {
		if err := checkName(*in.Name); err != nil {
			return "", err
		}
	}
	if in.Size != nil {
		if err := checkSize(*in.Size); err != nil {
			return "", err
		}
		if cur != nil && *in.Size < cur.Size {
			return "", invalid("size", "size can only grow: the volume has %d GB, got %d", cur.Size, *in.Size)
		}
	}
	return warning, nil
}

// CreateVolume makes the volume's directory and record and starts billing
// its size.
func (s *Service) CreateVolume(ctx context.Context, in VolumeInput) (Volume, error) {
	if err := live(ctx); err != nil {
		return Volume{}, err
	}
	warn, err := CheckVolume(in, true, nil)
	if err != nil {
		return Volume{}, err
	}
	v := store.NetworkVolume{ID: queue.NewID(10), Name: *in.Name, Size: *in.Size, DataCenterID: *in.DataCenterID, CreatedAt: s.now()}
	if in.Type != nil {
		v.Type = *in.Type
	}
	if warn != "" {
		v.Warnings = []string{warn}
	}
	dir := s.volumePath(v.ID)
	if err := os.MkdirAll(s.volumesDir(), 0o700); err != nil {
		return Volume{}, fmt.Errorf("create volumes directory: %w", err)
	}
	// 0755: containers running as another user can read it; root in the
	// container (the usual case) writes.
	if err := os.Mkdir(dir, 0o755); err != nil {
		return Volume{}, fmt.Errorf("create volume directory: %w", err)
	}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := tx.Apply(store.Put(store.Volumes, v.ID, v)); err != nil {
			return err
		}
		return tx.StartUsage(store.UsageInterval{Kind: store.UsageVolume, ID: v.ID, SizeGB: v.Size, Start: v.CreatedAt})
	})
	if err != nil {
		os.Remove(dir)
		return Volume{}, err
	}
	// A new volume is empty: no need to measure it (nor to cache that).
	return Volume{NetworkVolume: v, Path: dir}, nil
}

// ListVolumes lists the volumes oldest first.
func (s *Service) ListVolumes(ctx context.Context) ([]Volume, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	var vs []store.NetworkVolume
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		vs, err = all[store.NetworkVolume](tx, store.Volumes)
		return err
	})
	if err != nil {
		return nil, err
	}
	byCreated(vs, func(v store.NetworkVolume) time.Time { return v.CreatedAt }, func(v store.NetworkVolume) string { return v.ID })
	out := make([]Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, s.ViewVolume(v))
	}
	return out, nil
}

// GetVolume returns one volume.
func (s *Service) GetVolume(ctx context.Context, id string) (Volume, error) {
	if err := live(ctx); err != nil {
		return Volume{}, err
	}
	var v store.NetworkVolume
	if err := s.cfg.Store.View(func(tx *store.Tx) error { return getOr404(tx, store.Volumes, id, "network volume", &v) }); err != nil {
		return Volume{}, err
	}
	return s.ViewVolume(v), nil
}

// UpdateVolume renames or grows a volume; it cannot shrink (RunPod: the new
// size "must be greater than the current size"). A resize closes the
// billing interval at the old size and opens one at the new.
func (s *Service) UpdateVolume(ctx context.Context, id string, in VolumeInput) (Volume, error) {
	if err := live(ctx); err != nil {
		return Volume{}, err
	}
	if _, err := CheckVolume(in, false, nil); err != nil {
		return Volume{}, err
	}
	var v store.NetworkVolume
	if in.Size != nil && s.cfg.VolumeGrow != nil {
		// The runtime first (a Kubernetes claim the storage class may not
		// let grow): a size it refuses is not stored.
		if err := s.cfg.Store.View(func(tx *store.Tx) error { return getOr404(tx, store.Volumes, id, "network volume", &v) }); err != nil {
			return Volume{}, err
		}
		if _, err := CheckVolume(in, false, &v); err != nil {
			return Volume{}, err
		}
		if *in.Size > v.Size {
			if err := s.cfg.VolumeGrow(ctx, id, *in.Size); err != nil {
				return Volume{}, err
			}
		}
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Volumes, id, "network volume", &v); err != nil {
			return err
		}
		if _, err := CheckVolume(in, false, &v); err != nil {
			return err
		}
		if in.Name != nil {
			v.Name = *in.Name
		}
		if in.Size != nil && *in.Size != v.Size {
			v.Size = *in.Size
			if err := tx.StartUsage(store.UsageInterval{Kind: store.UsageVolume, ID: v.ID, SizeGB: v.Size, Start: s.now()}); err != nil {
				return err
			}
		}
		return tx.Apply(store.Put(store.Volumes, id, v))
	})
	if err != nil {
		return Volume{}, err
	}
	return s.ViewVolume(v), nil
}

// DeleteVolume removes a volume and its files; refused (Conflict) while
// attached. The directory is moved aside inside the transaction (fast,
// undone if the transaction fails) and its files removed after the commit.
func (s *Service) DeleteVolume(ctx context.Context, id string) error {
	if err := live(ctx); err != nil {
		return err
	}
	dir := s.volumePath(id)
	trash := filepath.Join(s.volumesDir(), ".deleting-"+id)
	moved := false
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.Volumes, id) == nil {
			return notFoundID("network volume", id)
		}
		users, err := users(tx,
			func(e store.Endpoint) bool { return e.NetworkVolumeID == id || slices.Contains(e.NetworkVolumeIDs, id) },
			func(p store.Pod) bool { return p.NetworkVolumeID == id })
		if err != nil {
			return err
		}
		if users != "" {
			return inUse("network volume %s is attached to %s; detach it or delete them first", id, users)
		}
		if err := tx.EndUsage(store.UsageVolume, id, s.now()); err != nil {
			return err
		}
		if err := os.Rename(dir, trash); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("move volume directory aside: %w", err)
		} else if err == nil {
			moved = true
		}
		return tx.Apply(store.Delete(store.Volumes, id))
	})
	if err != nil {
		if moved {
			os.Rename(trash, dir)
		}
		return err
	}
	s.forgetUsage(dir)
	if s.cfg.VolumeDeleted != nil {
		s.cfg.VolumeDeleted(id)
	}
	if moved {
		if err := os.RemoveAll(trash); err != nil {
			s.cfg.Logger.Error("remove deleted volume's files", "volume", id, "dir", trash, "err", err)
		}
	}
	return nil
}
