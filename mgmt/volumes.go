package mgmt

import (
	"context"
	"slices"
	"time"

	"berth/queue"
	"berth/store"
)

// Network volumes: the record (name, size, data centre) and its billing
// are management's; the data are the runtime's (Volumes): a host
// directory on Docker, a claim on Kubernetes. The size is what the
// operator asked for and what billing charges.

// Volumes is what mgmt needs of the runtime's network volumes (app adapts
// the backend's, or the host directories' when no runtime runs). A
// deletion is in steps so that nothing acknowledged is lost: SetAside
// while the record's deletion is stored (Restore should the store
// refuse), Remove once it is stored.
type Volumes interface {
	// Create makes volume id's storage before its record is stored;
	// Remove undoes it should the store refuse.
	Create(ctx context.Context, id string, sizeGB int) (VolumeView, error)
	// Grow grows it before the larger size is stored; an error refuses
	// the resize (a *Error says whose fault).
	Grow(ctx context.Context, id string, sizeGB int) error
	SetAside(id string) error
	Restore(id string) error
	Remove(ctx context.Context, id string) error
	// View is what the runtime knows of the volume, without a request.
	View(id string) VolumeView
}

// VolumeView is a network volume as the runtime has it.
type VolumeView struct {
	UsedBytes int64
	Path      string
	Claim     *VolumeClaim
}

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
	UsedBytes int64  `json:"usedBytes"` // bytes held by its files (host directories; 0 on Kubernetes)
	Path      string `json:"path"`      // host directory ("" on Kubernetes)
	// Claim is its PersistentVolumeClaim on the kubernetes runtime, once
	// a worker or pod mounted it; nil otherwise.
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

// ViewVolume adds the runtime's fields to a record.
func (s *Service) ViewVolume(v store.NetworkVolume) Volume {
	out := Volume{NetworkVolume: v}
	if s.cfg.Volumes != nil {
		out.withView(s.cfg.Volumes.View(v.ID))
	}
	return out
}

func (v *Volume) withView(r VolumeView) { v.UsedBytes, v.Path, v.Claim = r.UsedBytes, r.Path, r.Claim }

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
	out := Volume{NetworkVolume: v}
	if s.cfg.Volumes != nil {
		view, err := s.cfg.Volumes.Create(ctx, v.ID, v.Size)
		if err != nil {
			return Volume{}, err
		}
		out.withView(view)
	}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := tx.Apply(store.Put(store.Volumes, v.ID, v)); err != nil {
			return err
		}
		return tx.StartUsage(store.UsageInterval{Kind: store.UsageVolume, ID: v.ID, SizeGB: v.Size, Start: v.CreatedAt})
	})
	if err != nil {
		if s.cfg.Volumes != nil {
			if rerr := s.cfg.Volumes.Remove(noCancel(ctx), v.ID); rerr != nil {
				s.cfg.Logger.Error("remove an unstored volume's storage", "volume", v.ID, "err", rerr)
			}
		}
		return Volume{}, err
	}
	return out, nil
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
	if in.Size != nil && s.cfg.Volumes != nil {
		// The runtime first (a Kubernetes claim the storage class may not
		// let grow): a size it refuses is not stored.
		if err := s.cfg.Store.View(func(tx *store.Tx) error { return getOr404(tx, store.Volumes, id, "network volume", &v) }); err != nil {
			return Volume{}, err
		}
		if _, err := CheckVolume(in, false, &v); err != nil {
			return Volume{}, err
		}
		if *in.Size > v.Size {
			if err := s.cfg.Volumes.Grow(ctx, id, *in.Size); err != nil {
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

// DeleteVolume removes a volume and its data; refused (Conflict) while
// attached. The runtime sets its storage aside inside the transaction
// (quick, put back if the transaction fails) and removes it after the
// commit: a deletion not stored loses nothing.
func (s *Service) DeleteVolume(ctx context.Context, id string) error {
	if err := live(ctx); err != nil {
		return err
	}
	aside := false
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
		if s.cfg.Volumes != nil {
			if err := s.cfg.Volumes.SetAside(id); err != nil {
				return err
			}
			aside = true
		}
		return tx.Apply(store.Delete(store.Volumes, id))
	})
	if err != nil {
		if aside {
			if rerr := s.cfg.Volumes.Restore(id); rerr != nil {
				s.cfg.Logger.Error("put back a volume whose deletion failed", "volume", id, "err", rerr)
			}
		}
		return err
	}
	if s.cfg.Volumes != nil {
		// The record is gone: a client that leaves does not keep the data.
		rctx, cancel := context.WithTimeout(noCancel(ctx), time.Minute)
		defer cancel()
		if err := s.cfg.Volumes.Remove(rctx, id); err != nil {
			s.cfg.Logger.Error("remove a deleted volume's data", "volume", id, "err", err)
		}
	}
	return nil
}
