package v1api_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/runtime"
	"berth/runtime/fake"
	"berth/store"
	"berth/worker"
)

type endpointJSON struct {
	store.Endpoint
	Template *store.Template `json:"template"`
	Workers  *[]struct {
		ID             string `json:"id"`
		EndpointID     string `json:"endpointId"`
		State          string `json:"state"`
		SlsVersion     int    `json:"slsVersion"`
		JobsInProgress int    `json:"jobsInProgress"`
		External       bool   `json:"external"`
		ImageName      string `json:"imageName"`
		StatusMessage  string `json:"statusMessage"`
	} `json:"workers"`
}

func TestEndpointCreateValidation(t *testing.T) {
	e := apitest.NewValidating(t)
	tpl := e.NewTemplate("t", "alpine:3", nil)
	ok := func(extra J) J {
		b := J{"templateId": tpl.ID}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	cases := []struct {
		name  string
		body  any
		words []string
	}{
		{"no template", J{"name": "x"}, []string{"templateId"}},
		{"missing template", J{"templateId": "zzzzzzzzzz"}, []string{"templateId", "does not exist"}},
		{"computeType", ok(J{"computeType": "TPU"}), []string{"computeType"}},
		{"endpoint type", ok(J{"type": "SERVERLESS"}), []string{"type", "LOAD_BALANCER"}},
		{"lb scaler", ok(J{"type": "LOAD_BALANCER", "scalerType": "QUEUE_DELAY"}), []string{"scalerType", "REQUEST_COUNT"}},
		{"idleTimeout low", ok(J{"idleTimeout": 0}), []string{"idleTimeout"}},
		{"idleTimeout high", ok(J{"idleTimeout": 3601}), []string{"idleTimeout"}},
		{"scalerValue", ok(J{"scalerValue": 0}), []string{"scalerValue"}},
		{"scalerType", ok(J{"scalerType": "CPU"}), []string{"scalerType"}},
		{"workers", ok(J{"workersMin": 4, "workersMax": 2}), []string{"workersMin", "workersMax"}},
		{"workersMax", ok(J{"workersMax": -1}), []string{"workersMax"}},
		{"gpuCount", ok(J{"gpuCount": 0}), []string{"gpuCount"}},
		{"vcpuCount", ok(J{"vcpuCount": 0}), []string{"vcpuCount"}},
		{"executionTimeoutMs", ok(J{"executionTimeoutMs": 1000}), []string{"executionTimeoutMs"}},
		{"dataCenterIds", ok(J{"dataCenterIds": []string{"us tx 3"}}), []string{"dataCenterIds", "us tx 3"}},
		{"gpuTypeIds empty", ok(J{"gpuTypeIds": []string{""}}), []string{"gpuTypeIds"}},
		{"gpuTypeIds comma", ok(J{"gpuTypeIds": []string{"AMPERE_16,ADA_24"}}), []string{"gpuTypeIds", "comma"}},
		{"volume", ok(J{"networkVolumeId": "nope"}), []string{"networkVolumeId"}},
		{"env", ok(J{"env": J{"A=": "x"}}), []string{"env"}},
		{"unknown", ok(J{"workersMaximum": 2}), []string{"workersMaximum"}},
		{"type", ok(J{"workersMax": "3"}), []string{"workersMax"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { e.MustErr(400, "POST", "/v1/endpoints", c.body, c.words...) })
	}
	if n := e.Count("/v1/endpoints"); n != 0 {
		t.Errorf("%d endpoints after refused creates", n)
	}
}

func TestEndpointListGetIncludes(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs))
	started := make(chan string, 1)
	e.Fake.Image("alpine:3", func(ctx context.Context, p fake.Process) int {
		started <- p.Labels[runtime.LabelWorker]
		return apptest.WorkerProgram(func(context.Context, *worker.Job) (any, error) { return "ok", nil })(ctx, p)
	})
	tpl := e.NewTemplate("t", "alpine:3", J{"isServerless": true})
	a := e.NewEndpoint(tpl.ID, J{"name": "first", "gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}, "workersMin": 1, "workersMax": 5})
	b := e.NewEndpoint(tpl.ID, nil)
	if len(a.ID) != 14 || a.Version != 1 || a.Name != "first" || b.Name != b.ID || a.Type != "QUEUE" {
		t.Errorf("created %+v / %+v", a, b)
	}
	var list []endpointJSON
	e.Must(200, "GET", "/v1/endpoints", nil, &list)
	if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID || list[0].Template != nil || list[0].Workers != nil {
		t.Fatalf("plain list %+v", list)
	}
	if !reflect.DeepEqual(list[0].Endpoint, a) {
		t.Errorf("listed %+v\ncreated %+v", list[0].Endpoint, a)
	}
	// Endpoint a's workers: the container Berth started, in contact once it
	// asks for a job, and one attached by hand with worker-env.
	var container string
	select {
	case container = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no worker container started")
	}
	var env map[string]string
	e.Must(200, "GET", "/v1/endpoints/"+a.ID+"/worker-env", nil, &env)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e.Must(200, "GET", "/v1/endpoints?includeTemplate=true&includeWorkers=true", nil, &list)
		if list[0].Template == nil || list[0].Template.ID != tpl.ID || list[0].Workers == nil {
			t.Fatalf("includes: %+v", list[0])
		}
		ws := *list[0].Workers
		if len(ws) == 2 && ws[0].State == "idle" && ws[1].State == "idle" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers never both idle: %+v", ws)
		}
	}
	ws := *list[0].Workers
	if ws[0].ID > ws[1].ID {
		t.Fatalf("workers not by id: %+v", ws)
	}
	if ws[0].ID != container {
		ws[0], ws[1] = ws[1], ws[0]
	}
	if ws[0].ID != container || ws[0].External || ws[0].ImageName != "alpine:3" || ws[0].SlsVersion != 1 || ws[0].EndpointID != a.ID ||
		ws[1].ID != env["RUNPOD_POD_ID"] || !ws[1].External || ws[1].EndpointID != a.ID {
		t.Errorf("workers %+v", ws)
	}
	var one endpointJSON
	e.Must(200, "GET", "/v1/endpoints/"+b.ID+"?includeWorkers=true", nil, &one)
	if one.Workers == nil || len(*one.Workers) != 0 || one.Template != nil { // b has none
		t.Errorf("get with includeWorkers: %+v", one)
	}
	e.MustErr(400, "GET", "/v1/endpoints?includeTemplate=sure", nil, "includeTemplate")
	e.MustErr(400, "GET", "/v1/endpoints/"+a.ID+"?includeWorkers=2", nil, "includeWorkers")
	e.MustErr(404, "GET", "/v1/endpoints/nosuchendpoint", nil, "not found")
	e.MustErr(404, "GET", "/v1/endpoints/nosuchendpoint/worker-env", nil, "not found")
}

