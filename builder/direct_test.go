package builder

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"berth/mgmt"
	"berth/store"
)

// fakeDirect stands in for BuildKit pushing straight into a registry.
type fakeDirect struct {
	mu                   sync.Mutex
	tags                 map[string]string // remote name:tag → digest
	builds               int
	login                *Login
	resolveErr, buildErr error
}

func (f *fakeDirect) RegistryDigest(_ context.Context, remote string, _ *Login) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tags[remote], f.resolveErr
}

func (f *fakeDirect) BuildPush(ctx context.Context, r io.Reader, s Spec, remote string, login *Login, line func(string), pushing func()) (string, error) {
	io.Copy(io.Discard, r)
	f.mu.Lock()
	f.builds++
	f.login = login
	err := f.buildErr
	f.mu.Unlock()
	line("#1 [internal] load build definition from Dockerfile")
	line("#5 [2/2] RUN make")
	if err != nil {
		line("#5 ERROR: process did not complete successfully: exit code: 2")
		return "", err
	}
	pushing()
	d := "sha256:" + strings.Repeat("cd", 32)
	f.mu.Lock()
	f.tags[remote] = d
	f.mu.Unlock()
	return d, nil
}

// Builds straight into the registry (BuildKit with --registry): a new
// source is built and pushed (UPLOADING, then the digest recorded and
// released with the login's auth); the same source again finds the tag
// in the registry and builds nothing; a registry that cannot be asked is
// built into anyway; a failing step fails the build naming it.
func TestDirectRegistryBuild(t *testing.T) {
	f := &fakeDirect{tags: map[string]string{}}
	s, mg, _, eps := setup(t, Config{Registry: "reg.example:5000/team", RegistryAuth: "ci", Direct: f})
	name, user, pass := "ci", "u", "p"
	auth, err := mg.CreateRegistryAuth(context.Background(), mgmt.RegistryAuthInput{Name: &name, Username: &user, Password: &pass})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(df string) store.Build {
		t.Helper()
		b, err := s.Submit(context.Background(), eps[0].ID, Options{}, bytes.NewReader(tarOf(t, map[string]string{"Dockerfile": df})))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	want := "sha256:" + strings.Repeat("cd", 32)
	for _, c := range []struct {
		name, dockerfile     string
		resolveErr, buildErr error
		status               string
		reused               bool
		builds               int
		errHas               string
	}{
		{name: "new source", dockerfile: "FROM a", status: store.BuildCompleted, builds: 1},
		{name: "same source", dockerfile: "FROM a", status: store.BuildCompleted, reused: true, builds: 1},
		{name: "registry unreachable", dockerfile: "FROM b", resolveErr: errors.New("connection refused"), status: store.BuildCompleted, builds: 2},
		{name: "failing step", dockerfile: "FROM c", buildErr: errors.New("exit code: 2"), status: store.BuildFailed, builds: 3,
			errHas: `"#5 [2/2] RUN make" failed: exit code: 2`},
	} {
		f.mu.Lock()
		f.resolveErr, f.buildErr = c.resolveErr, c.buildErr
		f.mu.Unlock()
		b := waitStatus(t, mg, submit(c.dockerfile), c.status)
		f.mu.Lock()
		builds, login := f.builds, f.login
		f.mu.Unlock()
		if builds != c.builds {
			t.Errorf("%s: %d builds, want %d", c.name, builds, c.builds)
		}
		if c.status == store.BuildFailed {
			if !strings.Contains(b.Error, c.errHas) || b.PushedImage != "" {
				t.Errorf("%s: %+v, want an error with %q", c.name, b, c.errHas)
			}
			continue
		}
		remote := RegistryName("reg.example:5000/team", b.ImageName)
		if b.Reused != c.reused || b.ImageDigest != want || b.PushedImage != remote[:strings.LastIndex(remote, ":")]+"@"+want ||
			b.RegistryAuthID != auth.ID || login == nil || login.Username != "u" {
			t.Errorf("%s: %+v (login %+v)", c.name, b, login)
		}
	}
}
