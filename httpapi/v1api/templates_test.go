package v1api_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/runtime"
	"berth/runtime/fake"
	"berth/store"
	"berth/worker"
)

func TestTemplateCreateDefaultsAndGet(t *testing.T) {
	e := apitest.NewValidating(t)
	tpl := e.NewTemplate("base", "alpine:3", nil)
	if len(tpl.ID) != 10 {
		t.Errorf("id %q: want 10 characters", tpl.ID)
	}
	want := store.Template{ID: tpl.ID, Name: "base", ImageName: "alpine:3", Category: "NVIDIA", ContainerDiskInGb: 50, VolumeInGb: 20,
		VolumeMountPath: "/workspace", DockerEntrypoint: []string{}, DockerStartCmd: []string{}, Env: map[string]string{},
		Ports: []string{"8888/http", "22/tcp"}, CreatedAt: tpl.CreatedAt}
	if !reflect.DeepEqual(tpl, want) {
		t.Errorf("created %+v\nwant    %+v", tpl, want)
	}
	var got store.Template
	e.Must(http.StatusOK, "GET", "/v1/templates/"+tpl.ID, nil, &got)
	if !reflect.DeepEqual(got, tpl) {
		t.Errorf("GET gives %+v, want %+v", got, tpl)
	}
	// The comma-joined ports form (RunPod's default, runpod-python).
	p := e.NewTemplate("ports", "alpine:3", J{"ports": "8000/http, 22/tcp", "category": "CPU", "isServerless": true, "env": J{"A": "1"}})
	if !reflect.DeepEqual(p.Ports, []string{"8000/http", "22/tcp"}) || p.Category != "CPU" || !p.IsServerless || p.Env["A"] != "1" {
		t.Errorf("template from comma-joined ports: %+v", p)
	}
}

func TestTemplateValidation(t *testing.T) {
	e := apitest.NewValidating(t)
	auth := e.NewRegistryAuth("hub", "u", "secret-pass")
	e.NewTemplate("taken", "alpine:3", nil)
	cases := []struct {
		name  string
		body  any
		code  int
		words []string
	}{
		{"no name", J{"imageName": "a"}, 400, []string{"name"}},
		{"empty name", J{"name": " ", "imageName": "a"}, 400, []string{"name"}},
		{"no image", J{"name": "x"}, 400, []string{"imageName"}},
		{"empty image", J{"name": "x", "imageName": ""}, 400, []string{"imageName"}},
		{"category", J{"name": "x", "imageName": "a", "category": "TPU"}, 400, []string{"category"}},
		{"negative disk", J{"name": "x", "imageName": "a", "containerDiskInGb": -1}, 400, []string{"containerDiskInGb"}},
		{"negative volume", J{"name": "x", "imageName": "a", "volumeInGb": -5}, 400, []string{"volumeInGb"}},
		{"relative mount", J{"name": "x", "imageName": "a", "volumeMountPath": "data"}, 400, []string{"volumeMountPath"}},
		{"port protocol", J{"name": "x", "imageName": "a", "ports": []string{"80/udp"}}, 400, []string{"ports"}},
		{"port number", J{"name": "x", "imageName": "a", "ports": []string{"70000/tcp"}}, 400, []string{"port"}},
		{"port type", J{"name": "x", "imageName": "a", "ports": 80}, 400, []string{"ports"}},
		{"env name", J{"name": "x", "imageName": "a", "env": J{"A=B": "1"}}, 400, []string{"env"}},
		{"env type", J{"name": "x", "imageName": "a", "env": J{"A": 1}}, 400, []string{"env"}},
		{"unknown field", J{"name": "x", "imageName": "a", "imageNmae": "b"}, 400, []string{"imageNmae"}},
		{"wrong type", J{"name": "x", "imageName": "a", "isPublic": "yes"}, 400, []string{"isPublic"}},
		{"not json", "{", 400, []string{"JSON"}},
		{"missing registry auth", J{"name": "x", "imageName": "a", "containerRegistryAuthId": "nope"}, 400, []string{"containerRegistryAuthId"}},
		{"duplicate name", J{"name": "taken", "imageName": "a"}, 409, []string{"taken"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.MustErr(c.code, "POST", "/v1/templates", c.body, c.words...)
		})
	}
	if n := e.Count("/v1/templates"); n != 1 {
		t.Errorf("%d templates stored after refused creates, want 1", n)
	}
	withAuth := e.NewTemplate("private", "registry.local/x:1", J{"containerRegistryAuthId": auth.ID})
	if withAuth.ContainerRegistryAuthID != auth.ID {
		t.Errorf("containerRegistryAuthId = %q", withAuth.ContainerRegistryAuthID)
	}
}

