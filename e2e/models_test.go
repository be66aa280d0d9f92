package e2e_test

import (
	"crypto/rand"
	"strings"
	"testing"

	"berth/app"
	"berth/internal/dockertest"
	"berth/internal/hubtest"
	"berth/store"
)

// TestWorkerStartsWithItsModel: an endpoint names a Hugging Face model
// (served by the local Hub stand-in). While it downloads, a job waits in
// the queue, no worker container runs (so no worker time is billed), and
// the endpoint's status and /health say "downloading ORG/NAME: X of Y";
// once it is complete a worker starts with the cache mounted read-only at
// /runpod-volume/huggingface-cache/hub and HF_HUB_CACHE pointing there,
// and the job's handler reads the model's file from the snapshot.
func TestWorkerStartsWithItsModel(t *testing.T) {
	hub := hubtest.New(t)
	weights := make([]byte, 3_000_000)
	if _, err := rand.Read(weights); err != nil {
		t.Fatal(err)
	}
	config := `{"model_type":"tiny","hidden_size":8}`
	repo := hub.Add(hubtest.Repo{ID: "acme/tiny-model", Files: []hubtest.File{
		{Path: "config.json", Data: []byte(config)},
		{Path: "model.safetensors", Data: weights, LFS: true},
	}})
	reached, release := hub.Hold(weights, 1_000_000)
	defer release()
	s := newStackWith(t, func(c *app.Config) {
		c.Models = app.Models{Endpoint: hub.URL}
	})
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	ep := s.endpoint(image, nil, map[string]any{"workersMin": 0, "workersMax": 1,
		"modelReferences": []string{"https://huggingface.co/acme/tiny-model"}})
	if len(ep.ModelReferences) != 1 {
		t.Fatalf("the endpoint does not carry its model reference: %+v", ep)
	}
	snapshot := "/runpod-volume/huggingface-cache/hub/models--acme--tiny-model/snapshots/" + repo.Commit
	var job struct{ ID, Status string }
	s.call("POST", "/v2/"+ep.ID+"/run", map[string]any{"input": map[string]any{"read_file": snapshot + "/config.json"}}, 200, &job)

	select {
	case <-reached:
	case <-s.t.(*testing.T).Context().Done():
		t.Fatal("the download never reached the held byte")
	}
	var view struct {
		Status struct{ Reason string }
	}
	s.eventually("the endpoint's status shows the download's progress", func() bool {
		s.call("GET", "/v1/endpoints/"+ep.ID, nil, 200, &view)
		return strings.Contains(view.Status.Reason, "downloading acme/tiny-model: 1 MB of 3 MB")
	})
	var health struct{ Reason string }
	s.call("GET", "/v2/"+ep.ID+"/health", nil, 200, &health)
	if !strings.Contains(health.Reason, "downloading acme/tiny-model: ") {
		t.Errorf("/health reason %q does not show the download", health.Reason)
	}
	var st struct{ Status string }
	s.call("GET", "/v2/"+ep.ID+"/status/"+job.ID, nil, 200, &st)
	if st.Status != string(store.InQueue) {
		t.Fatalf("job %s while the model downloads; want IN_QUEUE", st.Status)
	}
	if ws := s.sup.Workers(ep.ID); len(ws) != 0 {
		t.Fatalf("a worker started before its model was complete: %+v", ws)
	}

	release()
	var done struct {
		Status string
		Output string
		Error  string
	}
	s.eventually("the job completes once the model is there", func() bool {
		s.call("GET", "/v2/"+ep.ID+"/status/"+job.ID, nil, 200, &done)
		return store.JobStatus(done.Status).Terminal()
	})
	if done.Status != "COMPLETED" || done.Output != config {
		t.Fatalf("job: %+v; want the model's config.json %q", done, config)
	}
	var env struct{ Status, Output string }
	s.call("POST", "/v2/"+ep.ID+"/runsync?wait=60000", map[string]any{"input": map[string]any{"env": "HF_HUB_CACHE"}}, 200, &env)
	if env.Output != "/runpod-volume/huggingface-cache/hub" {
		t.Errorf("HF_HUB_CACHE in the worker: %+v", env)
	}
	view.Status.Reason = "" // absent when there is none
	s.call("GET", "/v1/endpoints/"+ep.ID, nil, 200, &view)
	if strings.Contains(view.Status.Reason, "downloading") {
		t.Errorf("status still says %q", view.Status.Reason)
	}
}
