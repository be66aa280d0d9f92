package graphqlapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"berth/app"
	"berth/internal/dockertest"
	"berth/queue"
	"berth/runtime"
	"berth/store"
)

// dockerEnv is Berth as berth serve composes it (package app) with the
// container runtime, so the endpoints made through GraphQL run real worker
// containers; its containers are removed when the test ends.
type dockerEnv struct {
	*env
	sup *runtime.Supervisor
}

func newDockerEnv(t *testing.T) *dockerEnv {
	t.Helper()
	dockertest.Require(t)
	e := newEnv(t, func(_ *env, c *app.Config) {
		c.Backend, c.RemoveContainersOnStop = app.DockerRequired, true
		c.Queue.TakeHold = 0 // the default: workers long-poll as in production
		c.HTTP.PingInterval = 2 * time.Second
		c.Runtime.TickInterval, c.Runtime.ResyncInterval = 100*time.Millisecond, 2*time.Second
		c.Runtime.BackoffBase, c.Runtime.BackoffMax = 200*time.Millisecond, 3*time.Second
	})
	return &dockerEnv{env: e, sup: e.app.Supervisor()}
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
