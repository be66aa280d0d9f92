package e2e_test

import (
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/series"
)

// TestColdStartsPlotted: an endpoint with no worker gets a job; Berth
// launches a worker container for it — a cold start — and the job
// completes. GET /v1/endpoints/ID/metrics, which the dashboard plots,
// counts the one cold start and the job in the hour and the day, with its
// latencies, and its sampled workers show the container.
func TestColdStartsPlotted(t *testing.T) {
	s := newStack(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	ep := s.endpoint(image, nil, map[string]any{"workersMin": 0, "workersMax": 1, "idleTimeout": 60})
	var done struct{ Status string }
	s.call("POST", "/v2/"+ep.ID+"/runsync?wait=90000", map[string]any{"input": map[string]any{"echo": 1}}, 200, &done)
	if done.Status != "COMPLETED" {
		t.Fatalf("job: %+v", done)
	}
	type view struct{ Buckets []series.Bucket }
	sum := func(window string) (cold, completed, workers int, exec *series.Percentiles) {
		var v view
		s.call("GET", "/v1/endpoints/"+ep.ID+"/metrics?window="+window, nil, 200, &v)
		for _, b := range v.Buckets {
			cold += b.ColdStarts
			completed += b.Completed
			if w := b.Workers; w != nil {
				workers = max(workers, w.Idle+w.Running+w.Initializing)
			}
			if b.ExecutionMs != nil {
				exec = b.ExecutionMs
			}
		}
		return
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cold, completed, workers, exec := sum("hour")
		if cold == 1 && completed == 1 && workers == 1 && exec != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hour: %d cold starts, %d completed, %d workers sampled, execution %v; want 1, 1, 1 and a time", cold, completed, workers, exec)
		}
	}
	if cold, completed, _, _ := sum("day"); cold != 1 || completed != 1 {
		t.Errorf("day: %d cold starts, %d completed; want 1, 1", cold, completed)
	}
}
