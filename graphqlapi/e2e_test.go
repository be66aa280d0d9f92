package graphqlapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"berth/httpapi"
	"berth/internal/dockertest"
	"berth/queue"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/store"
	"berth/worker"
)

// dockerEnv is Berth wired as `berth serve` wires it — store, queue, HTTP
// API and the container runtime — on its own Docker instance id, so the
// endpoints made through GraphQL run real worker containers.
type dockerEnv struct {
	*env
	d    *docker.Docker
	inst string
	sup  *runtime.Supervisor
}

func newDockerEnv(t *testing.T) *dockerEnv {
	t.Helper()
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := docker.Connect(ctx, quiet)
	if err != nil {
		t.Fatalf("docker.Connect: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	de := &dockerEnv{env: &env{t: t, dir: t.TempDir()}, d: d, inst: dockertest.Unique("gql-")}
	db, err := store.Open(filepath.Join(de.dir, "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var sup atomic.Pointer[runtime.Supervisor]
	notify := func(id string) {
		if s := sup.Load(); s != nil {
			s.Notify(id)
		}
	}
	q := queue.New(db, queue.Config{Logger: quiet, OnQueueChange: notify,
		OnStopPod: func(ep, w string) {
			if s := sup.Load(); s != nil {
				s.Recycle(ep, w)
			}
		}})
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	de.db, de.q = db, q
	api := httpapi.New(httpapi.Config{Store: db, Queue: q, Logger: quiet, APIKeyHash: httpapi.HashKey(testKey), DataDir: de.dir,
		EndpointChanged: notify, EndpointDeleted: notify,
		Workers: func(id string) queue.WorkerCounts {
			if s := sup.Load(); s != nil {
				return s.WorkerCounts(id)
			}
			return queue.WorkerCounts{}
		}})
	// Containers reach the API through the bridge gateway.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler()}
	go srv.Serve(ln)
	port := ln.Addr().(*net.TCPAddr).Port
	de.base = fmt.Sprintf("http://127.0.0.1:%d", port)

	backend, err := docker.NewBackend(d, docker.Config{Instance: de.inst, DataDir: de.dir})
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.New(runtime.Config{
		Backend: backend, Queue: q, Logger: quiet,
		Endpoints: func() ([]store.Endpoint, error) {
			var out []store.Endpoint
			err := db.Scan(store.Endpoints, func(_ string, raw []byte) error {
				var e store.Endpoint
				if err := json.Unmarshal(raw, &e); err != nil {
					return err
				}
				out = append(out, e)
				return nil
			})
			return out, err
		},
		Template: func(id string) (store.Template, error) {
			var tpl store.Template
			err := db.View(func(tx *store.Tx) error { return tx.Get(store.Templates, id, &tpl) })
			return tpl, err
		},
		WorkerBaseURL: fmt.Sprintf("http://host.docker.internal:%d", port),
		WorkerEnv: func(base, ep, w, key string) map[string]string {
			return worker.PlatformEnv(base, ep, w, key, 2000)
		},
		TickInterval: 100 * time.Millisecond, ResyncInterval: 2 * time.Second,
		BackoffBase: 200 * time.Millisecond, BackoffMax: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sup.Store(s)
	de.sup = s
	// Cleanups run last-registered first: stop the runtime, remove this
	// instance's containers, then the server, queue and database.
	t.Cleanup(func() {
		srv.Close()
		q.Stop()
		db.Close()
	})
	t.Cleanup(func() {
		s.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		infos, err := d.List(ctx, de.inst)
		if err != nil {
			t.Errorf("list containers: %v", err)
			return
		}
		for _, in := range infos {
			if err := d.Remove(ctx, in.ID, true); err != nil {
				t.Errorf("remove %s: %v", in.ID, err)
			}
		}
	})
	return de
}

// job runs input on endpoint ep through the job API and waits for it.
func (de *dockerEnv) job(ep, input string) queue.StatusResponse {
	de.t.Helper()
	var ref struct{ ID string }
	de.rest("POST", "/v2/"+ep+"/run", json.RawMessage(`{"input":`+input+`}`), 200, &ref)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		st, err := de.q.Wait(ctx, ep, ref.ID, 90*time.Second)
		if err != nil {
			de.t.Fatalf("job %s: %v", ref.ID, err)
		}
		if st.Status.Terminal() {
			return st
		}
	}
}

// TestProvisioningScriptRunsJobs is a user's runpod-python provisioning
// script against Berth: create_template, create_endpoint (its defaults:
// AMPERE_16, a GPU endpoint, whose workers run without a GPU on a machine
// with none), jobs through a worker container, update_endpoint_template
// rolling the workers, then the endpoint's removal.
func TestProvisioningScriptRunsJobs(t *testing.T) {
	de := newDockerEnv(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")

	tpl := createTemplate(t, de.env, "echo", image, "")
	var ep pyEndpoint
	de.python(fixture(t, "runpod-python/create_endpoint.graphql", "name", "echo", "templateId", tpl.ID)).ok(t, "saveEndpoint", &ep)

	st := de.job(ep.ID, `{"env": "MODE"}`)
	if st.Status != store.Completed || string(st.Output) != `"graphql test"` {
		t.Fatalf("job on the GraphQL-made endpoint: %+v (output %s)", st, st.Output)
	}
	// The worker that ran it, as the endpoint's pods.
	var my struct {
		Endpoints []struct {
			ID   string
			Pods []struct {
				ID, DesiredStatus, State string
				Version                  int
			}
		}
	}
	de.python(`query { myself { endpoints { id pods { id desiredStatus state version } } } }`).ok(t, "myself", &my)
	if len(my.Endpoints) != 1 || len(my.Endpoints[0].Pods) == 0 || my.Endpoints[0].Pods[0].DesiredStatus != "RUNNING" ||
		my.Endpoints[0].Pods[0].Version != 1 || my.Endpoints[0].Pods[0].ID != st.WorkerID {
		t.Errorf("endpoint pods: %+v (job ran on %s)", my, st.WorkerID)
	}
	st = de.job(ep.ID, `{"echo": {"n": 1}}`)
	var out struct{ N int }
	if st.Status != store.Completed || json.Unmarshal(st.Output, &out) != nil || out.N != 1 {
		t.Fatalf("echo job: %+v (output %s)", st, st.Output)
	}

	// A second template with other env; the endpoint moves to it and its
	// workers are replaced (the env reaches the new container).
	var tpl2 pyTemplate
	de.python(fixture(t, "runpod-python/create_template.graphql", "name", "echo-2", "image", image, "dockerArgs", "")).ok(t, "saveTemplate", &tpl2)
	de.python(`mutation { saveTemplate(input: {id: "`+tpl2.ID+`", env: [{key: "MODE", value: "second"}]}) { id } }`).ok(t, "saveTemplate", nil)
	de.python(fixture(t, "runpod-python/update_endpoint_template.graphql", "templateId", tpl2.ID, "endpointId", ep.ID)).ok(t, "updateEndpointTemplate", nil)
	de.eventually("the version-1 worker gone", func() bool {
		for _, w := range de.sup.Workers(ep.ID) {
			if w.Version < 2 {
				return false
			}
		}
		return true
	})
	st = de.job(ep.ID, `{"env": "MODE"}`)
	if st.Status != store.Completed || string(st.Output) != `"second"` {
		t.Fatalf("job after updateEndpointTemplate: %+v (output %s)", st, st.Output)
	}

	// runpodctl's endpoint delete path goes through REST; GraphQL's
	// deleteEndpoint removes it the same way.
	de.python(`mutation { deleteEndpoint(id: "`+ep.ID+`") }`).ok(t, "deleteEndpoint", nil)
	de.rest("GET", "/v2/"+ep.ID+"/health", nil, 404, nil)
	de.python(`mutation { deleteTemplate(templateName: "echo") }`).ok(t, "deleteTemplate", nil)
	de.rest("GET", "/v1/templates/"+tpl.ID, nil, 404, nil)
}

// eventually waits for cond, which the runtime makes true on its own
// schedule (container events): it is polled, with a generous deadline.
func (de *dockerEnv) eventually(what string, cond func() bool) {
	de.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			de.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