func TestTemplateGetErrors(t *testing.T) {
	e := apitest.NewValidating(t)
	tpl := e.NewTemplate("base", "alpine:3", nil)
	e.MustErr(400, "GET", "/v1/templates/NOT-AN-ID", nil, "invalid template id")
	e.MustErr(400, "GET", "/v1/templates/abc", nil, "10 lowercase")
	e.MustErr(404, "GET", "/v1/templates/zzzzzzzzzz", nil, "not found")
	e.MustErr(400, "GET", "/v1/templates/"+tpl.ID+"?includePublicTemplates=maybe", nil, "includePublicTemplates")
	e.MustErr(400, "GET", "/v1/templates?includeRunpodTemplates=2", nil, "includeRunpodTemplates")
	e.Must(200, "GET", "/v1/templates/"+tpl.ID+"?includePublicTemplates=true&includeRunpodTemplates=true&includeEndpointBoundTemplates=false", nil, nil)
}

func TestTemplateListHidesEndpointBound(t *testing.T) {
	e := apitest.NewValidating(t)
	a := e.NewTemplate("a", "alpine:3", nil)
	b := e.NewTemplate("b", "alpine:3", nil)
	e.NewEndpoint(b.ID, nil)
	var list []store.Template
	e.Must(200, "GET", "/v1/templates", nil, &list)
	if len(list) != 1 || list[0].ID != a.ID {
		t.Errorf("list without includeEndpointBoundTemplates = %v, want only %s", templateIDs(list), a.ID)
	}
	e.Must(200, "GET", "/v1/templates?includeEndpointBoundTemplates=true", nil, &list)
	if got := templateIDs(list); !reflect.DeepEqual(got, []string{a.ID, b.ID}) {
		t.Errorf("list with includeEndpointBoundTemplates = %v, want %v (oldest first)", got, []string{a.ID, b.ID})
	}
	// Asked for by id, a bound template is found.
	e.Must(200, "GET", "/v1/templates/"+b.ID, nil, nil)
}

func templateIDs(ts []store.Template) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func TestTemplateUpdate(t *testing.T) {
	e := apitest.NewValidating(t)
	tpl := e.NewTemplate("base", "alpine:3", J{"env": J{"A": "1"}})
	e.NewTemplate("other", "alpine:3", nil)
	ep := e.NewEndpoint(tpl.ID, nil)

	// A readme change: no new worker version.
	var got store.Template
	e.Must(200, "PATCH", "/v1/templates/"+tpl.ID, J{"readme": "# hi", "name": "renamed"}, &got)
	if got.Readme != "# hi" || got.Name != "renamed" || got.ImageName != "alpine:3" || got.Env["A"] != "1" {
		t.Errorf("after PATCH: %+v", got)
	}
	var epNow store.Endpoint
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID, nil, &epNow)
	if epNow.Version != 1 {
		t.Errorf("endpoint version %d after a readme change, want 1", epNow.Version)
	}
	// An image change through the POST synonym rolls the endpoint.
	e.Must(200, "POST", "/v1/templates/"+tpl.ID+"/update", J{"imageName": "alpine:4"}, &got)
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID, nil, &epNow)
	if got.ImageName != "alpine:4" || epNow.Version != 2 {
		t.Errorf("after image change: template image %q, endpoint version %d; want alpine:4 and 2", got.ImageName, epNow.Version)
	}
	e.Must(200, "PATCH", "/v1/templates/"+tpl.ID, J{"env": J{"A": "2"}}, nil)
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID, nil, &epNow)
	if epNow.Version != 3 {
		t.Errorf("endpoint version %d after an env change, want 3", epNow.Version)
	}

	before := e.Must(200, "GET", "/v1/templates/"+tpl.ID, nil, nil)
	for _, c := range []struct {
		body  any
		code  int
		words []string
	}{
		{J{"category": "CPU"}, 400, []string{"category", "TemplateUpdateInput"}},
		{J{"isServerless": true}, 400, []string{"isServerless", "TemplateUpdateInput"}},
		{J{"name": "other"}, 409, []string{"other"}},
		{J{"name": ""}, 400, []string{"name"}},
		{J{"ports": []string{"x"}}, 400, []string{"ports"}},
		{J{"volumeMountPath": "rel"}, 400, []string{"volumeMountPath"}},
		{J{"containerRegistryAuthId": "missing"}, 400, []string{"containerRegistryAuthId"}},
		{J{"bogus": 1}, 400, []string{"bogus"}},
	} {
		e.MustErr(c.code, "PATCH", "/v1/templates/"+tpl.ID, c.body, c.words...)
	}
	if after := e.Must(200, "GET", "/v1/templates/"+tpl.ID, nil, nil); string(after) != string(before) {
		t.Errorf("refused updates changed the template:\n%s\n%s", before, after)
	}
	e.MustErr(404, "PATCH", "/v1/templates/zzzzzzzzzz", J{"name": "n"}, "not found")
	e.MustErr(400, "PATCH", "/v1/templates/BAD", J{"name": "n"}, "invalid template id")
}