// TestEndpointUpdate: which changes make a new version; refused ones change
// nothing. (That running workers follow a version: TestTemplateUpdateTellsRuntime.)
func TestEndpointUpdate(t *testing.T) {
	e := apitest.NewValidating(t)
	t1 := e.NewTemplate("t1", "alpine:3", nil)
	t2 := e.NewTemplate("t2", "alpine:4", nil)
	ep := e.NewEndpoint(t1.ID, J{"env": J{"A": "1"}})
	path := "/v1/endpoints/" + ep.ID

	steps := []struct {
		method, path string
		body         J
		version      int
	}{
		{"PATCH", path, J{"workersMax": 6, "idleTimeout": 60, "name": "n"}, 1}, // scaling: no new version
		{"PATCH", path, J{"templateId": t2.ID}, 2},
		{"POST", path + "/update", J{"env": J{"A": "2"}}, 3},
		{"PATCH", path, J{"env": J{"A": "2"}}, 3}, // same env
		{"PATCH", path, J{"gpuCount": 2}, 4},
	}
	var got store.Endpoint
	for _, s := range steps {
		e.Must(200, s.method, s.path, s.body, &got)
		if got.Version != s.version {
			t.Errorf("%s %v: version %d, want %d", s.method, s.body, got.Version, s.version)
		}
	}
	if got.TemplateID != t2.ID || got.WorkersMax != 6 || got.IdleTimeout != 60 || got.Env["A"] != "2" || got.GPUCount != 2 || got.Name != "n" {
		t.Errorf("after updates: %+v", got)
	}

	before := e.Must(200, "GET", path, nil, nil)
	for _, c := range []struct {
		body J
		word string
	}{
		{J{"computeType": "CPU"}, "computeType"},
		{J{"type": "LOAD_BALANCER"}, "type"},
		{J{"templateId": "zzzzzzzzzz"}, "templateId"},
		{J{"workersMin": 7}, "workersMin"},
		{J{"idleTimeout": 0}, "idleTimeout"},
		{J{"scalerValue": 0}, "scalerValue"},
		{J{"gpuCount": 0}, "gpuCount"},
		{J{"templateId": ""}, "templateId"},
		{J{"networkVolumeIds": []string{"nope"}}, "networkVolumeIds"},
		{J{"nope": 1}, "nope"},
	} {
		e.MustErr(400, "PATCH", path, c.body, c.word)
	}
	if after := e.Must(200, "GET", path, nil, nil); string(after) != string(before) {
		t.Errorf("refused updates changed the endpoint:\n%s\n%s", before, after)
	}
	e.MustErr(404, "PATCH", "/v1/endpoints/nosuchendpoint", J{"name": "x"}, "not found")
	e.MustErr(404, "POST", "/v1/endpoints/nosuchendpoint/update", J{"name": "x"}, "not found")
	// The job API sees the change at once.
	var h map[string]any
	e.Must(200, "GET", "/v2/"+ep.ID+"/health", nil, &h)
}

