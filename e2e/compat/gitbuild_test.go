package compat

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/internal/gittest"
)

// gitBuild is the builds API's view of a git build.
type gitBuild struct {
	build
	CommitHash    *string
	CommitMessage *string
	Branch        *string
	CommitDate    *string
	Git           *struct{ URL, Ref string }
}

// TestDeployFromGit: berth deploy GIT_URL builds a commit of a repository
// served over http (git http-backend) at a branch and a sub-path, to a job
// answered by the built worker; the same commit again reuses the image; a
// new commit is a new release; a bad ref fails the build naming it and
// changes nothing that runs; the API refuses bad git sources and URLs the
// outbound policy forbids (the test's git server on 127.0.0.1 is opened
// with --webhook-allow 127.0.0.1; 127.0.0.2 stays loopback).
func TestDeployFromGit(t *testing.T) {
	base := sdkBaseImage(t)
	root := t.TempDir()
	repo := filepath.Join(root, "workers")
	os.MkdirAll(repo, 0o755)
	gittest.Git(t, repo, "init", "-q")
	s := startBerth(t, "--webhook-allow", "127.0.0.1")
	if _, errOut, code := s.cli("init", filepath.Join(repo, "hello")); code != 0 {
		t.Fatalf("berth init: exit %d: %s", code, errOut)
	}
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("workers\n"), 0o644)
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "-q", "-m", "the hello worker\n\nfirst of all")
	gittest.Git(t, repo, "branch", "-M", "main")
	first := gittest.Git(t, repo, "rev-parse", "HEAD")
	srv := gittest.Serve(t, root)
	url := srv.URL + "/workers"

	var id string
	removeBuiltImages(t, s, &id)
	name := dockertest.Unique("githello-")
	deploy := func(want int, ref string) (map[string]any, string) {
		t.Helper()
		out, errOut, code := s.cliFor(8*time.Minute, "deploy", url, "--ref", ref, "--context", "hello", "--name", name, "--compute-type", "CPU",
			"--idle-timeout", "60", "--build-arg", "BASE_IMAGE="+base, "--build-arg", "PIP_INSTALL=no", "-o", "json")
		if code != want {
			t.Fatalf("berth deploy %s --ref %s: exit %d, want %d\nstdout: %s\nstderr: %s", url, ref, code, want, out, errOut)
		}
		var ep map[string]any
		if want == 0 {
			if err := json.Unmarshal([]byte(out), &ep); err != nil {
				t.Fatalf("berth deploy -o json: %v: %s", err, out)
			}
		}
		return ep, errOut
	}
	builds := func() []gitBuild {
		var list struct{ Builds []gitBuild }
		s.rest("GET", "/v2/serverless/"+id+"/builds", nil, 200, &list)
		return list.Builds
	}
	greet := func(want string) {
		t.Helper()
		out := s.runsync(t, id, map[string]any{"name": "Berth"})
		var o struct{ Greeting string }
		if json.Unmarshal(out, &o); o.Greeting != want {
			t.Fatalf("runsync output %s, want greeting %q", out, want)
		}
	}
	latestRelease := func() release {
		var rl struct{ Releases []release }
		s.rest("GET", "/v2/serverless/"+id+"/releases", nil, 200, &rl)
		return rl.Releases[0]
	}

	ep, errOut := deploy(0, "main")
	id, _ = ep["id"].(string)
	if !strings.Contains(errOut, "Step 1/") || !strings.Contains(errOut, first) {
		t.Fatalf("berth deploy: log without the build's steps or the commit:\n%s", errOut)
	}
	greet("Hello, Berth!")
	bs := builds()
	b1 := bs[0]
	if len(bs) != 1 || b1.Status != "COMPLETED" || b1.CommitHash == nil || *b1.CommitHash != first || b1.Branch == nil || *b1.Branch != "main" ||
		b1.CommitMessage == nil || !strings.HasPrefix(*b1.CommitMessage, "the hello worker") || b1.CommitDate == nil ||
		b1.Git == nil || b1.Git.URL != url || b1.ReleaseVersion == nil {
		t.Fatalf("the git build: %+v", bs)
	}
	if r := latestRelease(); r.Source != "GIT_BUILD" || r.BuildID == nil || *r.BuildID != b1.ID {
		t.Fatalf("the newest release %+v is not build %s's", r, b1.ID)
	}

	// The same commit again (by its hash this time): the image is reused.
	_, errOut = deploy(0, first[:10])
	bs = builds()
	if len(bs) != 2 || bs[0].Status != "COMPLETED" || !bs[0].Reused || bs[0].ImageName != b1.ImageName || bs[0].ReleaseVersion != nil ||
		strings.Contains(errOut, "Step 1/") || *bs[0].CommitHash != first {
		t.Fatalf("the same commit deployed again: %+v\n%s", bs[0], errOut)
	}

	// A new commit: a new image, a new release, the new worker answers.
	h := filepath.Join(repo, "hello", "handler.py")
	src, _ := os.ReadFile(h)
	os.WriteFile(h, bytes.Replace(src, []byte(`f"Hello, {name}!"`), []byte(`f"Hi, {name}!"`), 1), 0o644)
	gittest.Git(t, repo, "commit", "-q", "-am", "say hi")
	second := gittest.Git(t, repo, "rev-parse", "HEAD")
	if _, errOut := deploy(0, "main"); !strings.Contains(errOut, "release v") {
		t.Fatalf("a new commit made no release:\n%s", errOut)
	}
	greet("Hi, Berth!")
	bs = builds()
	b3 := bs[0]
	if *b3.CommitHash != second || b3.ImageName == b1.ImageName || b3.ReleaseVersion == nil || *b3.ReleaseVersion <= *b1.ReleaseVersion {
		t.Fatalf("the new commit's build: %+v", b3)
	}

	// A ref the repository does not have: FAILED saying so, nothing rolls.
	_, errOut = deploy(1, "no-such-branch")
	bs = builds()
	if bs[0].Status != "FAILED" || bs[0].Error == nil || !strings.Contains(*bs[0].Error, `ref "no-such-branch" is not a branch, a tag or a commit`) ||
		!strings.Contains(*bs[0].Error, "main") || !strings.Contains(errOut, "no-such-branch") {
		t.Fatalf("a bad ref: %+v\n%s", bs[0], errOut)
	}
	if r := latestRelease(); r.Version != *b3.ReleaseVersion {
		t.Errorf("a failed build made a release: %+v", r)
	}
	greet("Hi, Berth!")

	// Refused at the API, naming the field; nothing is recorded.
	n := len(bs)
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"dockerfile": "Dockerfile"}, "git"},
		{map[string]any{"git": map[string]any{"url": "file:///etc"}}, "git.url"},
		{map[string]any{"git": map[string]any{"url": "https://user:secret@example.com/r.git"}}, "git.url"},
		{map[string]any{"git": map[string]any{"url": url, "contextPath": "../up"}}, "git.contextPath"},
		{map[string]any{"git": map[string]any{"url": url, "ref": "a..b"}}, "git.ref"},
		{map[string]any{"git": map[string]any{"url": url}, "dockerfile": "/etc/passwd"}, "dockerfile"},
		{map[string]any{"git": map[string]any{"url": url, "credentialId": "nope"}}, "git.credentialId"},
		{map[string]any{"git": map[string]any{"url": "http://127.0.0.2:9/r.git"}}, "loopback"},
		{map[string]any{"git": map[string]any{"url": "https://169.254.169.254/r.git"}}, "metadata"},
		{map[string]any{"git": map[string]any{"url": s.URL + "/r.git"}}, "Berth's own listener"},
		{map[string]any{"git": map[string]any{"url": "git@127.0.0.1:r.git"}}, "git.credentialId"},
	} {
		code, b := s.do("POST", "/v2/serverless/"+id+"/builds", c.body)
		if code != 400 || !strings.Contains(string(b), c.field) {
			t.Errorf("POST builds %v: %d %s, want 400 naming %s", c.body, code, b, c.field)
		}
	}
	if got := len(builds()); got != n {
		t.Errorf("refused builds were recorded: %d builds, want %d", got, n)
	}
}
