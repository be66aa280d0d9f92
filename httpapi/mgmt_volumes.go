package httpapi

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"berth/queue"
	"berth/store"
)

// Network volumes: a directory per volume under <data dir>/volumes. The
// size is what the operator asked for and what billing charges; Berth
// reports the bytes used but does not enforce the size.

const (
	maxVolumeGB = 4000
	// usageTTL is how long a measured usage is reused before the volume's
	// directory is walked again.
	usageTTL = 30 * time.Second
)

// VolumeInput is NetworkVolumeCreateInput and NetworkVolumeUpdateInput.
type VolumeInput struct {
	Name         *string `json:"name"`
	Size         *int    `json:"size"`
	DataCenterID *string `json:"dataCenterId"`
}

// volumeView is a network volume with Berth's usage fields.
type volumeView struct {
	store.NetworkVolume
	UsedBytes int64  `json:"usedBytes"` // bytes held by its files
	Path      string `json:"path"`      // host directory
}

func (s *Server) volumesDir() string { return filepath.Join(s.dataDir(), "volumes") }

// VolumePath is the host directory of network volume id under dataDir; the
// runtime mounts it into containers.
func VolumePath(dataDir, id string) string { return filepath.Join(dataDir, "volumes", id) }

func (s *Server) volumePath(id string) string { return VolumePath(s.dataDir(), id) }

// usageCache keeps measured volume usage by directory.
var usageCache struct {
	mu sync.Mutex
	m  map[string]usageEntry
}

type usageEntry struct {
	bytes int64
	at    time.Time
}

// dirUsage returns the bytes used by the files under dir, measured at most
// every usageTTL.
func (s *Server) dirUsage(dir string) int64 {
	now := s.cfg.Clock.Now()
	usageCache.mu.Lock()
	e, ok := usageCache.m[dir]
	usageCache.mu.Unlock()
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
	usageCache.mu.Lock()
	if usageCache.m == nil {
		usageCache.m = map[string]usageEntry{}
	}
	usageCache.m[dir] = usageEntry{n, now}
	usageCache.mu.Unlock()
	return n
}

func forgetUsage(dir string) {
	usageCache.mu.Lock()
	delete(usageCache.m, dir)
	usageCache.mu.Unlock()
}

func (s *Server) viewVolume(v store.NetworkVolume) volumeView {
	dir := s.volumePath(v.ID)
	return volumeView{NetworkVolume: v, UsedBytes: s.dirUsage(dir), Path: dir}
}

