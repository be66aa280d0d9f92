package mgmt

import (
	"context"
	"fmt"
	"time"

	"berth/store"
)

// The usage repair at start-up. A worker or pod container that stopped
// while Berth was down leaves its usage interval open, and an open
// interval is billed up to "now" on every query. So before the runtime
// adopts what runs, every open interval of a worker or pod that no running
// instance backs is closed: at the time the instance really stopped when
// the runtime still knows it (the container's finish time), else at the
// last moment Berth knew it ran (store.LastAlive: stamped every minute and
// at a clean stop). Volumes are not instances: their intervals stay open.

// InstanceState is what the runtime reports of one worker's or pod's
// instance at start-up.
type InstanceState struct {
	Running    bool
	FinishedAt time.Time // zero when unknown
}

// InstanceKey names an instance for RepairUsage: kind (store.UsageWorker,
// store.UsagePod) and id.
func InstanceKey(kind, id string) string { return kind + "/" + id }

// RepairUsage decides which open intervals to close and when (pure):
// those of workers and pods without a running instance, at the instance's
// finish time if known, else at lastAlive (zero: unknown, then now), kept
// within [start, now]. It returns the intervals to close, End set.
func RepairUsage(open []store.UsageInterval, instances map[string]InstanceState, lastAlive, now time.Time) []store.UsageInterval {
	var out []store.UsageInterval
	for _, iv := range open {
		if iv.Kind != store.UsageWorker && iv.Kind != store.UsagePod {
			continue
		}
		in, known := instances[InstanceKey(iv.Kind, iv.ID)]
		if known && in.Running {
			continue // the runtime adopts it
		}
		end := lastAlive
		if known && !in.FinishedAt.IsZero() {
			end = in.FinishedAt
		}
		if end.IsZero() || end.After(now) {
			end = now
		}
		if end.Before(iv.Start) {
			end = iv.Start
		}
		iv.End = end.UTC()
		out = append(out, iv)
	}
	return out
}

// RepairUsage closes the open usage intervals no running instance backs
// (see the package function); instances is the runtime's list. It returns
// what it closed.
func (s *Service) RepairUsage(ctx context.Context, instances map[string]InstanceState) ([]store.UsageInterval, error) {
	open, err := store.OpenUsage(s.cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("open usage: %w", err)
	}
	alive, _ := store.LastAlive(s.cfg.Store)
	closed := RepairUsage(open, instances, alive, s.now())
	for _, iv := range closed {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := store.RecordUsageEnd(s.cfg.Store, iv.Kind, iv.ID, iv.End); err != nil {
			return nil, fmt.Errorf("close usage of %s %s: %w", iv.Kind, iv.ID, err)
		}
		who := []any{"pod", iv.ID}
		if iv.Kind == store.UsageWorker {
			who = []any{"endpoint", iv.EndpointID, "worker", iv.ID}
		}
		s.cfg.Logger.Info("closed the usage of an instance that stopped while Berth was down",
			append(who, "start", iv.Start, "end", iv.End)...)
	}
	return closed, nil
}
