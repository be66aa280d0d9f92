package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/mgmt"
	"berth/store"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// TestRegistryWorkerPull: an endpoint whose template names an image on a
// private registry (Debian's docker-registry on loopback, htpasswd auth)
// and a containerRegistryAuthId. With wrong credentials the pull failure
// shows on the endpoint; with the right ones the worker starts from the
// pulled image and serves a job.
func TestRegistryWorkerPull(t *testing.T) {
	t.Parallel()
	host, user, pass := dockertest.Registry(t)
	ref := host + "/berth-test/echoworker:" + dockertest.Unique("t")
	cli := dockertest.Require(t)
	// Registered before newEnv, so it runs after the env removed its containers.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove %s: %v", ref, err)
		}
	})
	e := newEnv(t)
	dockertest.PushImage(t, e.image, ref, host, user, pass)
	// Untag the local build too: the worker's image must come from the registry.
	if err := e.d.RemoveImage(context.Background(), e.image); err != nil {
		t.Fatal(err)
	}

	s := e.start()
	// The credentials are Berth's registry auths, as a user creates them.
	auth := func(name, password string) string {
		a, err := e.b.Mgmt().CreateRegistryAuth(context.Background(), mgmt.RegistryAuthInput{Name: &name, Username: &user, Password: &password})
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	good, bad := auth("good", pass), auth("bad", "not-"+pass)
	badT := e.putTemplate(func(t *store.Template) { t.ImageName, t.ContainerRegistryAuthID = ref, bad })
	badEP := e.putEndpoint(badT.ID, func(ep *store.Endpoint) { ep.WorkersMin = 1 })
	e.eventually("the refused pull on the endpoint", func() bool {
		st := s.Status(badEP.ID)
		return strings.Contains(st.LastError, "unauthorized") && strings.Contains(st.LastError, ref)
	})
	t.Logf("endpoint with the wrong password: %+v", s.Status(badEP.ID))
	if ok, err := e.d.ImageExists(context.Background(), ref); err != nil || ok {
		t.Fatalf("after the refused pull: ImageExists = %v, %v", ok, err)
	}
	// Gone before the good endpoint pulls: a present image needs no login.
	e.deleteEndpoint(badEP.ID)
	s.Notify(badEP.ID)

	goodT := e.putTemplate(func(t *store.Template) { t.ImageName, t.ContainerRegistryAuthID = ref, good })
	goodEP := e.putEndpoint(goodT.ID, func(ep *store.Endpoint) { ep.WorkersMin = 1 })
	e.eventually("a worker from the pulled image", func() bool { return len(e.readyWorkers(goodEP.ID)) == 1 })
	run := e.running(goodEP.ID)
	if len(run) != 1 || run[0].Image != ref {
		t.Fatalf("running containers %+v, want one from %s", run, ref)
	}
	out := e.waitCompleted(goodEP.ID, e.run(goodEP.ID, `{"echo": "pulled"}`))
	if jsonString(out) != "pulled" {
		t.Fatalf("output %s", out)
	}
	// /metrics counted the refused pull, the good one and the start.
	if ok, bad := e.metric("berth_image_pulls_total", "result", "ok"), e.metric("berth_image_pulls_total", "result", "error"); ok != 1 || bad < 1 {
		t.Errorf("image pulls: ok %v, error %v", ok, bad)
	}
	if n := e.metric("berth_image_pull_seconds_count"); n < 2 {
		t.Errorf("pull durations observed: %v", n)
	}
	if n := e.metric("berth_scaling_decisions_total", "endpoint", goodEP.ID, "action", "start"); n < 1 {
		t.Errorf("worker starts of %s counted: %v", goodEP.ID, n)
	}
	if st := s.Status(goodEP.ID); st.Unhealthy || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
}
