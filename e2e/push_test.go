package e2e_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"berth/app"
	"berth/internal/dockertest"
)

// gitRepo makes a repository with files on branch main, served over http
// by Debian's git http-backend; it returns the URL and the directory.
func gitRepo(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		if os.Getenv(dockertest.EnvRequire) == "1" {
			t.Fatalf("git not found (%s=1 is set)", dockertest.EnvRequire)
		}
		t.Skip("git not found: it serves the test's repository")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "repo")
	os.MkdirAll(dir, 0o755)
	for n, b := range files {
		os.WriteFile(filepath.Join(dir, n), []byte(b), 0o644)
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "first")
	git(t, dir, "branch", "-M", "main")
	srv := httptest.NewServer(&cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(srv.Close)
	return srv.URL + "/repo", dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=T", "-c", "user.email=t@t.invalid", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestPushToDeploy: an endpoint tracks branch main of a repository served
// over http; a push webhook signed with its secret builds the pushed
// commit (not the branch's tip when it moved on), the build becomes a
// release, and a job is answered by a worker of the built image. The same
// delivery again builds nothing.
func TestPushToDeploy(t *testing.T) {
	base := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	url, dir := gitRepo(t, map[string]string{"Dockerfile": "FROM " + base + "\nLABEL berth.test=one\n"})
	s := newStackWith(t, func(c *app.Config) { c.WebhookAllow = []string{"127.0.0.1"} })
	var ep struct {
		ID  string
		Git struct{ WebhookURL, WebhookSecret string }
	}
	s.call("POST", "/v2/serverless", map[string]any{"name": dockertest.Unique("pushed-"), "type": "QUEUE", "image": base,
		"cpu": []any{map[string]any{"id": "cpu3c", "vcpuCount": 2}}, "scaling": map[string]any{"type": "QUEUE_DELAY", "queueDelay": 4},
		"workers": map[string]any{"min": 0, "max": 1}, "git": map[string]any{"repository": url, "branch": "main"}}, 201, &ep)

	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+base+"\nLABEL berth.test=two\n"), 0o644)
	git(t, dir, "commit", "-q", "-am", "two")
	sha := git(t, dir, "rev-parse", "HEAD")
	body, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": strings.Repeat("1", 40), "after": sha,
		"repository": map[string]any{"clone_url": url}, "head_commit": map[string]any{"id": sha, "message": "two", "timestamp": "2026-11-27T15:04:05Z"}})
	deliver := func() (int, map[string]any) {
		m := hmac.New(sha256.New, []byte(ep.Git.WebhookSecret))
		m.Write(body)
		req, _ := http.NewRequest("POST", ep.Git.WebhookURL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", "delivery-1")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var out map[string]any
		json.Unmarshal(b, &out)
		return res.StatusCode, out
	}
	// The branch moves on before the build runs: the pushed commit is built.
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+base+"\nLABEL berth.test=three\n"), 0o644)
	git(t, dir, "commit", "-q", "-am", "three")

	code, out := deliver()
	if code != 202 || out["result"] != "build" {
		t.Fatalf("push: %d %v, want 202 build", code, out)
	}
	id, _ := out["buildId"].(string)
	var b struct {
		Status, ImageName, Error string
		CommitHash, Branch       *string
		ReleaseVersion           *int
	}
	s.eventually("the build ends", func() bool {
		s.call("GET", "/v2/serverless/"+ep.ID+"/builds/"+id, nil, 200, &b)
		return b.Status == "COMPLETED" || b.Status == "FAILED" || b.Status == "CANCELLED"
	})
	if b.Status != "COMPLETED" || b.CommitHash == nil || !strings.HasPrefix(sha, *b.CommitHash) || b.Branch == nil || *b.Branch != "main" || b.ReleaseVersion == nil {
		t.Fatalf("build: %+v (commit %v, branch %v), want COMPLETED of %s on main, released", b, deref(b.CommitHash), deref(b.Branch), sha)
	}
	if code, out := deliver(); code != 200 || out["result"] != "duplicate" || out["buildId"] != id {
		t.Errorf("the same delivery again: %d %v, want 200 duplicate of %s", code, out, id)
	}
	var job struct{ ID, Status string }
	s.call("POST", "/v2/"+ep.ID+"/run", map[string]any{"input": map[string]any{"hello": "pushed"}}, 200, &job)
	s.eventually("the job completes", func() bool {
		s.call("GET", "/v2/"+ep.ID+"/status/"+job.ID, nil, 200, &job)
		return job.Status == "COMPLETED"
	})
	var ws struct {
		Workers []struct {
			Image   *string
			Version *int
		}
	}
	s.call("GET", "/v2/serverless/"+ep.ID+"/workers", nil, 200, &ws)
	if len(ws.Workers) != 1 || ws.Workers[0].Image == nil || *ws.Workers[0].Image != b.ImageName || ws.Workers[0].Version == nil || *ws.Workers[0].Version != *b.ReleaseVersion {
		t.Errorf("workers %+v, want one of %s at v%d", ws.Workers, b.ImageName, *b.ReleaseVersion)
	}
	var rels struct {
		Releases []struct {
			Version int
			Source  string
			BuildID string `json:"buildId"`
		}
	}
	s.call("GET", "/v2/serverless/"+ep.ID+"/releases", nil, 200, &rels)
	if len(rels.Releases) == 0 || rels.Releases[0].Version != *b.ReleaseVersion || rels.Releases[0].BuildID != id || rels.Releases[0].Source != "GIT_BUILD" {
		t.Errorf("releases %+v, want the newest v%d by build %s", rels.Releases, *b.ReleaseVersion, id)
	}
}
