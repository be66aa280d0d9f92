package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth/internal/clientkit"
	"berth/internal/dockertest"
	"berth/internal/proctest"
)

var (
	baseOnce sync.Once
	baseRef  string
)

// sdkBaseImage is Debian's python3 with runpod-python's Debian packages
// (the root file system made by debootstrap, cached) and the SDK and shims
// copied in at test time from ../shared/thirdparty (never committed), on
// PYTHONPATH. One per test binary: TestMain removes it.
func sdkBaseImage(t testing.TB) string {
	t.Helper()
	sdk := clientkit.PythonSDK(t)
	dir := clientkit.Dir(t)
	dockertest.Require(t)
	baseOnce.Do(func() {
		baseRef = dockertest.BuildDebianImage(t, dockertest.DebianImage{
			Packages: clientkit.DebianPackages,
			Dirs: map[string]string{
				"/opt/runpod-python/runpod": filepath.Join(sdk.Dir, "runpod"),
				"/opt/python-shims":         filepath.Join(dir, clientkit.ShimsDir),
			},
			Env:  []string{"PYTHONPATH=/opt/runpod-python:/opt/python-shims", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"},
			Keep: true,
		})
	})
	if baseRef == "" {
		// The first test that tried failed or skipped, and said why.
		if os.Getenv(dockertest.EnvRequire) == "1" {
			t.Fatal("the SDK base image could not be built (see the first test that tried)")
		}
		t.Skip("the SDK base image could not be built (see the first test that tried)")
	}
	return baseRef
}

// sdkImage is a worker image: the SDK base image with testdata/worker's
// handler.py, run as `python3 -u /handler.py` (docker build, a layer on
// the shared base); removed when the test ends.
func sdkImage(t *testing.T) string {
	t.Helper()
	base := sdkBaseImage(t)
	ctxDir := t.TempDir()
	b, err := os.ReadFile("testdata/worker/handler.py")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ctxDir, "handler.py"), b, 0o644)
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM "+base+"\nCOPY handler.py /handler.py\nCMD [\"python3\", \"-u\", \"/handler.py\"]\n"), 0o644)
	ref := "berth-test/sdk-worker:" + dockertest.Unique("")
	if out, err := exec.Command("docker", "build", "-q", "-t", ref, ctxDir).CombinedOutput(); err != nil {
		t.Fatalf("docker build the worker image: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := dockertest.RemoveImage(ref); err != nil {
			t.Errorf("remove %s: %v", ref, err)
		}
	})
	return ref
}

// sdkCheck is one line a testdata/sdk_*.py script prints.
type sdkCheck struct {
	Check   string          `json:"check"`
	OK      bool            `json:"ok"`
	Detail  json.RawMessage `json:"detail"`
	Seconds float64         `json:"seconds"`
	Done    bool            `json:"done"`
	// sdk_management.py's last line: the functions runpod exports and
	// those the script called.
	Exported []string `json:"exported"`
	Called   []string `json:"called"`
}

// runSDKScript runs a testdata script with Debian's python3 and the SDK
// against s, and fails the test for every check that failed or when the
// script did not finish. It returns the checks.
func runSDKScript(t *testing.T, s *server, extra map[string]string, script string, args ...string) []sdkCheck {
	t.Helper()
	sdk := clientkit.PythonSDK(t)
	env := map[string]string{"HOME": t.TempDir(), "RUNPOD_API_KEY": s.Key,
		"RUNPOD_API_BASE_URL": s.URL, "RUNPOD_ENDPOINT_BASE_URL": s.URL + "/v2"}
	maps.Copy(env, extra)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := sdk.Command(ctx, env, script, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var checks []sdkCheck
	done := false
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var c sdkCheck
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Errorf("%s: %v: %s", script, err, line)
			continue
		}
		if c.Done {
			done = true
		}
		if c.Check == "" {
			if c.Exported != nil {
				checks = append(checks, c)
			}
			continue
		}
		checks = append(checks, c)
		if !c.OK {
			t.Errorf("%s: %s: FAILED: %s", script, c.Check, c.Detail)
		} else if testing.Verbose() {
			t.Logf("%s: %s: ok (%.1f s)", script, c.Check, c.Seconds)
		}
	}
	if err != nil || !done {
		t.Errorf("%s did not finish: %v\nstdout:\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	return checks
}

// hostWorker runs testdata/worker/handler.py on the host as a worker of
// endpoint ep, with the identity `berth worker-env` gives; it is stopped
// when the test ends.
func hostWorker(t *testing.T, s *server, ep string) {
	t.Helper()
	sdk := clientkit.PythonSDK(t)
	out, errs, code := s.cli("worker-env", ep, "--json")
	var env map[string]string
	if err := json.Unmarshal([]byte(out), &env); code != 0 || err != nil {
		t.Fatalf("berth worker-env: exit %d %v\n%s%s", code, err, out, errs)
	}
	env["HOME"] = t.TempDir()
	cmd := sdk.Command(context.Background(), env, "testdata/worker/handler.py")
	logs := &proctest.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("host worker log:\n%s", logs.String())
		}
	})
}
