package compat

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth/internal/dockertest"
	"berth/runtime"
)

// TestBuildKitDeploy: builds on a BuildKit daemon (buildkitd with runc,
// started by the test), through `berth serve --buildkit-addr`, from FROM
// scratch and a static Go worker (nothing is pulled).
//
//   - With --registry: BuildKit pushes the image itself to a local
//     docker-registry with htpasswd auth (the login handed over the
//     session); the build records the digest, the worker container runs
//     HOST/PREFIX/name@sha256:… and answers a job; the same source again
//     builds nothing (the registry has the tag) and releases nothing new.
//   - Without: the image is exported to the Docker daemon (docker
//     exporter → image load) and the worker container runs it.
func TestBuildKitDeploy(t *testing.T) {
	dockertest.Require(t)
	addr := dockertest.BuildKit(t)
	dir := filepath.Join(t.TempDir(), "worker")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dockertest.GoBinary(t, "berth/testdata/echoworker", dir, "app")
	df := "FROM scratch\nARG FLAVOUR=plain\nLABEL berth.test.flavour=$FLAVOUR\nCOPY app /app\nENTRYPOINT [\"/app\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	workerImages := func(s *server) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := dockertest.Require(t).ContainerList(ctx, client.ContainerListOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		var images []string
		for _, c := range list.Items {
			if c.Labels[runtime.LabelDataDir] == s.inst && c.Labels[runtime.LabelKind] == runtime.KindWorker {
				images = append(images, c.Image)
			}
		}
		return images
	}
	deploy := func(s *server, name string) (string, string) {
		t.Helper()
		out, errOut, code := deployLong(t, s, "deploy", dir, "--name", name, "--compute-type", "CPU", "--idle-timeout", "60",
			"--build-arg", "FLAVOUR=buildkit", "-o", "json")
		var ep struct{ ID string }
		if code != 0 || json.Unmarshal([]byte(out), &ep) != nil || ep.ID == "" {
			t.Fatalf("berth deploy: exit %d\n%s\n%s", code, out, errOut)
		}
		return ep.ID, errOut
	}
	echo := func(s *server, id string) {
		t.Helper()
		if out := s.runsync(t, id, map[string]any{"echo": "via buildkit"}); string(out) != `"via buildkit"` {
			t.Fatalf("runsync output %s", out)
		}
	}

	t.Run("registry", func(t *testing.T) {
		host, user, pass := dockertest.Registry(t)
		prefix := host + "/berth-bk"
		s := startBerth(t, "--buildkit-addr", addr, "--registry", prefix, "--registry-auth", "bk-registry")
		if _, errOut, code := s.cli("registry", "create", "--name", "bk-registry", "--username", user, "--password", pass); code != 0 {
			t.Fatalf("registry create: exit %d %s", code, errOut)
		}
		name := dockertest.Unique("bk-")
		id, errOut := deploy(s, name)
		if !strings.Contains(errOut, "COPY app /app") || !strings.Contains(errOut, "berth: pushed "+prefix+"/"+name+"@sha256:") {
			t.Errorf("the deploy's log shows no BuildKit step or no push:\n%s", errOut)
		}
		var bd struct {
			Status, ImageName        string
			PushedImage, ImageDigest *string
			Reused                   bool
		}
		bs := s.builds(t, id)
		s.rest("GET", "/v2/serverless/"+id+"/builds/"+bs[0].ID, nil, 200, &bd)
		if bd.Status != "COMPLETED" || bd.PushedImage == nil || bd.ImageDigest == nil || !strings.HasPrefix(*bd.ImageDigest, "sha256:") ||
			*bd.PushedImage != prefix+"/"+name+"@"+*bd.ImageDigest || bd.Reused {
			t.Fatalf("the build: %+v", bd)
		}
		t.Cleanup(func() { _ = dockertest.RemoveImage(*bd.PushedImage) })
		echo(s, id)
		if images := workerImages(s); len(images) == 0 || images[0] != *bd.PushedImage {
			t.Errorf("worker containers run %v, want %s", images, *bd.PushedImage)
		}

		// The same source: the registry has the tag, nothing is built.
		deploy(s, name)
		bs = s.builds(t, id)
		if len(bs) != 2 || bs[0].Status != "COMPLETED" || !bs[0].Reused || bs[0].ReleaseVersion != nil {
			t.Fatalf("the same source again: %+v", bs)
		}
	})

	t.Run("daemon", func(t *testing.T) {
		s := startBerth(t, "--buildkit-addr", addr)
		var id string
		removeBuiltImages(t, s, &id)
		id, errOut := deploy(s, dockertest.Unique("bk-"))
		if !strings.Contains(errOut, "COPY app /app") {
			t.Errorf("the deploy's log shows no BuildKit step:\n%s", errOut)
		}
		bs := s.builds(t, id)
		if len(bs) != 1 || bs[0].Status != "COMPLETED" {
			t.Fatalf("the build: %+v", bs)
		}
		echo(s, id)
		if images := workerImages(s); len(images) == 0 || images[0] != bs[0].ImageName {
			t.Errorf("worker containers run %v, want %s", images, bs[0].ImageName)
		}
	})
}
