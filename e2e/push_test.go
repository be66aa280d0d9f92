package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth/app"
	"berth/internal/dockertest"
	"berth/internal/gittest"
)

// TestPushToDeploy: an endpoint tracks branch main of a repository served
// over http; a push webhook signed with its secret builds the pushed
// commit (not the branch's tip when it moved on), the build becomes a
// release, and a job is answered by a worker of the built image. The same
// delivery again builds nothing.
func TestPushToDeploy(t *testing.T) {
	base := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	url, dir := gittest.Repo(t, map[string]string{"Dockerfile": "FROM " + base + "\nLABEL berth.test=one\n"})
	s := newStackWith(t, func(c *app.Config) { c.WebhookAllow = []string{"127.0.0.1"} })
	var ep struct {
		ID  string
		Git struct{ WebhookURL, WebhookSecret string }
	}
	s.call("POST", "/v2/serverless", map[string]any{"name": dockertest.Unique("pushed-"), "type": "QUEUE", "image": base,
		"cpu": []any{map[string]any{"id": "cpu3c", "vcpuCount": 2}}, "scaling": map[string]any{"type": "QUEUE_DELAY", "queueDelay": 4},
		"workers": map[string]any{"min": 0, "max": 1}, "git": map[string]any{"repository": url, "branch": "main"}}, 201, &ep)

	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+base+"\nLABEL berth.test=two\n"), 0o644)
	gittest.Git(t, dir, "commit", "-q", "-am", "two")
	sha := gittest.Git(t, dir, "rev-parse", "HEAD")
	body := gittest.PushBody("refs/heads/main", sha, url)
	deliver := func() (int, map[string]any) {
		return gittest.Deliver(t, ep.Git.WebhookURL, "push", "delivery-1", body,
			map[string]string{"X-Hub-Signature-256": "sha256=" + gittest.Sign(ep.Git.WebhookSecret, body)})
	}
	// The branch moves on before the build runs: the pushed commit is built.
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+base+"\nLABEL berth.test=three\n"), 0o644)
	gittest.Git(t, dir, "commit", "-q", "-am", "three")

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
