// Package gittest is the tests' git forge: repositories made with the git
// command and served over http by git http-backend (the smart protocol,
// as a git host serves them), and push webhooks signed and delivered as
// GitHub, Gitea and Forgejo send them.
package gittest

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

	"berth/internal/dockertest"
)

// Git runs git in dir and returns its output, trimmed. The identity is
// fixed and no system or user configuration is read (HOME is dir), so a
// developer's signing or hooks settings do not reach the tests.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Berth Test", "-c", "user.email=test@berth.invalid",
		"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Serve serves the repositories under root (root/NAME is URL/NAME) with
// git http-backend until the test ends. Without git the test is skipped,
// or fails when BERTH_REQUIRE_DOCKER=1 (the CI image has git).
func Serve(t testing.TB, root string) *httptest.Server {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		if os.Getenv(dockertest.EnvRequire) == "1" {
			t.Fatalf("git not found (%s=1 is set): .ci/run installs it", dockertest.EnvRequire)
		}
		t.Skip("git not found: it serves the test's repository (apt-get install git)")
	}
	srv := httptest.NewServer(&cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(srv.Close)
	return srv
}

// Repo makes a repository holding files (paths relative to its top, parent
// directories made), committed as "first" on branch main, and serves it;
// it returns its URL and its work tree.
func Repo(t testing.TB, files map[string]string) (url, dir string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "repo")
	for n, b := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := Serve(t, root) // first: without git the test skips before running it
	Git(t, dir, "init", "-q")
	Git(t, dir, "add", "-A")
	Git(t, dir, "commit", "-q", "-m", "first")
	Git(t, dir, "branch", "-M", "main")
	return srv.URL + "/repo", dir
}

// Sign is the hex HMAC-SHA256 of body under secret: GitHub's
// X-Hub-Signature-256 after "sha256=", Gitea's and Forgejo's as it is.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// PushBody is a forge's push event: ref moved to commit after in the
// repository cloned from cloneURL.
func PushBody(ref, after, cloneURL string) []byte {
	b, _ := json.Marshal(map[string]any{"ref": ref, "before": strings.Repeat("1", 40), "after": after,
		"repository":  map[string]any{"full_name": "o/r", "clone_url": cloneURL},
		"head_commit": map[string]any{"id": after, "message": "change", "timestamp": "2026-11-27T15:04:05+01:00"}})
	return b
}

// Deliver posts a webhook delivery to url as a forge does (JSON, no API
// key): event (X-GitHub-Event), delivery (X-GitHub-Delivery, none when
// ""), and hdr (the signature headers); it returns the status and the
// JSON answer.
func Deliver(t testing.TB, url, event, delivery string, body []byte, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	if delivery != "" {
		req.Header.Set("X-GitHub-Delivery", delivery)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
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
