package e2e_test

import (
	"bytes"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestModelsBesideANetworkVolume: an endpoint with a network volume and a
// model sees the volume at /runpod-volume and the cache over
// /runpod-volume/huggingface-cache/hub (a folder of that name on the
// volume is hidden from it, and untouched); the cache is read-only.
func TestModelsBesideANetworkVolume(t *testing.T) {
	hub := hubtest.New(t)
	repo := hub.Add(hubtest.Repo{ID: "acme/beside", Files: []hubtest.File{{Path: "config.json", Data: []byte(`{"beside":true}`)}}})
	s := newStackWith(t, func(c *app.Config) { c.Models = app.Models{Endpoint: hub.URL} })
	var vol struct {
		ID   string `json:"id"`
		Path string `json:"path"` // its host directory
	}
	s.call("POST", "/v1/networkvolumes", map[string]any{"name": dockertest.Unique("vol-"), "size": 10, "dataCenterId": "EU-RO-1"}, 200, &vol)
	dir := vol.Path
	decoy := filepath.Join(dir, "huggingface-cache", "hub", "decoy.txt")
	if err := os.MkdirAll(filepath.Dir(decoy), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("from the volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(decoy, []byte("on the volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	ep := s.endpoint(image, nil, map[string]any{"workersMin": 0, "workersMax": 1, "networkVolumeId": vol.ID,
		"modelReferences": []string{"https://huggingface.co/acme/beside:main"}})
	run := func(input map[string]any) (status, output, errMsg string) {
		var out struct{ Status, Output, Error string }
		s.call("POST", "/v2/"+ep.ID+"/runsync?wait=90000", map[string]any{"input": input}, 200, &out)
		return out.Status, out.Output, out.Error
	}
	if st, out, e := run(map[string]any{"read_file": "/runpod-volume/hello.txt"}); st != "COMPLETED" || out != "from the volume" {
		t.Fatalf("the volume: %s %q %s", st, out, e)
	}
	model := "/runpod-volume/huggingface-cache/hub/models--acme--beside/snapshots/" + repo.Commit + "/config.json"
	if st, out, e := run(map[string]any{"read_file": model}); st != "COMPLETED" || out != `{"beside":true}` {
		t.Fatalf("the model: %s %q %s", st, out, e)
	}
	if st, _, e := run(map[string]any{"read_file": "/runpod-volume/huggingface-cache/hub/decoy.txt"}); st != "FAILED" || !strings.Contains(e, "no such file") {
		t.Errorf("the volume's own huggingface-cache/hub is visible over the cache: %s %s", st, e)
	}
	if b, err := os.ReadFile(decoy); err != nil || string(b) != "on the volume" {
		t.Errorf("the volume's folder was touched: %q %v", b, err)
	}
	// The volume is writable, the cache is not.
	if st, out, e := run(map[string]any{"write_file": "/runpod-volume/written.txt"}); st != "COMPLETED" || out != "written" {
		t.Errorf("writing to the volume: %s %q %s", st, out, e)
	}
	if st, _, e := run(map[string]any{"write_file": "/runpod-volume/huggingface-cache/hub/models--acme--beside/evil"}); st != "FAILED" || !strings.Contains(e, "read-only file system") {
		t.Errorf("writing into the cache: %s %s; want a read-only file system", st, e)
	}
}

// TestModelDownloadResumesAfterARestart: Berth stops while a model is
// mid-file; the next Berth on the same data folder resumes the partial
// file with Range from where it stopped, and the model completes.
func TestModelDownloadResumesAfterARestart(t *testing.T) {
	hub := hubtest.New(t)
	weights := make([]byte, 3_000_000)
	if _, err := rand.Read(weights); err != nil {
		t.Fatal(err)
	}
	repo := hub.Add(hubtest.Repo{ID: "acme/restart", Files: []hubtest.File{{Path: "model.safetensors", Data: weights, LFS: true}}})
	reached, release := hub.Hold(weights, 1_000_000) // only a transfer from before byte 1000000 is held
	defer release()
	data := t.TempDir()
	set := func(c *app.Config) { c.DataDir, c.Models = data, app.Models{Endpoint: hub.URL} }
	s1 := newStackWith(t, set)
	// workersMax 0: the model downloads, no worker is ever wanted.
	ep := s1.endpoint("berth-test/never-started:1", nil, map[string]any{"workersMin": 0, "workersMax": 0,
		"modelReferences": []string{"https://huggingface.co/acme/restart"}})
	select {
	case <-reached:
	case <-t.Context().Done():
		t.Fatal("the download never reached the held byte")
	}
	// The server has sent the bytes; Berth writes them as they arrive.
	part := filepath.Join(data, "models", "hub", "models--acme--restart", "blobs", hubtest.Sha256(weights)+".incomplete")
	s1.eventually("the first 1000000 bytes are in the partial file", func() bool {
		st, err := os.Stat(part)
		return err == nil && st.Size() == 1_000_000
	})
	s1.b.Stop()
	if st, err := os.Stat(part); err != nil || st.Size() != 1_000_000 {
		t.Fatalf("partial file after the stop: %v %v", st, err)
	}

	s2 := newStackWith(t, set)
	snapshot := filepath.Join(data, "models", "hub", "models--acme--restart", "snapshots", repo.Commit, "model.safetensors")
	s2.eventually("the model completes after the restart", func() bool {
		b, err := os.ReadFile(snapshot)
		return err == nil && hubtest.Sha256(b) == hubtest.Sha256(weights)
	})
	var ranged []string
	for _, r := range hub.Requests() {
		if r.Range != "" && strings.HasPrefix(r.Path, "/cdn/") {
			ranged = append(ranged, r.Range)
		}
	}
	if len(ranged) != 1 || ranged[0] != "bytes=1000000-" {
		t.Fatalf("ranged requests %q; want one from byte 1000000", ranged)
	}
	// The snapshot is published before the download's state says ready:
	// the status clears just after.
	s2.eventually("the status to stop saying downloading", func() bool {
		var view struct{ Status struct{ Reason string } }
		s2.call("GET", "/v1/endpoints/"+ep.ID, nil, 200, &view)
		return !strings.Contains(view.Status.Reason, "downloading")
	})
}

// TestGatedModelNeedsTheStoredToken: an endpoint names a gated model and
// Berth has no token: the download fails with the Hub's 401 and says so on
// the endpoint — v1's status reason and models, v2's models, GraphQL's
// Endpoint.models. The token stored through PUT
// /v2/account/huggingface-token (refused when malformed, nothing stored)
// makes the download try again at once (the back-off is an hour here) and
// complete. The token appears in no answer, no audit entry, no log line.
func TestGatedModelNeedsTheStoredToken(t *testing.T) {
	hub := hubtest.New(t)
	hub.Token = "hf_GatedSecret0123456789abcdefXYZ"
	repo := hub.Add(hubtest.Repo{ID: "acme/gated", Gated: true, Files: []hubtest.File{{Path: "config.json", Data: []byte(`{"gated":true}`)}}})
	var logs syncBuffer
	var data string
	s := newStackWith(t, func(c *app.Config) {
		c.Models = app.Models{Endpoint: hub.URL, MinBackoff: time.Hour}
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		data = c.DataDir
	})
	var answers []string
	call := func(method, path string, body any, want int, out any) {
		t.Helper()
		answers = append(answers, string(s.call(method, path, body, want, out)))
	}
	ep := s.endpoint("berth-test/never-started:1", nil, map[string]any{"workersMin": 0, "workersMax": 0,
		"modelReferences": []string{"https://huggingface.co/acme/gated"}})

	type model struct {
		Reference, State, Error, Message string
		BytesDone, BytesTotal            float64
		Attempts                         int
	}
	var v1 struct {
		Status struct{ Reason string }
		Models []model
	}
	s.eventually("the endpoint says the Hub refused the gated model", func() bool {
		call("GET", "/v1/endpoints/"+ep.ID, nil, 200, &v1)
		return len(v1.Models) == 1 && v1.Models[0].State == "failed" && strings.Contains(v1.Status.Reason, "failed")
	})
	const refused = "HTTP 401"
	if m := v1.Models[0]; !strings.Contains(m.Error, refused) || !strings.Contains(m.Error, "no Hugging Face token") ||
		m.Reference != "https://huggingface.co/acme/gated" || m.Attempts != 1 || !strings.Contains(m.Message, m.Error) {
		t.Errorf("v1 models: %+v", v1.Models)
	}
	if !strings.Contains(v1.Status.Reason, "downloading acme/gated failed") || !strings.Contains(v1.Status.Reason, refused) {
		t.Errorf("v1 status reason: %q", v1.Status.Reason)
	}
	var v2 struct{ Models []model }
	call("GET", "/v2/serverless/"+ep.ID, nil, 200, &v2)
	if len(v2.Models) != 1 || v2.Models[0].State != "failed" || !strings.Contains(v2.Models[0].Error, refused) {
		t.Errorf("v2 models: %+v", v2.Models)
	}
	var gql struct {
		Data struct {
			Myself struct {
				Endpoints []struct {
					ID     string
					Models []model
				}
			}
		}
	}
	call("POST", "/graphql", map[string]any{"query": `{ myself { endpoints { id models { reference state error message bytesDone bytesTotal attempts } } } }`}, 200, &gql)
	if es := gql.Data.Myself.Endpoints; len(es) != 1 || len(es[0].Models) != 1 || es[0].Models[0].State != "failed" ||
		!strings.Contains(es[0].Models[0].Error, refused) {
		t.Errorf("GraphQL models: %+v", gql.Data.Myself.Endpoints)
	}

	var info struct {
		Set       bool
		UpdatedAt string
	}
	call("GET", "/v2/account/huggingface-token", nil, 200, &info)
	if info.Set {
		t.Fatalf("a token before one was stored: %+v", info)
	}
	for _, bad := range []any{map[string]any{}, map[string]any{"token": ""}, map[string]any{"token": "hf_with space"},
		map[string]any{"token": "hf_\x01ctl"}, map[string]any{"token": strings.Repeat("x", 4097)}} {
		b := s.call("PUT", "/v2/account/huggingface-token", bad, 400, nil)
		if !strings.Contains(string(b), "token") {
			t.Errorf("PUT %v: %s does not name the field", bad, b)
		}
	}
	call("GET", "/v2/account/huggingface-token", nil, 200, &info)
	if info.Set {
		t.Fatalf("a refused token was stored: %+v", info)
	}

	call("PUT", "/v2/account/huggingface-token", map[string]any{"token": hub.Token}, 200, &info)
	if !info.Set || info.UpdatedAt == "" {
		t.Errorf("PUT answered %+v", info)
	}
	s.eventually("the gated model downloads with the stored token", func() bool {
		call("GET", "/v1/endpoints/"+ep.ID, nil, 200, &v1)
		return len(v1.Models) == 1 && v1.Models[0].State == "ready"
	})
	if _, err := os.Stat(filepath.Join(data, "models", "hub", "models--acme--gated", "snapshots", repo.Commit, "config.json")); err != nil {
		t.Errorf("the snapshot: %v", err)
	}
	if m := v1.Models[0]; m.BytesDone != m.BytesTotal || m.BytesTotal != float64(len(`{"gated":true}`)) {
		t.Errorf("ready model: %+v", m)
	}
	sawToken := false
	for _, r := range hub.Requests() {
		sawToken = sawToken || r.Authorization == "Bearer "+hub.Token
	}
	if !sawToken {
		t.Error("the Hub never received the stored token")
	}
	call("GET", "/v2/serverless/"+ep.ID, nil, 200, nil)
	call("GET", "/v2/account/huggingface-token", nil, 200, &info)
	call("GET", "/v1/audit", nil, 200, nil)
	call("POST", "/graphql", map[string]any{"query": `{ myself { endpoints { id models { reference state error message } } } }`}, 200, nil)
	call("GET", "/v2/openapi.json", nil, 200, nil)
	for _, a := range answers {
		if strings.Contains(a, hub.Token) || strings.Contains(a, "GatedSecret") {
			t.Fatalf("an answer carries the token: %s", a)
		}
	}
	if strings.Contains(logs.String(), "GatedSecret") {
		t.Fatal("the log carries the token")
	}

	call("DELETE", "/v2/account/huggingface-token", nil, 200, &info)
	call("GET", "/v2/account/huggingface-token", nil, 200, &info)
	if info.Set {
		t.Errorf("after DELETE: %+v", info)
	}
}

// syncBuffer is a log sink tests read while Berth writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
