package mgmt

import (
	"context"
	"encoding/json"
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
	// Pending: created, waiting to be placed (a cluster's); a pod's
	// record stays as it is.
	Pending bool
	// Exit is how a stopped pod container ended (nil: unknown); see
	// EndedPods.
	Exit *PodExit
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

// EndedPod is a pod whose record says RUNNING while no container of its
// runs, with how it ended.
type EndedPod struct {
	ID   string
	Exit PodExit
}

// EndedPods decides (pure) which pods' records say RUNNING while no
// container of theirs runs, and how each ended: its stopped container's
// exit (InstanceState.Exit), else "container removed" at lastAlive, the
// last moment Berth knew it ran (not before the pod's last start; zero,
// unknown: PodExited's now).
func EndedPods(pods []store.Pod, instances map[string]InstanceState, lastAlive time.Time) []EndedPod {
	var out []EndedPod
	for _, p := range pods {
		if p.DesiredStatus != store.PodRunning {
			continue
		}
		in, known := instances[InstanceKey(store.UsagePod, p.ID)]
		switch {
		case known && (in.Running || in.Pending):
			continue // the runtime adopts it
		case known && in.Exit != nil:
			out = append(out, EndedPod{ID: p.ID, Exit: *in.Exit})
			continue
		}
		at := lastAlive
		if known && !in.FinishedAt.IsZero() {
			at = in.FinishedAt
		}
		if !at.IsZero() && at.Before(p.LastStartedAt) {
			at = p.LastStartedAt
		}
		out = append(out, EndedPod{ID: p.ID, Exit: PodExit{Reason: "container removed", At: at}})
	}
	return out
}

// RepairPods records, at start-up before anything is served, the end of
// every pod whose container stopped or was removed while Berth was down
// (EndedPods): EXITED with its lastExit, as PodExited records an exit seen
// live. It returns the ids of the pods it changed.
func (s *Service) RepairPods(ctx context.Context, instances map[string]InstanceState) ([]string, error) {
	var pods []store.Pod
	err := s.cfg.Store.Scan(store.Pods, func(_ string, raw []byte) error {
		var p store.Pod
		if err := json.Unmarshal(raw, &p); err != nil {
			return err
		}
		pods = append(pods, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	alive, _ := store.LastAlive(s.cfg.Store)
	var ids []string
	for _, e := range EndedPods(pods, instances, alive) {
		if err := ctx.Err(); err != nil {
			return ids, err
		}
		if err := s.PodExited(ctx, e.ID, e.Exit); err != nil {
			return ids, fmt.Errorf("pod %s: %w", e.ID, err)
		}
		ids = append(ids, e.ID)
	}
	return ids, nil
}
