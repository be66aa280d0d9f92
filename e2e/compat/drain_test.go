package compat

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth/internal/dockertest"
	"berth/runtime"
	"berth/store"
)

// drainWorker is a worker image and the input of a job it completes.
type drainWorker struct {
	name  string
	image func(t *testing.T) string
	input map[string]any
}

// drainWorkers: the stock runpod-python 1.12 SDK (Debian's python3, the
// SDK copied in) and Berth's own Go worker (testdata/echoworker).
var drainWorkers = []drainWorker{
	{"runpod-python", sdkImage, map[string]any{"mode": "echo", "value": 1}},
	{"berth-go-worker", func(t *testing.T) string { return dockertest.BuildGoImage(t, "berth/testdata/echoworker") }, map[string]any{"echo": 1}},
}

// goneWithin is how soon a drained idle worker's container must be gone
// (issue 26: the SDK exits in about a second once its long polls are
// answered, instead of waiting out the 30 s hold).
const goneWithin = 3 * time.Second

// TestDrainingWorkerGetsNoJobAndStops: through berth serve, with each
// worker in a Berth-launched container. A worker drained at its idle
// timeout is never handed a job: one sent right as the drain starts runs
// on a new worker in about a cold start, with one attempt (its own) and
// no requeue; and the drained container is gone within goneWithin of the
// drain's decision.
func TestDrainingWorkerGetsNoJobAndStops(t *testing.T) {
	t.Parallel()
	for _, w := range drainWorkers {
		t.Run(w.name, func(t *testing.T) {
			img := w.image(t)
			s := startBerth(t)
			docker := dockertest.Require(t)
			ep := drainEndpoint(t, s, img, map[string]any{"workersMin": 0, "workersMax": 1, "idleTimeout": 1})

			// The cold start this machine takes now: a job on an endpoint
			// with no worker.
			t0 := time.Now()
			first := runJob(t, s, ep, w.input)
			cold := time.Since(t0)
			w1 := first.WorkerID

			// The idle timeout drains w1; a job is sent the moment the
			// runtime has decided (its log line follows the decision).
			drainAt := waitLogLine(t, s, "draining worker", "worker="+w1)
			gone := watchContainersGone(t, docker, runtime.LabelWorker+"="+w1)
			t1 := time.Now()
			second := runJob(t, s, ep, w.input)
			took := time.Since(t1)
			t.Logf("cold start %s; job sent during the drain completed in %s on %s (drained: %s)",
				cold.Round(time.Millisecond), took.Round(time.Millisecond), second.WorkerID, w1)
			if second.WorkerID == w1 {
				t.Fatalf("the job ran on the drained worker %s", w1)
			}
			if limit := cold + 5*time.Second; took > limit {
				t.Errorf("the job sent during the drain took %s; a cold start took %s (limit %s)", took, cold, limit)
			}
			var h struct {
				Jobs struct{ Retried, Completed int }
			}
			s.rest("GET", "/v2/"+ep+"/health", nil, 200, &h)
			if h.Jobs.Retried != 0 || h.Jobs.Completed != 2 {
				t.Errorf("health jobs %+v: want 2 completed, none requeued", h.Jobs)
			}

			if d := goneAfter(t, gone, drainAt); d > goneWithin {
				t.Errorf("the drained idle worker's container was gone %s after the drain was decided, want at most %s", d.Round(time.Millisecond), goneWithin)
			} else {
				t.Logf("drained idle worker's container gone %s after the drain was decided", d.Round(time.Millisecond))
			}

			// Attempts, from the job's record: only the hand-over to the
			// worker that ran it.
			s.Stop()
			db, err := store.Open(filepath.Join(s.Data, "berth.db"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rec, _, err := db.LoadJob(second.ID)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Attempts != 1 {
				t.Errorf("attempts = %d, want 1 (no hand-over to the drained worker)", rec.Attempts)
			}
		})
	}
}

// TestDeletedEndpointLeavesNoContainer: deleting an endpoint with idle
// workers answers their held long polls at once, so none of its
// containers is left goneWithin after the delete returns.
func TestDeletedEndpointLeavesNoContainer(t *testing.T) {
	t.Parallel()
	for _, w := range drainWorkers {
		t.Run(w.name, func(t *testing.T) {
			img := w.image(t)
			s := startBerth(t)
			docker := dockertest.Require(t)
			ep := drainEndpoint(t, s, img, map[string]any{"workersMin": 2, "workersMax": 2, "idleTimeout": 60})
			eventually(t, "two idle workers", func() bool {
				var h struct{ Workers struct{ Idle int } }
				s.rest("GET", "/v2/"+ep+"/health", nil, 200, &h)
				return h.Workers.Idle == 2
			})
			s.rest("DELETE", "/v1/endpoints/"+ep, nil, 204, nil)
			deleted := time.Now()
			if d := goneAfter(t, watchContainersGone(t, docker, runtime.LabelEndpoint+"="+ep), deleted); d > goneWithin {
				t.Errorf("the deleted endpoint's containers were gone %s after the delete, want at most %s", d.Round(time.Millisecond), goneWithin)
			} else {
				t.Logf("the deleted endpoint's containers gone %s after the delete", d.Round(time.Millisecond))
			}
		})
	}
}

// drainEndpoint creates a CPU endpoint of img with the given fields.
func drainEndpoint(t *testing.T, s *server, img string, fields map[string]any) string {
	t.Helper()
	var tpl, ep struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": dockertest.Unique("drain-"), "imageName": img, "isServerless": true}, 200, &tpl)
	body := map[string]any{"name": dockertest.Unique("drain-"), "templateId": tpl.ID, "computeType": "CPU"}
	for k, v := range fields {
		body[k] = v
	}
	s.rest("POST", "/v1/endpoints", body, 200, &ep)
	return ep.ID
}

type jobView struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	WorkerID string `json:"workerId"`
}

// runJob submits a job with /run and polls its status until it is
// COMPLETED (failing on any other end).
func runJob(t *testing.T, s *server, ep string, input map[string]any) jobView {
	t.Helper()
	var j jobView
	s.rest("POST", "/v2/"+ep+"/run", map[string]any{"input": input}, 200, &j)
	id := j.ID
	eventuallyFast(t, "job "+id+" completed", func() bool {
		s.rest("GET", "/v2/"+ep+"/status/"+id, nil, 200, &j)
		switch j.Status {
		case "COMPLETED":
			return true
		case "FAILED", "CANCELLED", "TIMED_OUT":
			t.Fatalf("job %s ended %s", id, j.Status)
		}
		return false
	})
	return j
}

// eventuallyFast is eventually with a 20 ms poll (the tests time what
// they wait for).
func eventuallyFast(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitLong)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLogLine waits for berth serve's log line holding msg and every one
// of attrs, and returns when it was seen.
func waitLogLine(t *testing.T, s *server, msg string, attrs ...string) time.Time {
	t.Helper()
	eventuallyFast(t, fmt.Sprintf("log line %q %v", msg, attrs), func() bool {
		for _, l := range strings.Split(s.Logs.String(), "\n") {
			if !strings.Contains(l, `msg="`+msg+`"`) {
				continue
			}
			all := true
			for _, a := range attrs {
				all = all && strings.Contains(l, a)
			}
			if all {
				return true
			}
		}
		return false
	})
	return time.Now()
}

// watchContainersGone polls Docker, from now on, until no container (in
// any state) carries the label, and sends when that was seen (bounded by
// waitLong: the test fails past it).
func watchContainersGone(t *testing.T, docker *client.Client, label string) <-chan time.Time {
	t.Helper()
	out := make(chan time.Time, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label)})
			if err == nil && len(list.Items) == 0 {
				out <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return out
}

// goneAfter is how long after since the containers watched on gone were
// seen gone; the test fails if they were not within waitLong.
func goneAfter(t *testing.T, gone <-chan time.Time, since time.Time) time.Duration {
	t.Helper()
	at, ok := <-gone
	if !ok {
		t.Fatalf("containers still there %s after", waitLong)
	}
	return at.Sub(since)
}
