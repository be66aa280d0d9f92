package dockertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"
)

// RegistryBinary is Debian's build of the CNCF distribution registry
// (package docker-registry); htpasswd (package apache2-utils) writes its
// bcrypt password file.
const (
	RegistryBinary = "docker-registry"
	HtpasswdBinary = "htpasswd"
)

// Registry starts a private image registry for the test: Debian's
// docker-registry as a subprocess on 127.0.0.1 at a free port, with
// filesystem storage in a temporary directory and htpasswd authentication
// for one random user. It returns the registry's host:port (the first
// component of an image reference) and the login, once GET /v2/ answers 401;
// the registry stops when the test ends.
//
// The Docker daemon must run on this host: it reaches the registry on its
// own loopback, which it treats as an insecure (plain HTTP) registry by
// default (--insecure-registry 127.0.0.0/8).
//
// Without docker-registry or htpasswd the test is skipped, or fails when
// BERTH_REQUIRE_DOCKER=1.
func Registry(t testing.TB) (host, user, pass string) {
	t.Helper()
	bin := lookTool(t, RegistryBinary, "docker-registry")
	htpasswd := lookTool(t, HtpasswdBinary, "apache2-utils")

	user = Unique("berth-")
	pass = randomHex(16)
	dir := t.TempDir()
	pwfile := filepath.Join(dir, "htpasswd")
	cmd := exec.Command(htpasswd, "-n", "-i", "-B", user) // password on stdin
	cmd.Stdin = strings.NewReader(pass)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("htpasswd: %v: %s", err, stderr.Bytes())
	}
	if err := os.WriteFile(pwfile, out, 0o600); err != nil {
		t.Fatal(err)
	}

	// The free port may be taken between probe and bind: try a few.
	var lastErr error
	for range 3 {
		host, err = freeLoopbackAddr()
		if err != nil {
			t.Fatal(err)
		}
		if lastErr = startRegistry(t, bin, dir, host, pwfile); lastErr == nil {
			return host, user, pass
		}
	}
	t.Fatalf("registry: %v", lastErr)
	return "", "", ""
}

func lookTool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found (%v): install the Debian package %s (apt-get install %s)", name, err, pkg, pkg)
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s; %s=1 is set", msg, EnvRequire)
	}
	t.Skipf("%s; set %s=1 to make this a failure", msg, EnvRequire)
	return ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startRegistry runs the registry on addr and waits until it answers. On
// success the process is stopped by a t.Cleanup; on error it is gone.
func startRegistry(t testing.TB, bin, dir, addr, pwfile string) error {
	run, err := os.MkdirTemp(dir, "run-")
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %q
http:
  addr: %q
  secret: %q
auth:
  htpasswd:
    realm: berth-test
    path: %q
`, filepath.Join(run, "storage"), addr, randomHex(16), pwfile)
	cfgPath := filepath.Join(run, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.SysProcAttr = registrySysProcAttr()
	// REGISTRY_* variables would override the configuration file.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REGISTRY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	d, err := startDaemon(cmd, bin, filepath.Join(run, "registry.log"))
	if err != nil {
		return err
	}

	// Ready when the API answers, and demands a login.
	url := "http://" + addr + "/v2/"
	hc := &http.Client{Timeout: 2 * time.Second}
	err = d.waitReady(20*time.Second, 50*time.Millisecond, func() (bool, error, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return false, err, nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return false, nil, fmt.Errorf("GET %s: %s, want 401 Unauthorized (is something else listening there?)\n%s",
				url, resp.Status, d.logTail())
		}
		return true, nil, nil
	})
	if err != nil {
		d.stop(5 * time.Second)
		return err
	}
	t.Cleanup(func() {
		d.stop(5 * time.Second)
		if t.Failed() {
			t.Logf("registry %s log:\n%s", addr, d.logTail())
		}
	})
	return nil
}

// PushImage tags the local image src as dst (a reference on the registry at
// host), pushes it with the login user/pass, and removes the dst tag again,
// so that dst is not present locally afterwards (src still is).
func PushImage(t testing.TB, src, dst, host, user, pass string) {
	t.Helper()
	cli := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: src, Target: dst}); err != nil {
		t.Fatalf("tag %s as %s: %v", src, dst, err)
	}
	untag := func() error {
		_, err := cli.ImageRemove(ctx, dst, client.ImageRemoveOptions{})
		if err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
		return nil
	}
	auth, err := authconfig.Encode(registry.AuthConfig{Username: user, Password: pass, ServerAddress: host})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cli.ImagePush(ctx, dst, client.ImagePushOptions{RegistryAuth: auth})
	if err == nil {
		// Push answers 200 before it starts: failures are in the stream.
		err = readStream(rc)
		_ = rc.Close()
	}
	if uerr := untag(); uerr != nil {
		t.Errorf("remove tag %s: %v", dst, uerr)
	}
	if err != nil {
		t.Fatalf("push %s: %v", dst, err)
	}
	switch _, err := cli.ImageInspect(ctx, dst); {
	case err == nil:
		t.Fatalf("%s still present locally after untagging", dst)
	case !cerrdefs.IsNotFound(err):
		t.Fatalf("inspect %s: %v", dst, err)
	}
}
