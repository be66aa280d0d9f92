package kubetest

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// versionsEnv pins the versions of the test binaries; .ci/kube-binaries
// sources the same file and writes the matching stamp into the cache.
//
//go:embed versions.env
var versionsEnv string

// Binaries are the programs a cluster runs, in BinDir.
var Binaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"}

func pins() map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(versionsEnv, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// Stamp is what .ci/kube-binaries writes to BinDir/versions after a build.
func Stamp() string {
	p := pins()
	return fmt.Sprintf("kubernetes=%s staging=%s etcd=%s kwok=%s",
		p["KUBE_VERSION"], p["KUBE_STAGING_VERSION"], p["ETCD_VERSION"], p["KWOK_VERSION"])
}

// BinDir is where the binaries are looked for: $BERTH_KUBE_BIN, else
// $BERTH_TEST_CACHE/kube-VERSION, else the user cache dir +
// /berth-test/kube-VERSION — the directory .ci/kube-binaries builds into.
func BinDir() string {
	if d := os.Getenv("BERTH_KUBE_BIN"); d != "" {
		return d
	}
	base := os.Getenv("BERTH_TEST_CACHE")
	if base == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			c = os.TempDir()
		}
		base = filepath.Join(c, "berth-test")
	}
	return filepath.Join(base, "kube-"+pins()["KUBE_VERSION"])
}

// findBinaries returns BinDir when it holds every binary, built for the
// pinned versions, or says what is missing.
func findBinaries() (string, error) {
	dir := BinDir()
	var missing []string
	for _, b := range Binaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("the Kubernetes test binaries are not in %s (missing %s): build them once with .ci/kube-binaries "+
			"(from the Go module proxy, ≈ 15-20 min on 2 cores), or point BERTH_KUBE_BIN at a directory holding them",
			dir, strings.Join(missing, ", "))
	}
	got, err := os.ReadFile(filepath.Join(dir, "versions"))
	if err != nil || strings.TrimSpace(string(got)) != Stamp() {
		return "", fmt.Errorf("the Kubernetes test binaries in %s were built for %q, not %q: rebuild them with .ci/kube-binaries",
			dir, strings.TrimSpace(string(got)), Stamp())
	}
	return dir, nil
}

// required reports whether missing binaries fail a test instead of
// skipping it: BERTH_REQUIRE_DOCKER=1 (CI), as for Docker and the clients.
func required() bool { return os.Getenv("BERTH_REQUIRE_DOCKER") == "1" }

// Require skips the test (fails it under BERTH_REQUIRE_DOCKER=1) unless the
// binaries are there, and returns their directory.
func Require(tb testing.TB) string {
	tb.Helper()
	dir, err := findBinaries()
	if err != nil {
		if required() {
			tb.Fatalf("BERTH_REQUIRE_DOCKER=1: %v", err)
		}
		tb.Skipf("skipping: %v", err)
	}
	return dir
}
