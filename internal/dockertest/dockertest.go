// Package dockertest helps tests that need a real Docker daemon: it skips
// them (or fails them with BERTH_REQUIRE_DOCKER=1) when none answers, and
// makes throw-away images from Go programs without a registry.
//
// It depends only on the moby client, so berth/runtime's own tests can use it.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// EnvRequire makes an unreachable daemon a test failure instead of a skip.
const EnvRequire = "BERTH_REQUIRE_DOCKER"

// Require returns a client for the daemon named by the environment, closed
// when the test ends. Without a daemon the test is skipped, or fails when
// BERTH_REQUIRE_DOCKER=1.
func Require(t testing.TB) *client.Client {
	t.Helper()
	cli, err := connect()
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("Docker daemon not reachable: %v (%s=1 is set)", err, EnvRequire)
		}
		t.Skipf("Docker daemon not reachable: %v; set %s=1 to make this a failure", err, EnvRequire)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func connect() (*client.Client, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("%s: %w", cli.DaemonHost(), err)
	}
	return cli, nil
}

// Unique returns prefix plus a random suffix, for container names,
// instance ids and tags that must not collide between tests or runs.
func Unique(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

type build struct {
	once sync.Once
	tar  []byte // one-file tar holding /app
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

// BuildGoImage compiles the Go package pkgPath (an import path such as
// "berth/testdata/echoworker", or a path relative to the test's directory)
// as a static binary, imports it as a one-file image with ENTRYPOINT
// ["/app"] plus extraChanges (Dockerfile instructions such as
// `ENV FOO=bar`), and returns the image's unique ref. The image is removed
// when the test ends. Binaries are compiled once per test process.
func BuildGoImage(t testing.TB, pkgPath string, extraChanges ...string) string {
	t.Helper()
	cli := Require(t)

	buildsMu.Lock()
	b, ok := builds[pkgPath]
	if !ok {
		b = &build{}
		builds[pkgPath] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.tar, b.err = compile(pkgPath) })
	if b.err != nil {
		t.Fatalf("build %s: %v", pkgPath, b.err)
	}

	ref := "berth-test/" + repoName(pkgPath) + ":" + Unique("")
	changes := append([]string{`ENTRYPOINT ["/app"]`}, extraChanges...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := cli.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(b.tar), SourceName: "-"},
		ref, client.ImageImportOptions{Changes: changes})
	if err != nil {
		t.Fatalf("import image %s: %v", ref, err)
	}
	// Import answers 200 even when it fails: the error is in the stream.
	err = readStream(rc)
	_ = rc.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove test image %s: %v", ref, err)
		}
	})
	if err != nil {
		t.Fatalf("import image %s: %v", ref, err)
	}
	return ref
}

func compile(pkgPath string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "berth-dockertest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "app")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkgPath)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %w\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: "app", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// repoName turns a package path into a valid repository path component.
func repoName(pkgPath string) string {
	base := strings.ToLower(filepath.Base(filepath.Clean(pkgPath)))
	var sb strings.Builder
	for _, r := range base {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('-')
		}
	}
	name := strings.Trim(sb.String(), "-")
	if name == "" {
		name = "prog"
	}
	return name
}

// readStream reads a Docker JSON progress stream to the end and returns the
// first error reported in it.
func readStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error  string `json:"error"`
			Detail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Detail != nil && m.Detail.Message != "" {
			return errors.New(m.Detail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}
