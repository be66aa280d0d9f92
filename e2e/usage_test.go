package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth/app"
	"berth/internal/apptest"
	"berth/internal/dockertest"
	"berth/runtime"
	"berth/store"
)

// TestUsageOfWorkersThatDiedWhileBerthWasDown: two worker containers run,
// Berth stops (the containers keep running, as after berth serve's stop),
// one container is killed and the other removed while Berth is down. At
// the next start their open usage intervals are closed: the killed one at
// the time its container stopped, the removed one at the last moment Berth
// knew it ran (its stop) — not billed up to "now" on every query.
func TestUsageOfWorkersThatDiedWhileBerthWasDown(t *testing.T) {
	docker := dockertest.Require(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	data := t.TempDir()
	t.Cleanup(func() { apptest.RemoveContainers(t, data) })

	a := startOn(t, data, false)
	s := &stack{t: t, app: a.App, db: a.Store(), q: a.Queue(), sup: a.Supervisor(), base: a.URL()}
	s.endpoint(image, nil, map[string]any{"workersMin": 2, "workersMax": 2})
	var open []store.UsageInterval
	s.eventually("two worker usage intervals open", func() bool {
		var err error
		open, err = store.OpenUsage(s.db)
		return err == nil && len(open) == 2
	})
	stopped := time.Now()
	stopOn(t, a)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{} // worker id → container id
	for _, c := range list.Items {
		if c.Labels[runtime.LabelDataDir] == app.Instance(data) && c.Labels[runtime.LabelKind] == runtime.KindWorker {
			ids[c.Labels[runtime.LabelWorker]] = c.ID
		}
	}
	killed, removed := open[0].ID, open[1].ID
	if ids[killed] == "" || ids[removed] == "" {
		t.Fatalf("worker containers %v, open intervals of %s and %s", ids, killed, removed)
	}
	if _, err := docker.ContainerKill(ctx, ids[killed], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	in, err := docker.ContainerInspect(ctx, ids[killed], client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	finished, err := time.Parse(time.RFC3339Nano, in.Container.State.FinishedAt)
	if err != nil || finished.IsZero() {
		t.Fatalf("finished at %q: %v", in.Container.State.FinishedAt, err)
	}
	if _, err := docker.ContainerRemove(ctx, ids[removed], client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // down a while: "now" at the restart is well past both ends
	restarted := time.Now()

	a = startOn(t, data, true)
	defer stopOn(t, a)
	ends := map[string]time.Time{}
	err = store.UsageBetween(a.Store(), stopped.Add(-time.Hour), restarted.Add(time.Hour), func(iv store.UsageInterval) error {
		if iv.ID == killed || iv.ID == removed {
			ends[iv.ID] = iv.End
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := ends[killed].Sub(finished); ends[killed].IsZero() || d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("the killed worker's interval ends at %v, want its container's finish %v", ends[killed], finished)
	}
	if e := ends[removed]; e.IsZero() || e.After(stopped.Add(5*time.Second)) || e.Before(open[1].Start) {
		t.Errorf("the removed worker's interval ends at %v, want Berth's stop (≈ %v)", e, stopped)
	}
	for id, e := range ends {
		if !e.Before(restarted) {
			t.Errorf("%s billed up to the restart (%v)", id, e)
		}
	}
}
