package docker

import (
	"context"
	"strings"
	"testing"

	"berth/internal/dockertest"
	"berth/runtime"
)

// authFailure reports whether err reads as a refused registry login. The
// daemon's wording depends on its version and on whether credentials were
// sent: "no basic auth credentials", "unauthorized: authentication
// required", "pull access denied … may require 'docker login'".
func authFailure(err error) bool {
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"unauthorized", "authentication required", "no basic auth credentials", "docker login"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// TestRegistryAuthenticatedPull pulls from a real registry (Debian's
// docker-registry on loopback, htpasswd auth): refused without a login and
// with a wrong password, done with the right one.
func TestRegistryAuthenticatedPull(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	host, user, pass := dockertest.Registry(t)
	local := dockertest.BuildGoImage(t, testProg)
	ref := host + "/berth-test/pull:" + dockertest.Unique("t")
	t.Cleanup(func() {
		// Runs after the container's removal (cleanups are last in, first out).
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := d.RemoveImage(ctx, ref); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	dockertest.PushImage(t, local, ref, host, user, pass)
	ctx := testCtx(t)
	// Drop the source tag too: the image is then gone from the daemon and
	// the pull has to fetch it.
	if err := d.RemoveImage(ctx, local); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.ImageExists(ctx, ref); err != nil || ok {
		t.Fatalf("before the pull: ImageExists(%s) = %v, %v", ref, ok, err)
	}

	for _, c := range []struct {
		name string
		auth *runtime.RegistryAuth
	}{
		{"anonymous", nil},
		{"wrong password", &runtime.RegistryAuth{Username: user, Password: pass + "-wrong"}},
		{"unknown user", &runtime.RegistryAuth{Username: user + "-x", Password: pass}},
	} {
		err := d.EnsureImage(ctx, ref, c.auth, nil)
		if err == nil {
			t.Fatalf("%s: pull succeeded", c.name)
		}
		if !authFailure(err) || !strings.Contains(err.Error(), ref) {
			t.Fatalf("%s: want an authentication error naming %s, got: %v", c.name, ref, err)
		}
		t.Logf("%s: %v", c.name, err)
		if ok, err := d.ImageExists(ctx, ref); err != nil || ok {
			t.Fatalf("%s: after a refused pull ImageExists = %v, %v", c.name, ok, err)
		}
	}

	var lines []string
	if err := d.EnsureImage(ctx, ref, &runtime.RegistryAuth{Username: user, Password: pass}, func(s string) {
		lines = append(lines, s)
	}); err != nil {
		t.Fatalf("pull with the login: %v", err)
	}
	t.Logf("pull progress: %q", lines)
	if len(lines) == 0 {
		t.Fatal("no pull progress reported")
	}
	if ok, err := d.ImageExists(ctx, ref); err != nil || !ok {
		t.Fatalf("after the pull: ImageExists = %v, %v", ok, err)
	}
	// Present now: a second EnsureImage does not pull (or need a login).
	var again []string
	if err := d.EnsureImage(ctx, ref, nil, func(s string) { again = append(again, s) }); err != nil || len(again) != 0 {
		t.Fatalf("EnsureImage of the pulled image: %v, progress %q", err, again)
	}

	// The pulled image runs.
	s := spec(ref, dockertest.Unique("inst-"), "echo")
	s.Name = dockertest.Unique("berth-test-pulled-")
	s.Env = []string{"MSG=pulled"}
	res := create(t, d, s)
	wctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	wait := d.Wait(wctx, res.ID)
	start(t, d, res.ID)
	if r := waitExit(t, wait); r.ExitCode != 0 {
		t.Fatalf("exit code %d", r.ExitCode)
	}
	if logs := readLogs(t, d, res.ID, false); !strings.Contains(logs, "stdout: pulled\n") {
		t.Fatalf("logs %q", logs)
	}
}