// TestTemplateUpdateTellsRuntime: a template's change is a new version of
// its endpoints, and their running worker is replaced by one of it.
func TestTemplateUpdateTellsRuntime(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs))
	up, stopped := make(chan string, 2), make(chan string, 2)
	// A worker: in contact with Berth, idle.
	work := apptest.WorkerProgram(func(context.Context, *worker.Job) (any, error) { return "ok", nil })
	e.Fake.Image("alpine:3", func(ctx context.Context, p fake.Process) int {
		up <- p.Labels[runtime.LabelVersion]
		defer func() { stopped <- p.Labels[runtime.LabelVersion] }()
		return work(ctx, p)
	})
	tpl := e.NewTemplate("base", "alpine:3", J{"isServerless": true})
	ep := e.NewEndpoint(tpl.ID, J{"workersMin": 1, "workersMax": 1})
	if v := receive(t, up, "a worker of version 1"); v != "1" {
		t.Fatalf("worker of version %s started, want 1", v)
	}
	e.Must(200, "PATCH", "/v1/templates/"+tpl.ID, J{"dockerStartCmd": []string{"run"}}, nil)
	// The job API sees the new version at once (its endpoint cache is dropped).
	var v store.Endpoint
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID, nil, &v)
	if v.Version != 2 {
		t.Errorf("version %d, want 2", v.Version)
	}
	if v := receive(t, stopped, "the worker of version 1 to stop"); v != "1" {
		t.Errorf("worker of version %s stopped, want 1", v)
	}
	if v := receive(t, up, "a worker of version 2"); v != "2" {
		t.Errorf("worker of version %s started, want 2", v)
	}
}

func TestTemplateDelete(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	tpl := e.NewTemplate("base", "alpine:3", nil)
	ep := e.NewEndpoint(tpl.ID, nil)
	e.MustErr(409, "DELETE", "/v1/templates/"+tpl.ID, nil, "endpoint "+ep.ID)
	e.Must(204, "DELETE", "/v1/endpoints/"+ep.ID, nil, nil)
	var pod store.Pod
	e.Must(201, "POST", "/v1/pods", J{"templateId": tpl.ID}, &pod)
	e.MustErr(409, "DELETE", "/v1/templates/"+tpl.ID, nil, "pod "+pod.ID)
	e.Must(204, "DELETE", "/v1/pods/"+pod.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/templates/"+tpl.ID, nil, nil)
	e.MustErr(404, "GET", "/v1/templates/"+tpl.ID, nil, "not found")
	e.MustErr(404, "DELETE", "/v1/templates/"+tpl.ID, nil, "not found")
	e.MustErr(400, "DELETE", "/v1/templates/x", nil, "invalid template id")
}