func TestEndpointDelete(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs))
	// The endpoint's container: it runs until Berth stops it.
	up, stopped := make(chan string, 1), make(chan string, 1)
	e.Fake.Image("alpine:3", func(ctx context.Context, p fake.Process) int {
		up <- p.Labels[runtime.LabelEndpoint]
		<-ctx.Done()
		stopped <- p.Labels[runtime.LabelEndpoint]
		return 0
	})
	tpl := e.NewTemplate("t", "alpine:3", J{"isServerless": true})
	ep := e.NewEndpoint(tpl.ID, J{"workersMin": 1, "workersMax": 1})
	other := e.NewEndpoint(tpl.ID, nil)
	if got := receive(t, up, "the endpoint's worker container to start"); got != ep.ID {
		t.Fatalf("a container of %s started, want %s", got, ep.ID)
	}
	v2 := "/v2/" + ep.ID

	// One job running on a worker, one queued, one on another endpoint.
	var running, queued, kept map[string]any
	e.Must(200, "POST", v2+"/run", J{"input": J{"n": 1}}, &running)
	var env map[string]string
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"/worker-env", nil, &env)
	wk := map[string]string{"Authorization": env["RUNPOD_AI_API_KEY"]}
	if code, out := e.CallWith("GET", v2+"/job-take/"+env["RUNPOD_POD_ID"], nil, wk); code != 200 {
		t.Fatalf("job-take: %d %s", code, out)
	}
	e.Must(200, "POST", v2+"/run", J{"input": J{"n": 2}}, &queued)
	e.Must(200, "POST", "/v2/"+other.ID+"/run", J{"input": J{"n": 3}}, &kept)

	e.Must(204, "DELETE", "/v1/endpoints/"+ep.ID, nil, nil)
	// Its worker container is stopped and removed (other's queued job has
	// one of its own started meanwhile).
	if got := receive(t, stopped, "the deleted endpoint's container to stop"); got != ep.ID {
		t.Errorf("a container of %s stopped, want %s", got, ep.ID)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list, err := e.Fake.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		list = slices.DeleteFunc(list, func(in runtime.Instance) bool { return in.Labels[runtime.LabelEndpoint] != ep.ID })
		if len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers left after the endpoint's deletion: %+v", list)
		}
	}
	e.MustErr(404, "GET", "/v1/endpoints/"+ep.ID, nil, "not found")
	e.MustErr(404, "POST", v2+"/run", J{"input": J{}}, "not found")
	e.MustErr(404, "GET", v2+"/health", nil, "not found")
	e.MustErr(404, "DELETE", "/v1/endpoints/"+ep.ID, nil, "not found")
	for _, id := range []any{running["id"], queued["id"]} {
		st, err := e.Q.Status(ep.ID, id.(string), 0)
		if err != nil || st.Status != store.Cancelled {
			t.Errorf("job %v of the deleted endpoint: %v %v, want CANCELLED", id, st.Status, err)
		}
	}
	var st map[string]any
	e.Must(200, "GET", "/v2/"+other.ID+"/status/"+kept["id"].(string), nil, &st)
	if st["status"] != "IN_QUEUE" {
		t.Errorf("another endpoint's job: %v", st["status"])
	}
	// The template is free again.
	e.Must(204, "DELETE", "/v1/endpoints/"+other.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/templates/"+tpl.ID, nil, nil)
}

