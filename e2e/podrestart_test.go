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

// TestPodsThatEndedWhileBerthWasDown: two pods run, Berth stops (their
// containers keep running), one container is killed and the other removed
// while Berth is down. From the first request after the next start on the
// same file, both read EXITED on v1, v2 and GraphQL, with how each ended —
// not RUNNING — and their usage intervals are closed, not billed up to the
// restart.
func TestPodsThatEndedWhileBerthWasDown(t *testing.T) {
	docker := dockertest.Require(t)
	image := dockertest.BuildGoImage(t, "berth/runtime/testdata/testprog")
	data := t.TempDir()
	t.Cleanup(func() { apptest.RemoveContainers(t, data) })

	a := startOn(t, data, false)
	s := &stack{t: t, app: a.App, db: a.Store(), q: a.Queue(), sup: a.Supervisor(), base: a.URL()}
	var killed, removed struct{ ID, DesiredStatus string }
	s.call("POST", "/v1/pods", map[string]any{"name": "killed", "imageName": image, "dockerStartCmd": []string{"trap"}, "computeType": "CPU"}, 201, &killed)
	s.call("POST", "/v1/pods", map[string]any{"name": "removed", "imageName": image, "dockerStartCmd": []string{"trap"}, "computeType": "CPU"}, 201, &removed)
	if killed.DesiredStatus != "RUNNING" || removed.DesiredStatus != "RUNNING" {
		t.Fatalf("pods created: %+v %+v", killed, removed)
	}
	s.eventually("two pod usage intervals open", func() bool {
		open, err := store.OpenUsage(s.db)
		n := 0
		for _, iv := range open {
			if iv.Kind == store.UsagePod {
				n++
			}
		}
		return err == nil && n == 2
	})
	stopped := time.Now()
	stopOn(t, a)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{} // pod id → container id
	for _, c := range list.Items {
		if c.Labels[runtime.LabelDataDir] == app.Instance(data) && c.Labels[runtime.LabelKind] == runtime.KindPod {
			ids[c.Labels[runtime.LabelPod]] = c.ID
		}
	}
	if ids[killed.ID] == "" || ids[removed.ID] == "" {
		t.Fatalf("pod containers %v, pods %s and %s", ids, killed.ID, removed.ID)
	}
	if _, err := docker.ContainerKill(ctx, ids[killed.ID], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	if _, err := docker.ContainerRemove(ctx, ids[removed.ID], client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	a = startOn(t, data, true)
	defer stopOn(t, a)
	s = &stack{t: t, app: a.App, db: a.Store(), q: a.Queue(), sup: a.Supervisor(), base: a.URL()}
	for _, tc := range []struct{ id, reason string }{{killed.ID, "exit code 137"}, {removed.ID, "container removed"}} {
		var v1 struct {
			DesiredStatus string
			LastExit      *store.PodExit
		}
		s.call("GET", "/v1/pods/"+tc.id, nil, 200, &v1)
		if v1.DesiredStatus != "EXITED" || v1.LastExit == nil || v1.LastExit.Reason != tc.reason {
			t.Errorf("v1 pod %s: %+v (lastExit %+v), want EXITED, %q", tc.id, v1, v1.LastExit, tc.reason)
		}
		var v2 struct {
			Status   string
			LastExit *store.PodExit
		}
		s.call("GET", "/v2/pods/"+tc.id, nil, 200, &v2)
		if v2.Status != "EXITED" || v2.LastExit == nil || v2.LastExit.Reason != tc.reason {
			t.Errorf("v2 pod %s: %+v (lastExit %+v), want EXITED, %q", tc.id, v2, v2.LastExit, tc.reason)
		}
		var gql struct {
			Data struct {
				Pod struct {
					DesiredStatus string
					LastExit      *struct{ Reason string }
				}
			}
			Errors []any
		}
		s.call("POST", "/graphql", map[string]any{"query": `query { pod(input: {podId: "` + tc.id + `"}) { desiredStatus lastExit { reason } } }`}, 200, &gql)
		if p := gql.Data.Pod; len(gql.Errors) > 0 || p.DesiredStatus != "EXITED" || p.LastExit == nil || p.LastExit.Reason != tc.reason {
			t.Errorf("GraphQL pod %s: %+v %v, want EXITED, %q", tc.id, p, gql.Errors, tc.reason)
		}
	}

	ends := map[string]time.Time{}
	err = store.UsageBetween(a.Store(), stopped.Add(-time.Hour), restarted.Add(time.Hour), func(iv store.UsageInterval) error {
		if iv.Kind == store.UsagePod {
			ends[iv.ID] = iv.End
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{killed.ID, removed.ID} {
		if e := ends[id]; e.IsZero() || !e.Before(restarted) {
			t.Errorf("pod %s's usage ends at %v, want before the restart (%v)", id, e, restarted)
		}
	}

	// Started again, the removed pod gets a new container and reads RUNNING.
	var again struct {
		DesiredStatus string
		LastExit      *store.PodExit
	}
	s.call("POST", "/v1/pods/"+removed.ID+"/start", nil, 200, &again)
	if again.DesiredStatus != "RUNNING" || again.LastExit != nil {
		t.Errorf("started again: %+v", again)
	}
}
