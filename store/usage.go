package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Usage kinds: what ran (or, for volumes, existed) over an interval.
const (
	UsagePod    = "pod"
	UsageWorker = "worker"
	UsageVolume = "volume"
)

// UsageInterval is one run of a pod or worker container, or the life of a
// network volume at one size, kept in the usage bucket for billing. End is
// zero while the interval is open.
type UsageInterval struct {
	Kind       string    `json:"kind"`                 // UsagePod, UsageWorker or UsageVolume
	ID         string    `json:"id"`                   // pod, worker or volume id
	EndpointID string    `json:"endpointId,omitempty"` // workers
	TemplateID string    `json:"templateId,omitempty"`
	ImageName  string    `json:"imageName,omitempty"`
	GPUTypeID  string    `json:"gpuTypeId,omitempty"` // "" for CPU work
	GPUCount   int       `json:"gpuCount"`
	VCPUCount  int       `json:"vcpuCount"`
	SizeGB     int       `json:"sizeGb,omitempty"` // volumes
	Start      time.Time `json:"start"`
	End        time.Time `json:"end,omitzero"`
}

// Key layout in the usage bucket:
//
//	iv/<start unix ns, 20 digits>/<kind>/<id>  the interval
//	open/<kind>/<id>                           key of its open interval
const (
	ivPrefix   = "iv/"
	openPrefix = "open/"
)

func ivKey(iv UsageInterval) string {
	return fmt.Sprintf("%s%020d/%s/%s", ivPrefix, iv.Start.UnixNano(), iv.Kind, iv.ID)
}

func openKey(kind, id string) string { return openPrefix + kind + "/" + id }

func validKind(k string) bool { return k == UsagePod || k == UsageWorker || k == UsageVolume }

// StartUsage opens an interval in this transaction. An interval still open
// for the same kind and id (its end was lost in a crash) is closed at the
// new start.
func (t *Tx) StartUsage(iv UsageInterval) error {
	if !validKind(iv.Kind) || iv.ID == "" {
		return fmt.Errorf("store: usage interval needs a kind (pod, worker, volume) and an id, got %q/%q", iv.Kind, iv.ID)
	}
	if iv.Start.IsZero() {
		return errors.New("store: usage interval needs a start time")
	}
	iv.Start = iv.Start.UTC()
	iv.End = time.Time{}
	if err := t.EndUsage(iv.Kind, iv.ID, iv.Start); err != nil {
		return err
	}
	key := ivKey(iv)
	return t.Apply(Put(Usage, key, iv), PutRaw(Usage, openKey(iv.Kind, iv.ID), []byte(key)))
}

// EndUsage closes the open interval of kind/id at end, if there is one.
func (t *Tx) EndUsage(kind, id string, end time.Time) error {
	ok := openKey(kind, id)
	key := t.GetRaw(Usage, ok)
	if key == nil {
		return nil
	}
	var iv UsageInterval
	if err := t.Get(Usage, string(key), &iv); err != nil {
		return t.Apply(Delete(Usage, ok))
	}
	if end.Before(iv.Start) {
		end = iv.Start
	}
	iv.End = end.UTC()
	return t.Apply(Put(Usage, string(key), iv), Delete(Usage, ok))
}

// RecordUsageStart opens a usage interval: the runtime calls it when a pod
// or worker container starts.
func RecordUsageStart(db *DB, iv UsageInterval) error {
	return db.Update(func(tx *Tx) error { return tx.StartUsage(iv) })
}

// RecordUsageEnd closes the open interval of kind/id (if any) at end: the
// runtime calls it when the container stops or is found gone.
func RecordUsageEnd(db *DB, kind, id string, end time.Time) error {
	return db.Update(func(tx *Tx) error { return tx.EndUsage(kind, id, end) })
}

// OpenUsage lists the intervals still open, for the runtime's reconcile
// after a restart.
func OpenUsage(db *DB) ([]UsageInterval, error) {
	var out []UsageInterval
	err := db.View(func(tx *Tx) error {
		c := tx.tx.Bucket([]byte(Usage)).Cursor()
		for k, v := c.Seek([]byte(openPrefix)); k != nil && bytes.HasPrefix(k, []byte(openPrefix)); k, v = c.Next() {
			v, err := tx.db.open(Usage, string(k), v)
			if err != nil {
				continue // logged and counted; 'berth check' names it
			}
			var iv UsageInterval
			if err := tx.Get(Usage, string(v), &iv); err != nil {
				if errors.Is(err, ErrDamaged) {
					continue
				}
				return err
			}
			out = append(out, iv)
		}
		return nil
	})
	return out, err
}

// UsageBetween calls fn for every interval overlapping [from, to), in order
// of start. Open intervals overlap everything after their start.
func UsageBetween(db *DB, from, to time.Time, fn func(UsageInterval) error) error {
	return db.View(func(tx *Tx) error {
		c := tx.tx.Bucket([]byte(Usage)).Cursor()
		for k, v := c.Seek([]byte(ivPrefix)); k != nil && bytes.HasPrefix(k, []byte(ivPrefix)); k, v = c.Next() {
			v, err := tx.db.open(Usage, string(k), v)
			if err != nil {
				continue // logged and counted; 'berth check' names it
			}
			var iv UsageInterval
			if err := json.Unmarshal(v, &iv); err != nil {
				return fmt.Errorf("decode usage %s: %w", k, err)
			}
			if !iv.Start.Before(to) {
				return nil
			}
			if !iv.End.IsZero() && !iv.End.After(from) {
				continue
			}
			if err := fn(iv); err != nil {
				return err
			}
		}
		return nil
	})
}

// PutUsageInterval stores a closed interval as is (imports and tests).
func PutUsageInterval(db *DB, iv UsageInterval) error {
	if !validKind(iv.Kind) || iv.ID == "" || iv.Start.IsZero() {
		return fmt.Errorf("store: invalid usage interval %+v", iv)
	}
	if iv.End.IsZero() {
		return RecordUsageStart(db, iv)
	}
	iv.Start, iv.End = iv.Start.UTC(), iv.End.UTC()
	return db.Update(func(tx *Tx) error { return tx.Apply(Put(Usage, ivKey(iv), iv)) })
}

// aliveKey in Meta holds the last moment Berth was known to run (RFC 3339).
const aliveKey = "alive_at"

// StampAlive records t as the last moment Berth was known to run: the
// cleaner writes it every minute and a clean stop at the end. After a stop
// or a crash it bounds what ran meanwhile (see mgmt.RepairUsage).
func StampAlive(db *DB, t time.Time) error {
	return db.Write(PutRaw(Meta, aliveKey, []byte(t.UTC().Format(time.RFC3339Nano))))
}

// LastAlive is the last StampAlive time; ok is false when none was written
// (a file from before the stamp).
func LastAlive(db *DB) (t time.Time, ok bool) {
	db.View(func(tx *Tx) error {
		if raw := tx.GetRaw(Meta, aliveKey); raw != nil {
			var err error
			t, err = time.Parse(time.RFC3339Nano, string(raw))
			ok = err == nil
		}
		return nil
	})
	return t, ok
}
