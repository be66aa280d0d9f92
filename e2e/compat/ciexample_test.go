package compat

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth/internal/clientkit"
)

// TestCIExample runs docs/ci.md's script end to end, as a worker
// repository's CI runs it: berth serve --apply building the worker from
// the example's folder (berth.json's "build"), its pytest suite calling
// the endpoint with runpod-python (Debian's python3-pytest), Berth
// stopped. Offline, the image's base is Debian's python3 with the SDK
// (the same root file system as the other tests) and pip is skipped.
func TestCIExample(t *testing.T) {
	t.Parallel()
	sdk := clientkit.PythonSDK(t)
	if out, err := exec.Command(clientkit.Python, "-c", "import pytest").CombinedOutput(); err != nil {
		if testing.Short() {
			t.Skip("pytest missing")
		}
		t.Fatalf("pytest is not installed for %s (apt-get install python3-pytest): %v\n%s", clientkit.Python, err, out)
	}
	base := sdkBaseImage(t)
	bin := berthBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(clientkit.ModuleRoot(t), "docs", "ci-example", "ci.sh"))
	cmd.Env = sdk.Env(map[string]string{"BASE_IMAGE": base, "PIP_INSTALL": "no", "BERTH": bin, "PYTHON": clientkit.Python, "WORK": t.TempDir(),
		"PORT": strconv.Itoa(port), "HOME": t.TempDir()})
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "3 passed") || !strings.Contains(string(out), "worker image: berth/upper:") {
		t.Fatalf("docs/ci-example/ci.sh: %v\n%s", err, out)
	}
	t.Logf("docs/ci-example/ci.sh:\n%s", out)
}
