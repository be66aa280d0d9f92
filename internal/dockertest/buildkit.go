package dockertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BuildKitVersion is the buildkitd .ci/run builds from the Go module
// proxy into ~/.cache/berth-test/buildkit-VERSION (see BuildKit).
const BuildKitVersion = "v0.34.2"

// BuildKit starts a BuildKit daemon for the test — buildkitd from
// $BERTH_BUILDKITD, else ~/.cache/berth-test/buildkit-VERSION/buildkitd
// (.ci/run builds it there), else PATH — as root with its own state in a
// temporary directory, the OCI worker on runc with the native snapshotter
// (the overlay one cannot stack on this machine's fuse-overlayfs), and
// returns its address (unix://…) once it answers. It stops when the test
// ends. Without buildkitd, runc or root the test is skipped, or fails
// when BERTH_REQUIRE_DOCKER=1.
func BuildKit(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("BERTH_BUILDKITD")
	if bin == "" {
		if home, err := os.UserHomeDir(); err == nil {
			p := filepath.Join(home, ".cache", "berth-test", "buildkit-"+BuildKitVersion, "buildkitd")
			if _, err := os.Stat(p); err == nil {
				bin = p
			}
		}
	}
	if bin == "" {
		bin = lookTool(t, "buildkitd", "(none: build it with .ci/run's install, go build github.com/moby/buildkit/cmd/buildkitd)")
	}
	lookTool(t, "runc", "runc")
	if os.Geteuid() != 0 {
		msg := "buildkitd needs root here (no rootless setup)"
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s; %s=1 is set", msg, EnvRequire)
		}
		t.Skip(msg)
	}
	// A short path: a unix socket's path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "bk-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "buildkitd.sock")
	cmd := exec.Command(bin, "--root", filepath.Join(dir, "root"), "--addr", "unix://"+sock,
		"--oci-worker-snapshotter", "native", "--containerd-worker=false", "--oci-worker-gc=false")
	d, err := startDaemon(cmd, "buildkitd", filepath.Join(dir, "buildkitd.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.stop(30 * time.Second)
		if t.Failed() {
			t.Logf("buildkitd's log:\n%s", d.logTail())
		}
		os.RemoveAll(dir)
	})
	err = d.waitReady(time.Minute, 100*time.Millisecond, func() (bool, error, error) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false, err, nil
		}
		c.Close()
		return true, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return "unix://" + sock
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// GoBinary compiles the Go package pkgPath as a static linux binary into
// dir/name (for a build context that copies it into FROM scratch).
func GoBinary(t testing.TB, pkgPath, dir, name string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, name), pkgPath)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatal(fmt.Errorf("go build %s: %w\n%s", pkgPath, err, out))
	}
}
