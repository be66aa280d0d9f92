package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth/internal/clientkit"
	"berth/internal/dockertest"
	"berth/runtime"
)

// TestDeployPushesToRegistry: with --registry and --registry-auth (a
// stored registry auth), `berth deploy` builds, pushes the image to a
// local docker-registry with htpasswd auth, records the pushed digest on
// the build, and the release runs the image by digest: the worker
// container's image is HOST/PREFIX/name@sha256:… and answers a job. With
// the registry auth's password made wrong, the next build is FAILED with
// the registry's refusal, and the old release serves on.
func TestDeployPushesToRegistry(t *testing.T) {
	base := sdkBaseImage(t)
	host, user, pass := dockertest.Registry(t)
	prefix := host + "/berth-test"
	s := startBerth(t, "--registry", prefix, "--registry-auth", "ci-registry")
	var auth struct{ ID string }
	out, errOut, code := s.cli("registry", "create", "--name", "ci-registry", "--username", user, "--password", pass, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &auth) != nil || auth.ID == "" {
		t.Fatalf("registry create: exit %d %s %s", code, out, errOut)
	}
	dir := filepath.Join(t.TempDir(), "hello")
	if _, errOut, code := s.cli("init", dir); code != 0 {
		t.Fatalf("berth init: exit %d: %s", code, errOut)
	}
	name := dockertest.Unique("pushed-")
	var id string
	removeBuiltImages(t, s, &id)
	t.Cleanup(func() { // the tags the pushes added to the daemon
		if id == "" {
			return
		}
		for _, bd := range s.builds(t, id) {
			tag := strings.TrimPrefix(bd.ImageName, "berth/")
			_ = dockertest.RemoveImage(prefix + "/" + tag)
		}
	})
	args := []string{"deploy", dir, "--name", name, "--compute-type", "CPU", "--idle-timeout", "60",
		"--build-arg", "BASE_IMAGE=" + base, "--build-arg", "PIP_INSTALL=no"}
	out, errOut, code = deployLong(t, s, append(args, "-o", "json")...)
	var created struct{ ID string }
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil || created.ID == "" {
		t.Fatalf("berth deploy: exit %d\n%s\n%s", code, out, errOut)
	}
	id = created.ID
	if !strings.Contains(errOut, "berth: pushed "+prefix+"/"+name+"@sha256:") {
		t.Errorf("the deploy's log does not show the push:\n%s", errOut)
	}
	var bd struct {
		Status, ImageName string
		PushedImage       *string
		ImageDigest       *string
	}
	bs := s.builds(t, id)
	s.rest("GET", "/v2/serverless/"+id+"/builds/"+bs[0].ID, nil, 200, &bd)
	if bd.Status != "COMPLETED" || bd.PushedImage == nil || bd.ImageDigest == nil || !strings.HasPrefix(*bd.ImageDigest, "sha256:") ||
		*bd.PushedImage != prefix+"/"+name+"@"+*bd.ImageDigest || !strings.HasPrefix(bd.ImageName, "berth/"+name+":") {
		t.Fatalf("the pushed build: %+v", bd)
	}
	var tmpl struct {
		ImageName               string
		ContainerRegistryAuthID string
	}
	var ep struct{ TemplateID string }
	s.rest("GET", "/v1/endpoints/"+id, nil, 200, &ep)
	s.rest("GET", "/v1/templates/"+ep.TemplateID, nil, 200, &tmpl)
	if tmpl.ImageName != *bd.PushedImage || tmpl.ContainerRegistryAuthID != auth.ID {
		t.Errorf("the template after the build: %+v, want %s pulled with %s", tmpl, *bd.PushedImage, auth.ID)
	}
	greet := func(want string) {
		t.Helper()
		var o struct{ Greeting string }
		if out := s.runsync(t, id, map[string]any{"name": "Berth"}); json.Unmarshal(out, &o) != nil || o.Greeting != want {
			t.Fatalf("runsync output %s, want greeting %q", out, want)
		}
	}
	greet("Hello, Berth!")
	docker := dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, c := range list.Items {
		if c.Labels[runtime.LabelDataDir] == s.inst && c.Labels[runtime.LabelKind] == runtime.KindWorker {
			images = append(images, c.Image)
		}
	}
	if len(images) == 0 || images[0] != *bd.PushedImage {
		t.Errorf("worker containers run %v, want %s", images, *bd.PushedImage)
	}

	// Wrong credentials: the push is refused, the build FAILED saying so,
	// nothing that runs changes.
	if r := s.gql(`mutation($id: String!, $u: String!, $p: String!) { updateRegistryAuth(input: {id: $id, username: $u, password: $p}) { id } }`,
		map[string]any{"id": auth.ID, "u": user, "p": "wrong-" + pass}); len(r.Errors) > 0 {
		t.Fatalf("updateRegistryAuth: %+v", r.Errors)
	}
	h := filepath.Join(dir, "handler.py")
	src, _ := os.ReadFile(h)
	os.WriteFile(h, bytes.Replace(src, []byte(`f"Hello, {name}!"`), []byte(`f"Hi, {name}!"`), 1), 0o644)
	_, errOut, code = deployLong(t, s, args...)
	bs = s.builds(t, id)
	if code != 1 || bs[0].Status != "FAILED" || bs[0].Error == nil || !strings.Contains(*bs[0].Error, "push to "+prefix+" failed:") ||
		!strings.Contains(strings.ToLower(*bs[0].Error), "auth") {
		t.Fatalf("a push with wrong credentials: exit %d, build %+v\n%s", code, bs[0], errOut)
	}
	s.rest("GET", "/v1/templates/"+ep.TemplateID, nil, 200, &tmpl)
	if tmpl.ImageName != *bd.PushedImage {
		t.Errorf("a failed push changed the template's image to %s", tmpl.ImageName)
	}
	greet("Hello, Berth!")
}

// deployLong is s.cli with room for two image builds on a loaded machine
// (the deploy's own --timeout still bounds it).
func deployLong(t *testing.T, s *server, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitLong)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBinary(t), args...)
	cmd.Env = append(os.Environ(), "BERTH_URL="+s.URL, "BERTH_API_KEY="+s.Key)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), clientkit.ExitCode(err)
}