func checkSize(size int) error {
	if size < 1 || size > maxVolumeGB {
		return bad("size must be 1-%d GB, got %d", maxVolumeGB, size)
	}
	return nil
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var in VolumeInput
	if !decodeBody(w, r, &in) {
		return
	}
	switch {
	case in.Name == nil || strings.TrimSpace(*in.Name) == "":
		s.mgmtErr(w, r, bad("name is required"))
		return
	case in.Size == nil:
		s.mgmtErr(w, r, bad("size is required (GB)"))
		return
	case in.DataCenterID == nil:
		s.mgmtErr(w, r, bad("dataCenterId is required: this Berth host is the one data centre %q", DataCenterID))
		return
	case *in.DataCenterID != DataCenterID:
		s.mgmtErr(w, r, bad("dataCenterId: this Berth host is the one data centre %q, got %q", DataCenterID, *in.DataCenterID))
		return
	}
	if err := checkSize(*in.Size); err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	v := store.NetworkVolume{ID: queue.NewID(10), Name: *in.Name, Size: *in.Size, DataCenterID: DataCenterID, CreatedAt: s.now()}
	dir := s.volumePath(v.ID)
	if err := os.MkdirAll(s.volumesDir(), 0o700); err != nil {
		s.internal(w, r, fmt.Errorf("create volumes directory: %w", err))
		return
	}
	// 0755: containers running as another user can read it; root in the
	// container (the usual case) writes.
	if err := os.Mkdir(dir, 0o755); err != nil {
		s.internal(w, r, fmt.Errorf("create volume directory: %w", err))
		return
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := tx.Apply(store.Put(store.Volumes, v.ID, v)); err != nil {
			return err
		}
		return tx.StartUsage(store.UsageInterval{Kind: store.UsageVolume, ID: v.ID, SizeGB: v.Size, Start: v.CreatedAt})
	})
	if err != nil {
		os.Remove(dir)
		s.mgmtErr(w, r, err)
		return
	}
	// A new volume is empty: no need to measure it (nor to cache that).
	writeJSON(w, http.StatusOK, volumeView{NetworkVolume: v, Path: dir})
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	var vs []store.NetworkVolume
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		vs, err = all[store.NetworkVolume](tx, store.Volumes)
		return err
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	byCreated(vs, func(v store.NetworkVolume) time.Time { return v.CreatedAt }, func(v store.NetworkVolume) string { return v.ID })
	out := make([]volumeView, 0, len(vs))
	for _, v := range vs {
		out = append(out, s.viewVolume(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["networkVolumeId"]
	var v store.NetworkVolume
	if err := s.cfg.Store.View(func(tx *store.Tx) error { return getOr404(tx, store.Volumes, id, "network volume", &v) }); err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.viewVolume(v))
}

// updateVolume renames or grows a volume; it cannot shrink (RunPod: the new
// size "must be greater than the current size"). A resize closes the
// billing interval at the old size and opens one at the new.
func (s *Server) updateVolume(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["networkVolumeId"]
	var in VolumeInput
	if !decodeBody(w, r, &in) {
		return
	}
	if in.DataCenterID != nil {
		s.mgmtErr(w, r, bad("dataCenterId cannot be changed: a volume stays where it was created"))
		return
	}
	if in.Name != nil && strings.TrimSpace(*in.Name) == "" {
		s.mgmtErr(w, r, bad("name must not be empty"))
		return
	}
	if in.Size != nil {
		if err := checkSize(*in.Size); err != nil {
			s.mgmtErr(w, r, err)
			return
		}
	}
	var v store.NetworkVolume
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Volumes, id, "network volume", &v); err != nil {
			return err
		}
		if in.Name != nil {
			v.Name = *in.Name
		}
		if in.Size != nil && *in.Size != v.Size {
			if *in.Size < v.Size {
				return bad("size can only grow: the volume has %d GB, got %d", v.Size, *in.Size)
			}
			v.Size = *in.Size
			if err := tx.StartUsage(store.UsageInterval{Kind: store.UsageVolume, ID: v.ID, SizeGB: v.Size, Start: s.now()}); err != nil {
				return err
			}
		}
		return tx.Apply(store.Put(store.Volumes, id, v))
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.viewVolume(v))
}

// volumeUsers names the endpoints and pods a volume is attached to, or "".
func volumeUsers(tx *store.Tx, id string) (string, error) {
	return users(tx,
		func(e store.Endpoint) bool { return e.NetworkVolumeID == id || slices.Contains(e.NetworkVolumeIDs, id) },
		func(p store.Pod) bool { return p.NetworkVolumeID == id })
}

// deleteVolume removes a volume and its files; refused while attached. The
// directory is moved aside inside the transaction (fast, undone if the
// transaction fails) and its files removed after the commit.
func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["networkVolumeId"]
	dir := s.volumePath(id)
	trash := filepath.Join(s.volumesDir(), ".deleting-"+id)
	moved := false
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.Volumes, id) == nil {
			return notFound("network volume %s not found", id)
		}
		users, err := volumeUsers(tx, id)
		if err != nil {
			return err
		}
		if users != "" {
			return conflict("network volume %s is attached to %s; detach it or delete them first", id, users)
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
		s.mgmtErr(w, r, err)
		return
	}
	forgetUsage(dir)
	if moved {
		if err := os.RemoveAll(trash); err != nil {
			s.cfg.Logger.Error("remove deleted volume's files", "volume", id, "dir", trash, "err", err)
		}
	}
	noContent(w)
}