// RunPod scripts send RunPod's data-centre, GPU type and pool ids: they
// are stored as sent, unknown-but-well-formed ones with a warning, and
// PATCHing other fields keeps the warnings.
func TestRunPodIDsAccepted(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	tpl := e.NewTemplate("t", "alpine:3", nil)
	ep := e.NewEndpoint(tpl.ID, J{
		"dataCenterIds": []string{"EU-RO-1", "US-TX-3"},
		"gpuTypeIds":    []string{"AMPERE_16", "-NVIDIA RTX A4000", "NVIDIA H100 80GB HBM3"},
	})
	if !reflect.DeepEqual(ep.DataCenterIDs, []string{"EU-RO-1", "US-TX-3"}) || len(ep.GPUTypeIDs) != 3 || len(ep.Warnings) != 0 {
		t.Fatalf("known ids: got dataCenterIds %q, gpuTypeIds %q, warnings %q", ep.DataCenterIDs, ep.GPUTypeIDs, ep.Warnings)
	}
	ep = e.NewEndpoint(tpl.ID, J{"dataCenterIds": []string{"MARS-BASE-1"}, "gpuTypeIds": []string{"QUANTUM_512", "Acme Tensor 9000"}})
	if len(ep.Warnings) != 3 {
		t.Fatalf("unknown ids: want 3 warnings, got %q", ep.Warnings)
	}
	var got store.Endpoint
	e.Must(200, "PATCH", "/v1/endpoints/"+ep.ID, J{"workersMax": 5}, &got)
	if !reflect.DeepEqual(got.Warnings, ep.Warnings) {
		t.Errorf("PATCH of another field: warnings %q, want %q", got.Warnings, ep.Warnings)
	}
	e.Must(200, "PATCH", "/v1/endpoints/"+ep.ID, J{"gpuTypeIds": []string{"ADA_24"}, "dataCenterIds": []string{"EU-RO-1"}}, &got)
	if len(got.Warnings) != 0 {
		t.Errorf("PATCH to known ids: warnings %q remain", got.Warnings)
	}

	// A GPU type Berth does not know is warned of; the pod runs on one it
	// knows.
	p := e.NewPod(J{"imageName": "alpine:3", "dataCenterIds": []string{"EU-SE-1"}, "gpuTypeIds": []string{"NVIDIA Imaginary 1", "NVIDIA GeForce RTX 4090"}})
	if !reflect.DeepEqual(p.DataCenterIDs, []string{"EU-SE-1"}) || len(p.Warnings) != 1 {
		t.Errorf("pod: dataCenterIds %q, warnings %q", p.DataCenterIDs, p.Warnings)
	}
	var v apitest.VolumeJSON
	e.Must(200, "POST", "/v1/networkvolumes", J{"name": "v", "size": 10, "dataCenterId": "EU-RO-1"}, &v)
	if v.DataCenterID != "EU-RO-1" {
		t.Errorf("volume: dataCenterId %q, want EU-RO-1 as sent", v.DataCenterID)
	}
}

func TestLoadBalancerEndpointType(t *testing.T) {
	e := apitest.NewValidating(t)
	tpl := e.NewTemplate("t", "alpine:3", nil)
	lb := e.NewEndpoint(tpl.ID, J{"type": "LOAD_BALANCER"})
	if lb.Type != "LOAD_BALANCER" || lb.ScalerType != "REQUEST_COUNT" {
		t.Fatalf("created %+v; want type LOAD_BALANCER, scalerType REQUEST_COUNT", lb)
	}
	var got store.Endpoint
	e.Must(200, "GET", "/v1/endpoints/"+lb.ID, nil, &got)
	if got.Type != "LOAD_BALANCER" {
		t.Errorf("read back type %q", got.Type)
	}
	e.Must(200, "PATCH", "/v1/endpoints/"+lb.ID, J{"type": "LOAD_BALANCER", "workersMax": 2}, &got)
	if got.Type != "LOAD_BALANCER" || got.WorkersMax != 2 {
		t.Errorf("after a PATCH repeating the type: %+v", got)
	}
	e.MustErr(400, "PATCH", "/v1/endpoints/"+lb.ID, J{"type": "QUEUE"}, "type", "is fixed")
	e.MustErr(400, "PATCH", "/v1/endpoints/"+lb.ID, J{"scalerType": "QUEUE_DELAY"}, "scalerType")
	// No queue: jobs are refused rather than left waiting forever.
	e.MustErr(400, "POST", "/v2/"+lb.ID+"/run", J{"input": J{}}, "LOAD_BALANCER", "/lb/"+lb.ID)
	e.MustErr(400, "POST", "/v2/"+lb.ID+"/runsync", J{"input": J{}}, "LOAD_BALANCER")
}

// receive is the next value of ch; none within 30 s fails the test.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30 s for %s", what)
	}
	panic("unreachable")
}
