// Package clientkit finds and prepares the real RunPod clients that tests
// run against Berth: runpod-python 1.12.0 (run with Debian's python3 and
// its packages) and runpodctl 2e2df89 (built with `go build` into the test
// cache, never linked into Berth: it is GPL-3.0). Both live in
// ../shared/thirdparty beside the checkout (see its README); a user's clone
// has no such directory, so tests skip with a message there, and fail
// instead when BERTH_REQUIRE_DOCKER=1 (CI).
package clientkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth/internal/dockertest"
)

// The pinned clients (directories under thirdparty/).
const (
	PythonSDKDir     = "runpod-python-1.12.0"
	PythonSDKVersion = "1.12.0"
	ShimsDir         = "python-shims"
	RunpodctlDir     = "runpodctl-2e2df89"
	RunpodctlCommit  = "2e2df89"
	// Python is Debian's interpreter: a python3 earlier on PATH (pyenv's)
	// does not see Debian's packages.
	Python = "/usr/bin/python3"
)

// DebianPackages are the Debian packages runpod-python needs here (its
// requirements.txt, less what the shims stand in for); .ci/run installs
// them, and the worker image gets them too.
var DebianPackages = []string{"python3-aiohttp", "python3-requests", "python3-backoff", "python3-cpuinfo",
	"python3-paramiko", "python3-tomli", "python3-tomlkit", "python3-tqdm", "python3-urllib3", "python3-boto3",
	"python3-fastapi", "python3-uvicorn", "python3-psutil", "python3-pydantic", "python3-watchdog"}

// unavailable skips tb, or fails it when BERTH_REQUIRE_DOCKER=1.
func unavailable(tb testing.TB, format string, a ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv(dockertest.EnvRequire) == "1" {
		tb.Fatalf("%s (%s=1 is set)", msg, dockertest.EnvRequire)
	}
	tb.Skipf("%s; set %s=1 to make this a failure", msg, dockertest.EnvRequire)
}

// ModuleRoot is the directory of Berth's go.mod, found from the working
// directory up.
func ModuleRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module berth\n")) {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			tb.Fatal("berth's go.mod not found above the working directory")
		}
		dir = up
	}
}

// Dir is the thirdparty directory (../shared/thirdparty beside the
// checkout, or $BERTH_THIRDPARTY); the test skips without it.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("BERTH_THIRDPARTY")
	if dir == "" {
		dir = filepath.Join(ModuleRoot(tb), "..", "shared", "thirdparty")
	}
	if _, err := os.Stat(filepath.Join(dir, PythonSDKDir, "runpod", "__init__.py")); err != nil {
		unavailable(tb, "the real RunPod clients are not beside this checkout (%s: %v): runpod-python and runpodctl tests need ../shared/thirdparty", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return abs
}

// SDK is runpod-python, ready to run with Debian's python3.
type SDK struct {
	Dir  string // the SDK's directory (holds the runpod package)
	Path string // PYTHONPATH: the SDK and the shims
}

var (
	pyOnce sync.Once
	pyErr  error
)

// PythonSDK checks that Debian's python3 imports runpod-python with its
// packages and returns how to run it; the test skips (or fails in CI)
// when it cannot.
func PythonSDK(tb testing.TB) SDK {
	tb.Helper()
	dir := Dir(tb)
	sdk := SDK{Dir: filepath.Join(dir, PythonSDKDir)}
	sdk.Path = sdk.Dir + string(os.PathListSeparator) + filepath.Join(dir, ShimsDir)
	pyOnce.Do(func() {
		if _, err := os.Stat(Python); err != nil {
			pyErr = fmt.Errorf("%s: %w (apt-get install python3)", Python, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, Python, "-c", "import runpod, runpod.serverless, aiohttp, requests")
		cmd.Env = sdk.Env(nil)
		if out, err := cmd.CombinedOutput(); err != nil {
			pyErr = fmt.Errorf("import runpod with %s: %v\n%s\n(apt-get install %s)", Python, err, tail(out, 1500), strings.Join(DebianPackages, " "))
		}
	})
	if pyErr != nil {
		unavailable(tb, "runpod-python cannot run here: %v", pyErr)
	}
	return sdk
}

// Env is the environment for a python3 running the SDK: this process's,
// without PYTHON* variables, with PYTHONPATH, a private HOME (the SDK
// reads ~/.runpod/config.toml) when home is not "", and extra.
func (s SDK) Env(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PYTHON") || strings.HasPrefix(kv, "RUNPOD_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PYTHONPATH="+s.Path, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// Command is python3 running script with args, in the SDK's environment
// plus extra.
func (s SDK) Command(ctx context.Context, extra map[string]string, script string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, Python, append([]string{"-u", script}, args...)...)
	cmd.Env = s.Env(extra)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// Runpodctl builds runpodctl from ../shared/thirdparty into the test cache
// (dockertest.CacheDir()/runpodctl-COMMIT-GOVERSION/runpodctl, under a
// lock; ≈ 1 min the first time) and returns the binary's path.
func Runpodctl(tb testing.TB) string {
	tb.Helper()
	src := filepath.Join(Dir(tb), RunpodctlDir)
	cache, err := dockertest.CacheDir()
	if err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(cache, "runpodctl-"+RunpodctlCommit+"-"+runtime.Version())
	bin := filepath.Join(dir, "runpodctl")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	lf, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		tb.Fatal(err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin // built while we waited
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Fatalf("building runpodctl needs the go command: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tb.Logf("building runpodctl %s from %s into %s", RunpodctlCommit, src, dir)
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", bin+".tmp", ".")
	cmd.Dir = src
	// Its own module: none of Berth's settings (GOFLAGS=-race…) apply.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build runpodctl: %v\n%s", err, tail(out, 3000))
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		tb.Fatal(err)
	}
	return bin
}

// ExitCode is a finished command's exit status (-1 when it did not run).
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// HubLibDir is the pinned huggingface_hub (the official Hugging Face Hub
// client: the reference for the hub cache layout).
const HubLibDir = "huggingface_hub-1.28.0"

// HubLibPackages are the Debian packages huggingface_hub needs here.
var HubLibPackages = []string{"python3-httpx", "python3-filelock", "python3-fsspec", "python3-packaging",
	"python3-yaml", "python3-tqdm", "python3-typing-extensions"}

var (
	hubOnce sync.Once
	hubErr  error
)

// HubLib checks that Debian's python3 imports the pinned huggingface_hub
// and returns how to run it (an SDK value: PYTHONPATH holds the library
// and the shims); the test skips (or fails in CI) when it cannot.
func HubLib(tb testing.TB) SDK {
	tb.Helper()
	dir := Dir(tb)
	lib := SDK{Dir: filepath.Join(dir, HubLibDir)}
	lib.Path = lib.Dir + string(os.PathListSeparator) + filepath.Join(dir, ShimsDir)
	hubOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(lib.Dir, "huggingface_hub", "__init__.py")); err != nil {
			hubErr = fmt.Errorf("%s is not in %s: %w", HubLibDir, dir, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, Python, "-c", "import huggingface_hub; from huggingface_hub import snapshot_download, hf_hub_download")
		cmd.Env = lib.Env(map[string]string{"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"})
		if out, err := cmd.CombinedOutput(); err != nil {
			hubErr = fmt.Errorf("import huggingface_hub with %s: %v\n%s\n(apt-get install %s)", Python, err, tail(out, 1500), strings.Join(HubLibPackages, " "))
		}
	})
	if hubErr != nil {
		unavailable(tb, "huggingface_hub cannot run here: %v", hubErr)
	}
	return lib
}
