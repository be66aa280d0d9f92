package e2e_test

import (
	"context"
	"encoding/json"
	"testing"

	"berth/internal/clientkit"
	"berth/internal/dockertest"
	"berth/queue"
	"berth/store"
)

// graphql sends query the way runpod-python does ({"query": ...} only),
// fails the test if the reply has errors or lacks data[field], and decodes
// data[field] into out (when not nil).
func (s *stack) graphql(query, field string, out any) {
	s.t.Helper()
	var r struct {
		Data   map[string]json.RawMessage
		Errors []struct{ Message string }
	}
	s.call("POST", "/graphql", map[string]any{"query": query}, 200, &r)
	raw, found := r.Data[field]
	if len(r.Errors) > 0 || !found {
		s.t.Fatalf("%s: errors %+v, data %v", field, r.Errors, r.Data)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s: %v: %s", field, err, raw)
		}
	}
}

// job runs input on endpoint ep through the job API and waits for its end.
func (s *stack) job(ep, input string) queue.StatusResponse {
	s.t.Helper()
	var ref struct{ ID string }
	s.call("POST", "/v2/"+ep+"/run", json.RawMessage(`{"input":`+input+`}`), 200, &ref)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for {
		st, err := s.q.Wait(ctx, ep, ref.ID, waitLong)
		if err != nil {
			s.t.Fatalf("job %s: %v", ref.ID, err)
		}
		if st.Status.Terminal() {
			return st
		}
	}
}

// TestProvisioningScriptRunsJobs is a user's runpod-python provisioning
// script against Berth, with the documents runpod-python sends
// (graphqlapi/testdata): create_template, create_endpoint (its defaults:
// AMPERE_16, a GPU endpoint, whose workers run without a GPU on a machine
// with none), jobs through a worker container, update_endpoint_template
// rolling the workers, then the endpoint's removal.
func TestProvisioningScriptRunsJobs(t *testing.T) {
	s := newStack(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	doc := func(name string, slots ...string) string {
		return clientkit.Document(t, "runpod-python/"+name+".graphql", slots...)
	}

	var tpl, tpl2, ep struct{ ID string }
	s.graphql(doc("create_template", "name", "echo", "image", image, "dockerArgs", ""), "saveTemplate", &tpl)
	s.graphql(doc("create_endpoint", "name", "echo", "templateId", tpl.ID), "saveEndpoint", &ep)

	st := s.job(ep.ID, `{"env": "MODE"}`)
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
	s.graphql(`query { myself { endpoints { id pods { id desiredStatus state version } } } }`, "myself", &my)
	if len(my.Endpoints) != 1 || len(my.Endpoints[0].Pods) == 0 || my.Endpoints[0].Pods[0].DesiredStatus != "RUNNING" ||
		my.Endpoints[0].Pods[0].Version != 1 || my.Endpoints[0].Pods[0].ID != st.WorkerID {
		t.Errorf("endpoint pods: %+v (job ran on %s)", my, st.WorkerID)
	}
	st = s.job(ep.ID, `{"echo": {"n": 1}}`)
	var out struct{ N int }
	if st.Status != store.Completed || json.Unmarshal(st.Output, &out) != nil || out.N != 1 {
		t.Fatalf("echo job: %+v (output %s)", st, st.Output)
	}

	// A second template with other env; the endpoint moves to it and its
	// workers are replaced (the env reaches the new container).
	s.graphql(doc("create_template", "name", "echo-2", "image", image, "dockerArgs", ""), "saveTemplate", &tpl2)
	s.graphql(`mutation { saveTemplate(input: {id: "`+tpl2.ID+`", env: [{key: "MODE", value: "second"}]}) { id } }`, "saveTemplate", nil)
	s.graphql(doc("update_endpoint_template", "templateId", tpl2.ID, "endpointId", ep.ID), "updateEndpointTemplate", nil)
	s.eventually("the version-1 worker gone", func() bool {
		for _, w := range s.sup.Workers(ep.ID) {
			if w.Version < 2 {
				return false
			}
		}
		return true
	})
	st = s.job(ep.ID, `{"env": "MODE"}`)
	if st.Status != store.Completed || string(st.Output) != `"second"` {
		t.Fatalf("job after updateEndpointTemplate: %+v (output %s)", st, st.Output)
	}

	// runpodctl's endpoint delete path goes through REST; GraphQL's
	// deleteEndpoint removes it the same way.
	s.graphql(`mutation { deleteEndpoint(id: "`+ep.ID+`") }`, "deleteEndpoint", nil)
	s.call("GET", "/v2/"+ep.ID+"/health", nil, 404, nil)
	s.graphql(`mutation { deleteTemplate(templateName: "echo") }`, "deleteTemplate", nil)
	s.call("GET", "/v1/templates/"+tpl.ID, nil, 404, nil)
}
