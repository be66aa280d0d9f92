package e2e_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"berth/app"
	"berth/internal/clientkit"
	"berth/internal/dockertest"
	"berth/internal/hubtest"
	"berth/store"
)

// hubLibImage is a worker image: Debian's python3 with the packages of
// runpod-python and huggingface_hub, both libraries (and the shims)
// copied in from ../shared/thirdparty at test time, and
// testdata/hf_handler.py as its handler. The test skips where ../shared
// is absent (and fails with BERTH_REQUIRE_DOCKER=1).
func hubLibImage(t *testing.T) string {
	t.Helper()
	dir := clientkit.Dir(t)
	dockertest.Require(t)
	hubLib := filepath.Join(dir, clientkit.HubLibDir, "huggingface_hub")
	if _, err := os.Stat(filepath.Join(hubLib, "__init__.py")); err != nil {
		t.Fatalf("%s is not beside the runpod-python of %s: %v", clientkit.HubLibDir, dir, err)
	}
	handler, err := os.ReadFile("testdata/hf_handler.py")
	if err != nil {
		t.Fatal(err)
	}
	return dockertest.BuildDebianImage(t, dockertest.DebianImage{
		Packages: slices.Concat(clientkit.DebianPackages, clientkit.HubLibPackages),
		Dirs: map[string]string{
			"/opt/python/runpod":          filepath.Join(dir, clientkit.PythonSDKDir, "runpod"),
			"/opt/python/huggingface_hub": hubLib,
			"/opt/python-shims":           filepath.Join(dir, clientkit.ShimsDir),
		},
		Files: []dockertest.ImageFile{{Name: "handler.py", Mode: 0o644, Data: handler}},
		Env:   []string{"PYTHONPATH=/opt/python:/opt/python-shims", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"},
		Cmd:   []string{"python3", "-u", "/handler.py"},
	})
}

// TestWorkerReadsItsModelThroughHuggingfaceHub: a runpod-python worker in
// a container loads its models with the official huggingface_hub
// (1.28.0), offline (HF_HUB_OFFLINE=1 in the template; HF_HOME and
// HF_HUB_CACHE as Berth sets them), from the read-only cache Berth
// mounts: snapshot_download and hf_hub_download find a model referenced by
// a branch and one referenced by a commit, and read the bytes the Hub
// served. The layout is proven by the library, not by Berth's reader.
func TestWorkerReadsItsModelThroughHuggingfaceHub(t *testing.T) {
	image := hubLibImage(t)
	hub := hubtest.New(t)
	weights := make([]byte, 2_000_000)
	if _, err := rand.Read(weights); err != nil {
		t.Fatal(err)
	}
	files := func(tag string) []hubtest.File {
		return []hubtest.File{
			{Path: "config.json", Data: []byte(`{"model_type":"` + tag + `"}`)},
			{Path: "model.safetensors", Data: append([]byte(tag), weights...), LFS: true},
			{Path: "tokenizer/vocab.txt", Data: []byte("a\nb\n" + tag + "\n")},
		}
	}
	branch := hub.Add(hubtest.Repo{ID: "acme/lib-branch", Refs: []string{"dev"}, Files: files("branch")})
	pinned := hub.Add(hubtest.Repo{ID: "acme/lib-pinned", Files: files("pinned")})
	s := newStackWith(t, func(c *app.Config) { c.Models = app.Models{Endpoint: hub.URL} })
	ep := s.endpoint(image, map[string]string{"HF_HUB_OFFLINE": "1"}, map[string]any{"workersMin": 0, "workersMax": 1,
		"modelReferences": []string{"https://huggingface.co/acme/lib-branch:dev", "https://huggingface.co/acme/lib-pinned:" + pinned.Commit}})

	const hubDir = "/runpod-volume/huggingface-cache/hub"
	for _, c := range []struct {
		name, rev string
		repo      *hubtest.Repo
	}{
		{"branch", "dev", branch},
		{"commit", pinned.Commit, pinned},
	} {
		t.Run(c.name, func(t *testing.T) {
			var job struct{ ID string }
			s.call("POST", "/v2/"+ep.ID+"/run", map[string]any{"input": map[string]any{
				"repo": c.repo.ID, "revision": c.rev, "file": "model.safetensors"}}, 200, &job)
			var done struct {
				Status string
				Error  string
				Output struct {
					Snapshot string
					Files    map[string]string
					File     struct{ Path, Sha256 string }
					Env      map[string]*string
				}
			}
			s.eventually("the worker's job finishes", func() bool {
				s.call("GET", "/v2/"+ep.ID+"/status/"+job.ID, nil, 200, &done)
				return store.JobStatus(done.Status).Terminal()
			})
			if done.Status != "COMPLETED" {
				t.Fatalf("job %s: %s", done.Status, done.Error)
			}
			out := done.Output
			snapshot := hubDir + "/models--" + "acme--" + filepath.Base(c.repo.ID) + "/snapshots/" + c.repo.Commit
			if out.Snapshot != snapshot {
				t.Errorf("snapshot_download: %s, want %s", out.Snapshot, snapshot)
			}
			if len(out.Files) != len(c.repo.Files) {
				t.Errorf("snapshot_download's folder holds %v; want %d files", out.Files, len(c.repo.Files))
			}
			for _, f := range c.repo.Files {
				if got := out.Files[f.Path]; got != hubtest.Sha256(f.Data) {
					t.Errorf("%s read through snapshot_download: sha256 %s, the Hub served %s", f.Path, got, hubtest.Sha256(f.Data))
				}
			}
			if want := hubtest.Sha256(c.repo.Files[1].Data); out.File.Path != snapshot+"/model.safetensors" || out.File.Sha256 != want {
				t.Errorf("hf_hub_download: %+v; want %s/model.safetensors with sha256 %s", out.File, snapshot, want)
			}
			want := map[string]string{"HF_HOME": "/runpod-volume/huggingface-cache", "HF_HUB_CACHE": hubDir, "HF_HUB_OFFLINE": "1"}
			for k, v := range want {
				if got := out.Env[k]; got == nil || *got != v {
					t.Errorf("%s in the worker: %v, want %s", k, got, v)
				}
			}
		})
	}
	// The library read the cache only: the Hub saw Berth's downloads and
	// nothing else (the worker is offline).
	for _, r := range hub.Requests() {
		if r.Method != "GET" {
			t.Errorf("the Hub got %s %s: only Berth's GETs were expected", r.Method, r.Path)
		}
	}
}
