package v2api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"berth/httpapi/v2api"
	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/runtime"
	"berth/runtime/fake"
	"berth/store"
	"berth/worker"
)

type v2Template struct {
	ID, Name, Image, Args, Category string
	Disk                            int
	Env                             map[string]string
	Ports                           []string
	Registry                        *string
	StartSSH                        bool `json:"startSsh"`
	Mounts                          struct {
		Persistent *struct {
			Size int
			Path string
		}
	}
}

type v2Endpoint struct {
	ID, Name, Type, Image, Args, TemplateID, Flashboot string
	Version                                            int
	RequestURLs                                        map[string]string
	GPU                                                *struct {
		Pools, ExcludedTypes []string
		Count                int
	}
	CPU     []struct{ ID string }
	Workers struct{ Min, Max, IdleTimeout int }
	Scaling struct {
		Type         string
		QueueDelay   float64
		RequestCount int
	}
	Env            map[string]string
	DataCenterIDs  []string
	NetworkVolumes []string
	Timeout        int64
}

type v2Pod struct {
	ID, Name, Status, Image string
	Actions                 []string
	Env                     map[string]string
	GPU                     *struct {
		ID    string
		Count int
	}
	Mounts struct {
		Network []struct{ VolumeID, Path string }
	}
	SSH struct {
		Direct *struct {
			Port    int
			Command string
		}
	}
}

// TestV2SharedWithV1: the same records, whichever version made them.
func TestV2SharedWithV1(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	e.Conformant(true)

	v1t := e.NewTemplate("made-by-v1", "alpine:3", J{"dockerStartCmd": []string{"sh", "-c", "echo hi there"}, "env": J{"A": "1"}})
	var list struct{ Templates []v2Template }
	e.Must(200, "GET", "/v2/templates", nil, &list)
	if len(list.Templates) != 1 || list.Templates[0].ID != v1t.ID || list.Templates[0].Image != "alpine:3" ||
		list.Templates[0].Args != `sh -c "echo hi there"` || list.Templates[0].Env["A"] != "1" {
		t.Fatalf("v2 list of a v1 template: %+v", list.Templates)
	}
	var v2t v2Template
	e.Must(201, "POST", "/v2/templates", J{"name": "made-by-v2", "image": "busybox:1", "args": "sleep 'a b'", "ports": []string{"8000/http"}}, &v2t)
	var got store.Template
	e.Must(200, "GET", "/v1/templates/"+v2t.ID, nil, &got)
	if got.ImageName != "busybox:1" || strings.Join(got.DockerStartCmd, "|") != "sleep|a b" || got.Ports[0] != "8000/http" || !got.StartSSH {
		t.Errorf("v1 view of a v2 template: %+v", got)
	}

	// An endpoint made through v1 is listed and changed by v2; v2's
	// change is seen by v1.
	ep := e.NewEndpoint(v1t.ID, J{"gpuTypeIds": []string{"ADA_24", "-NVIDIA L4"}, "workersMax": 2})
	var eps struct{ Endpoints []v2Endpoint }
	e.Must(200, "GET", "/v2/serverless", nil, &eps)
	if len(eps.Endpoints) != 1 || eps.Endpoints[0].GPU == nil || eps.Endpoints[0].GPU.Pools[0] != "ADA_24" ||
		eps.Endpoints[0].GPU.ExcludedTypes[0] != "NVIDIA L4" || eps.Endpoints[0].Image != "alpine:3" {
		t.Fatalf("v2 list of a v1 endpoint: %+v", eps.Endpoints)
	}
	e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"workers": J{"max": 5}}, nil)
	var ep1 store.Endpoint
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID, nil, &ep1)
	if ep1.WorkersMax != 5 {
		t.Errorf("v1 sees workersMax %d after the v2 PATCH, want 5", ep1.WorkersMax)
	}
	// v2 deletes what v1 made; v1 no longer finds it.
	e.Must(204, "DELETE", "/v2/serverless/"+ep.ID, nil, nil)
	e.MustErr(404, "GET", "/v1/endpoints/"+ep.ID, nil, "not found")
	e.Must(204, "DELETE", "/v2/templates/"+v1t.ID, nil, nil)
	e.MustErr(404, "GET", "/v1/templates/"+v1t.ID, nil, "not found")
}

// TestV2RoutesDoNotShadowTheJobAPI: /v2/pods and /v2/{endpointId}/run
// both work, whatever the order of registration.
func TestV2RoutesDoNotShadowTheJobAPI(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	tpl := e.NewTemplate("t", "alpine:3", nil)
	ep := e.NewEndpoint(tpl.ID, nil)
	e.Must(200, "GET", "/v2/pods", nil, nil)
	e.Must(200, "GET", "/v2/serverless", nil, nil)
	var ref struct{ ID string }
	e.Must(200, "POST", "/v2/"+ep.ID+"/run", J{"input": J{"x": 1}}, &ref)
	e.Must(200, "GET", "/v2/"+ep.ID+"/status/"+ref.ID, nil, nil)
	e.Must(200, "GET", "/v2/"+ep.ID+"/health", nil, nil)
	// A job-API path under a v2 resource name is still the job API's 404.
	code, out := e.Call("POST", "/v2/pods/run", J{"input": J{}})
	if code != 404 || !strings.Contains(string(out), "pods") {
		t.Errorf("POST /v2/pods/run: %d %s", code, out)
	}
}

// TestV2NeedsTheKey: every v2 route answers 401 with a problem body
// without the operator's key.
func TestV2NeedsTheKey(t *testing.T) {
	e := apitest.NewValidating(t)
	for route := range e.API.V2Routes() {
		if route == "GET /v2/openapi.json" || route == "POST /v2/serverless/{id}/webhooks/git" {
			continue // served without a key (TestOpenAPIDocument; the webhook's signature: app's TestGitWebhook)
		}
		method, path, _ := strings.Cut(route, " ")
		path = regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(path, "x")
		var body any
		if method == "POST" || method == "PATCH" || method == "PUT" {
			body = "{}"
		}
		for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong"}} {
			code, out := e.CallWith(method, path, body, hdr)
			var p httpapiProblem
			json.Unmarshal(out, &p)
			if code != 401 || p.Status != 401 || p.Title == "" || p.Detail == "" {
				t.Errorf("%s with %v: %d %s, want a 401 problem", route, hdr, code, out)
			}
		}
	}
}

type httpapiProblem struct {
	Title  string
	Status int
	Detail string
	Errors []string
}

// TestRunPodV2Conformance drives every operation of RunPod's v2.json
// against Berth through the validator built from that document: a
// template, a serverless endpoint with its workers, releases and logs, a
// pod through its actions, volumes, registries, the catalogue, billing,
// SSH keys reaching a pod, and the families one host cannot provide.
func TestRunPodV2Conformance(t *testing.T) {
	// Four 4090s: two for the endpoint's workers across its release, one
	// for the pod.
	gpus4 := slices.Clone(apitest.PodGPUs)
	for i := 2; i < 4; i++ {
		d := gpus4[0]
		d.Index, d.UUID = i, fmt.Sprintf("GPU-4090-%d", i)
		gpus4 = append(gpus4, d)
	}
	e := apitest.NewValidating(t, apitest.WithFake(gpus4, "busybox:1", "busybox:2"))
	// The template's image: as a worker it prints two lines and holds the
	// job it takes (a busy worker stays when its release goes stale); as a
	// pod it says hi.
	took := make(chan string, 1)
	e.Fake.Image("alpine:3", func(ctx context.Context, p fake.Process) int {
		if p.Labels[runtime.LabelWorker] == "" {
			io.WriteString(p.Out, "pod says hi\n")
			<-ctx.Done()
			return 0
		}
		io.WriteString(p.Out, "line one\nline two\n")
		worker.Start(ctx, worker.Config{Env: p.Getenv, Logger: worker.NewLogger(p.Getenv, p.Out), Handler: func(ctx context.Context, _ *worker.Job) (any, error) {
			took <- p.Getenv("RUNPOD_POD_ID")
			<-ctx.Done()
			return nil, ctx.Err()
		}})
		return 0
	})
	c := e.Conformant(true)
	c.Own = loadV2Doc(t, e)

	// Account SSH keys, then a template asking for SSH.
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host"
	var keys struct{ Keys []string }
	e.Must(200, "GET", "/v2/account/ssh-keys", nil, &keys)
	e.Must(200, "PUT", "/v2/account/ssh-keys", J{"keys": []string{key}}, &keys)
	if len(keys.Keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	e.MustProblem(422, "PUT", "/v2/account/ssh-keys", J{"keys": []string{"not a key"}}, "keys[0]")

	var reg struct{ ID, Name string }
	e.Must(201, "POST", "/v2/registries", J{"name": "hub", "username": "me", "password": "pw"}, &reg)
	e.Must(200, "GET", "/v2/registries", nil, nil)
	e.Must(200, "GET", "/v2/registries/"+reg.ID, nil, nil)
	e.MustProblem(404, "GET", "/v2/registries/nosuchregistry", nil, "not found")
	e.MustProblem(422, "POST", "/v2/registries", J{"name": "x", "username": "u"}, "password")

	var vol struct {
		ID, DataCenter, Type string
		Size                 int
	}
	e.Must(201, "POST", "/v2/network-volumes", J{"name": "data", "size": 10, "dataCenter": "EU-RO-1", "type": "HIGH_PERFORMANCE"}, &vol)
	if vol.DataCenter != "EU-RO-1" || vol.Type != "HIGH_PERFORMANCE" {
		t.Errorf("volume %+v", vol)
	}
	e.Must(200, "GET", "/v2/network-volumes", nil, nil)
	e.Must(200, "GET", "/v2/network-volumes/"+vol.ID, nil, nil)
	e.Must(200, "PATCH", "/v2/network-volumes/"+vol.ID, J{"size": 20}, nil)
	e.MustProblem(422, "POST", "/v2/network-volumes", J{"name": "x", "size": 5, "dataCenter": "EU-RO-1"}, "size")
	e.MustProblem(400, "PATCH", "/v2/network-volumes/"+vol.ID, J{"size": 15}, "grow")

	var tpl v2Template
	e.Must(201, "POST", "/v2/templates", J{"name": "worker", "image": "alpine:3", "args": "python -u handler.py",
		"env": J{"K": "V"}, "ports": []string{"8888/http", "22/tcp"}, "registry": reg.ID, "mounts": J{"persistent": J{"size": 20, "path": "/workspace"}}}, &tpl)
	if tpl.Registry == nil || *tpl.Registry != reg.ID || !tpl.StartSSH || tpl.Mounts.Persistent == nil || tpl.Category != "NVIDIA" {
		t.Errorf("template %+v", tpl)
	}
	e.Must(200, "GET", "/v2/templates", nil, nil)
	e.Must(200, "GET", "/v2/templates/"+tpl.ID, nil, nil)
	e.Must(200, "PATCH", "/v2/templates/"+tpl.ID, J{"env": J{"K": "W"}, "public": true}, nil)
	e.Must(200, "GET", "/v2/catalog/templates?source=community", nil, nil)
	e.MustProblem(422, "POST", "/v2/templates", J{"name": "x", "image": "alpine", "bogus": 1}, "bogus")
	e.MustProblem(404, "GET", "/v2/templates/abcdefghij", nil, "not found")

	// A queue endpoint from the template, and one with its container inline.
	var ep v2Endpoint
	e.Must(201, "POST", "/v2/serverless", J{"name": "queue", "type": "QUEUE", "templateId": tpl.ID,
		"gpu": J{"pools": []string{"ADA_24"}, "count": 1}, "scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4},
		"workers": J{"min": 0, "max": 2, "idleTimeout": 5}, "dataCenterIds": []string{"EU-RO-1"}, "networkVolumes": []string{vol.ID},
		"flashboot": "FLASHBOOT", "timeout": 600000}, &ep)
	if ep.RequestURLs["run"] != e.Base+"/v2/"+ep.ID+"/run" || ep.Flashboot != "FLASHBOOT" || ep.Workers.Max != 2 ||
		len(ep.NetworkVolumes) != 1 || ep.Type != "QUEUE" || ep.Timeout != 600000 {
		t.Errorf("endpoint %+v", ep)
	}
	var inline v2Endpoint
	e.Must(201, "POST", "/v2/serverless", J{"name": "lb", "type": "LOAD_BALANCER", "image": "busybox:1", "args": "httpd -f",
		"cpu": []J{{"id": "cpu3c", "vcpuCount": 2}}, "scaling": J{"type": "REQUEST_COUNT", "requestCount": 4}}, &inline)
	if inline.Image != "busybox:1" || inline.TemplateID == "" || len(inline.CPU) != 1 || inline.RequestURLs["base"] == "" {
		t.Errorf("inline endpoint %+v", inline)
	}
	e.Must(200, "GET", "/v2/serverless", nil, nil)
	e.Must(200, "GET", "/v2/serverless/"+ep.ID, nil, nil)
	// A job keeps a worker of release 1 busy across the PATCH.
	e.Must(200, "POST", "/v2/"+ep.ID+"/run", J{"input": J{"n": 1}}, nil)
	var busy string
	select {
	case busy = <-took:
	case <-time.After(60 * time.Second):
		t.Fatal("no worker took the job")
	}
	e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"env": J{"MODE": "fast"}, "scaling": J{"type": "REQUEST_COUNT", "requestCount": 3}}, &ep)
	if ep.Version != 2 || ep.Env["MODE"] != "fast" || ep.Env["K"] != "W" {
		t.Errorf("after PATCH: %+v", ep)
	}
	e.Must(200, "PATCH", "/v2/serverless/"+inline.ID, J{"image": "busybox:2"}, &inline)
	if inline.Image != "busybox:2" || inline.Version != 2 {
		t.Errorf("inline after an image PATCH: %+v", inline)
	}
	var ws struct {
		Workers []struct {
			ID      string
			IsStale bool
		}
		Summary struct{ Running, Total int }
	}
	e.Must(200, "GET", "/v2/serverless/"+ep.ID+"/workers", nil, &ws)
	// The busy worker is stale; Berth may already run one of release 2.
	stale := 0
	for _, w := range ws.Workers {
		if w.IsStale != (w.ID == busy) {
			t.Errorf("worker %s stale %v (the busy one is %s)", w.ID, w.IsStale, busy)
		}
		if w.IsStale {
			stale++
		}
	}
	if stale != 1 || ws.Summary.Running < 1 || ws.Summary.Total != len(ws.Workers) {
		t.Errorf("workers %+v", ws)
	}
	var rels struct {
		Releases []struct {
			Version int
			Diff    []struct{ Field string }
		}
	}
	e.Must(200, "GET", "/v2/serverless/"+ep.ID+"/releases", nil, &rels)
	if len(rels.Releases) != 2 || rels.Releases[0].Version != 2 || len(rels.Releases[0].Diff) != 1 || rels.Releases[0].Diff[0].Field != "env" {
		t.Errorf("releases %+v", rels)
	}
	_, logs := e.Call("GET", "/v2/serverless/"+ep.ID+"/workers/"+busy+"/logs?tail=10&follow=false", nil)
	if !strings.Contains(string(logs), `"line":"line two"`) || !strings.HasPrefix(string(logs), "id: ") {
		t.Errorf("worker logs: %q", logs)
	}
	e.MustProblem(404, "GET", "/v2/serverless/"+ep.ID+"/workers/nosuchworker/logs", nil, "no container")
	e.MustProblem(404, "GET", "/v2/serverless/nosuchendpoint", nil, "not found")
	e.MustProblem(422, "POST", "/v2/serverless", J{"name": "x", "type": "QUEUE"}, "scaling")
	e.MustProblem(400, "POST", "/v2/serverless", J{"name": "x", "type": "QUEUE", "templateId": tpl.ID, "gpu": J{"pools": []string{"ADA_24"}},
		"scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4}, "workers": J{"min": 3, "max": 1}}, "workers.min (3) must not exceed workers.max (1)")

	// A pod from the template with the network volume: PUBLIC_KEY carries
	// the account's key.
	var pod v2Pod
	e.Must(201, "POST", "/v2/pods", J{"name": "dev", "templateId": tpl.ID, "gpu": J{"id": "NVIDIA GeForce RTX 4090", "count": 1},
		"mounts": J{"network": []J{{"volumeId": vol.ID, "path": "/data"}}}, "dataCenterIds": []string{"US-TX-3"}}, &pod)
	if pod.Env["PUBLIC_KEY"] != key || pod.Env["JUPYTER_PASSWORD"] == "" || pod.Status != "RUNNING" ||
		len(pod.Mounts.Network) != 1 || pod.Mounts.Network[0].Path != "/data" || pod.SSH.Direct == nil {
		t.Errorf("pod %+v", pod)
	}
	var cpuPod v2Pod
	e.Must(201, "POST", "/v2/pods", J{"name": "cpu", "image": "alpine:3", "cpu": J{"id": "cpu3g", "vcpuCount": 4}}, &cpuPod)
	if _, ok := cpuPod.Env["PUBLIC_KEY"]; ok {
		t.Errorf("a pod without startSsh got PUBLIC_KEY: %+v", cpuPod.Env)
	}
	e.Must(200, "GET", "/v2/pods?includeClusterPods=true", nil, nil)
	e.Must(200, "GET", "/v2/pods/"+pod.ID, nil, nil)
	e.Must(200, "PATCH", "/v2/pods/"+pod.ID, J{"name": "dev2", "locked": false, "env": J{"X": "1"}}, nil)
	e.Must(200, "POST", "/v2/pods/"+pod.ID+"/action", J{"action": "stop"}, &pod)
	if pod.Status != "EXITED" || strings.Join(pod.Actions, ",") != "start,terminate" {
		t.Errorf("stopped pod %+v", pod)
	}
	e.MustProblem(409, "POST", "/v2/pods/"+pod.ID+"/action", J{"action": "restart"}, "EXITED")
	e.Must(200, "POST", "/v2/pods/"+pod.ID+"/action", J{"action": "start"}, nil)
	e.Must(200, "POST", "/v2/pods/"+pod.ID+"/action", J{"action": "restart"}, nil)
	_, logs = e.Call("GET", "/v2/pods/"+pod.ID+"/logs?source=container&tail=5&follow=false", nil)
	if !strings.Contains(string(logs), "pod says hi") {
		t.Errorf("pod logs: %q", logs)
	}
	e.MustProblem(422, "GET", "/v2/pods/"+pod.ID+"/logs?tail=-1", nil, "tail")
	e.MustProblem(422, "POST", "/v2/pods", J{"name": "x"}, "image")
	e.MustProblem(404, "GET", "/v2/pods/nosuchpod", nil, "not found")
	e.MustProblem(422, "POST", "/v2/pods/"+pod.ID+"/action", J{"action": "explode"}, "action")

	// The catalogue is this host.
	var gpus struct {
		GPUs []struct {
			ID       string
			MaxCount struct{ Secure int }
		}
	}
	e.Must(200, "GET", "/v2/catalog/gpus?include=AVAILABILITY&product=POD,SERVERLESS", nil, &gpus)
	if len(gpus.GPUs) < 2 || gpus.GPUs[0].ID != "NVIDIA GeForce RTX 4090" || gpus.GPUs[0].MaxCount.Secure != len(gpus4) {
		t.Errorf("catalog gpus: %+v", gpus.GPUs[:min(2, len(gpus.GPUs))])
	}
	e.Must(200, "GET", "/v2/catalog/gpus/NVIDIA%20GeForce%20RTX%204090?include=AVAILABILITY&product=POD", nil, nil)
	e.MustProblem(404, "GET", "/v2/catalog/gpus/NVIDIA%20Imaginary", nil, "not found")
	e.Must(200, "GET", "/v2/catalog/cpus?include=AVAILABILITY&product=POD", nil, nil)
	e.Must(200, "GET", "/v2/catalog/cpus/cpu3c", nil, nil)
	e.Must(200, "GET", "/v2/catalog/datacenters?include=GPU_AVAILABILITY,CPU_AVAILABILITY", nil, nil)
	e.Must(200, "GET", "/v2/catalog/datacenters?include=GPU_AVAILABILITY&include=CPU_AVAILABILITY", nil, nil)
	e.Must(200, "GET", "/v2/catalog/datacenters/BERTH-LOCAL", nil, nil)
	e.MustProblem(404, "GET", "/v2/catalog/datacenters/EU-RO-1", nil, "BERTH-LOCAL")

	// Billing from recorded run intervals.
	now := time.Now().UTC()
	for _, iv := range []store.UsageInterval{
		{Kind: store.UsagePod, ID: pod.ID, GPUTypeID: "NVIDIA GeForce RTX 4090", GPUCount: 1, VCPUCount: 2, Start: now.Add(-3 * time.Hour), End: now.Add(-2 * time.Hour)},
		{Kind: store.UsageWorker, ID: "zzzzcontainer1", EndpointID: ep.ID, GPUTypeID: "NVIDIA GeForce RTX 4090", GPUCount: 1, VCPUCount: 2, Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour)},
	} {
		if err := store.PutUsageInterval(e.DB, iv); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/v2/billing?bucketSize=hour&lastN=6", "/v2/billing/pods?podId=" + pod.ID, "/v2/billing/serverless?serverlessId=" + ep.ID,
		"/v2/billing/endpoints?bucketSize=week", "/v2/billing/network-volumes?networkVolumeId=" + vol.ID, "/v2/billing/clusters"} {
		e.Must(200, "GET", p, nil, nil)
	}
	e.MustProblem(422, "GET", "/v2/billing/pods?bucketSize=minute", nil, "bucketSize")

	// What one host cannot provide says why.
	e.MustProblem(501, "GET", "/v2/clusters", nil, "one machine")
	e.MustProblem(501, "POST", "/v2/clusters", J{"name": "c"}, "one machine")
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		e.MustProblem(501, m, "/v2/clusters/c1", nil, "one machine")
	}
	e.MustProblem(501, "GET", "/v2/clusters/c1/pods", nil, "one machine")
	e.MustProblem(501, "GET", "/v2/registries/delegations", nil, "ECR")
	e.MustProblem(501, "POST", "/v2/registries/delegations", J{}, "ECR")
	e.MustProblem(501, "DELETE", "/v2/registries/delegations/d1", nil, "ECR")

	// Deletes, in dependency order; terminate is a delete.
	e.MustProblem(400, "DELETE", "/v2/templates/"+tpl.ID, nil, "in use") // by the pod (v2.json: 400)
	e.Must(204, "POST", "/v2/pods/"+pod.ID+"/action", J{"action": "terminate"}, nil)
	e.Must(204, "DELETE", "/v2/pods/"+cpuPod.ID, nil, nil)
	e.Must(204, "DELETE", "/v2/serverless/"+ep.ID, nil, nil)
	e.Must(204, "DELETE", "/v2/serverless/"+inline.ID, nil, nil)
	e.Must(204, "DELETE", "/v2/templates/"+tpl.ID, nil, nil)
	e.Must(204, "DELETE", "/v2/network-volumes/"+vol.ID, nil, nil)
	e.Must(204, "DELETE", "/v2/registries/"+reg.ID, nil, nil)
	c.CheckCovered("v2")
}

// loadV2Doc fetches Berth's /v2/openapi.json, checks it loads and
// validates as OpenAPI 3.1, and returns a router over it.
func loadV2Doc(t *testing.T, e *apitest.Env) routers.Router {
	t.Helper()
	doc := v2Doc(t, e)
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("router for /v2/openapi.json: %v", err)
	}
	return r
}

func v2Doc(t *testing.T, e *apitest.Env) *openapi3.T {
	t.Helper()
	apitest.RunPodDoc(t, "v2") // enables JSON Schema 2020-12 once
	raw := e.Must(200, "GET", "/v2/openapi.json", nil, nil)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("load /v2/openapi.json: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("/v2/openapi.json does not validate: %v", err)
	}
	return doc
}

// TestV2Document: Berth's /v2/openapi.json describes exactly the v2 routes
// the router serves, each under RunPod's operation id for that path and
// method (getOpenAPI, this document, is Berth's own).
func TestV2Document(t *testing.T) {
	e := apitest.NewValidating(t)
	doc := v2Doc(t, e)
	rp, _ := apitest.RunPodDoc(t, "v2")
	ours := apitest.DocOps(doc)
	theirs := apitest.DocOps(rp)
	served := apitest.ServedRoutes(t, e.API.Handler())
	for route, id := range e.API.V2Routes() {
		if ours[route] != id {
			t.Errorf("%s: served as %s, documented as %q", route, id, ours[route])
		}
		if !slices.Contains(served, route) {
			t.Errorf("%s: in the v2 route table but not served", route)
		}
		if theirs[route] != id && !v2api.BerthOwn[id] {
			t.Errorf("%s: Berth calls it %s, RunPod's v2.json %q", route, id, theirs[route])
		}
	}
	var missing []string
	for route := range theirs {
		if _, ok := ours[route]; !ok {
			missing = append(missing, route)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("RunPod's v2.json operations Berth does not document: %v", missing)
	}
	if len(ours) != len(e.API.V2Routes()) {
		t.Errorf("the document has %d operations, the router %d", len(ours), len(e.API.V2Routes()))
	}
}

// TestV2LiberalIDs: RunPod data-centre ids and GPU pool ids are accepted
// and recorded; unknown-but-well-formed ones with a warning; malformed
// ones are 400 naming the field, and nothing is stored.
func TestV2LiberalIDs(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	e.Conformant(true)
	var tpl v2Template
	e.Must(201, "POST", "/v2/templates", J{"name": "t", "image": "alpine:3"}, &tpl)
	body := func(dcs []string, pools []string) J {
		return J{"name": "e", "type": "QUEUE", "templateId": tpl.ID, "scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4},
			"dataCenterIds": dcs, "gpu": J{"pools": pools}}
	}
	var ep struct {
		v2Endpoint
		Warnings []string
	}
	e.Must(201, "POST", "/v2/serverless", body([]string{"EU-RO-1", "US-TX-3"}, []string{"AMPERE_16", "HOPPER_141"}), &ep)
	if strings.Join(ep.DataCenterIDs, ",") != "EU-RO-1,US-TX-3" || strings.Join(ep.GPU.Pools, ",") != "AMPERE_16,HOPPER_141" || len(ep.Warnings) != 0 {
		t.Errorf("known ids: %+v", ep)
	}
	e.Must(201, "POST", "/v2/serverless", body([]string{"MARS-BASE-1"}, []string{"QUANTUM_512"}), &ep)
	if len(ep.Warnings) != 2 {
		t.Errorf("unknown-but-well-formed ids: warnings %q", ep.Warnings)
	}
	e.MustProblem(400, "POST", "/v2/serverless", body([]string{"eu ro 1"}, []string{"ADA_24"}), "dataCenterIds")
	e.MustProblem(400, "POST", "/v2/network-volumes", J{"name": "v", "size": 10, "dataCenter": "eu ro 1"}, "dataCenter")
	var list struct{ Endpoints []v2Endpoint }
	e.Must(200, "GET", "/v2/serverless", nil, &list)
	var vols struct{ NetworkVolumes []any }
	e.Must(200, "GET", "/v2/network-volumes", nil, &vols)
	if len(list.Endpoints) != 2 || len(vols.NetworkVolumes) != 0 {
		t.Errorf("after refused creates: %d endpoints (want 2), %d volumes (want 0)", len(list.Endpoints), len(vols.NetworkVolumes))
	}
}

// TestV2FrozenWorkersAreIdle: a FlashBoot worker frozen by Berth is listed
// by v2 (which has no frozen state) as IDLE, not dropped.
func TestV2FrozenWorkersAreIdle(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs))
	e.Fake.Image("alpine:3", apptest.WorkerProgram(func(_ context.Context, j *worker.Job) (any, error) { return j.Input, nil }))
	var tpl v2Template
	e.Must(201, "POST", "/v2/templates", J{"name": "worker", "image": "alpine:3"}, &tpl)
	var ep v2Endpoint
	e.Must(201, "POST", "/v2/serverless", J{"name": "fb", "type": "QUEUE", "templateId": tpl.ID, "flashboot": "FLASHBOOT", "gpu": J{"pools": []string{"ADA_24"}},
		"scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4}, "workers": J{"min": 0, "max": 2, "idleTimeout": 1}}, &ep)
	// A job brings a worker up; a second after it, idle, Berth freezes it.
	e.WaitStatus(ep.ID, e.Run(ep.ID, `{"n": 1}`), "COMPLETED")
	var v1 struct {
		Workers []struct{ ID, State string } `json:"workers"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"?includeWorkers=true", nil, &v1)
		if len(v1.Workers) == 1 && v1.Workers[0].State == "frozen" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle worker was not frozen: %+v", v1.Workers)
		}
	}
	var ws struct {
		Workers []struct{ ID, Status string }
		Summary struct{ Running, Idle, Total int }
	}
	e.Must(200, "GET", "/v2/serverless/"+ep.ID+"/workers", nil, &ws)
	if len(ws.Workers) != 1 || ws.Workers[0].ID != v1.Workers[0].ID || ws.Workers[0].Status != "IDLE" ||
		ws.Summary.Idle != 1 || ws.Summary.Running != 0 || ws.Summary.Total != 1 {
		t.Fatalf("v2's workers of a frozen one: %+v", ws)
	}
}

// TestV2IdleTimeout: omitted from a create it is the default (5 s),
// omitted from a PATCH it is unchanged; a queue endpoint scaling on
// requestCount does not show it (v2.json: "omitted from responses for that
// combination") and keeps it for a later change of scaler.
func TestV2IdleTimeout(t *testing.T) {
	e := apitest.NewValidating(t)
	e.Conformant(false)
	tpl := e.NewTemplate("t", "alpine:3", J{"isServerless": true})
	var ep v2Endpoint
	e.Must(201, "POST", "/v2/serverless", J{"name": "q", "type": "QUEUE", "templateId": tpl.ID,
		"gpu": J{"pools": []string{"ADA_24"}}, "scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4}}, &ep)
	if ep.Workers.IdleTimeout != 5 {
		t.Fatalf("created without idleTimeout: workers %+v, want idleTimeout 5", ep.Workers)
	}
	e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"workers": J{"idleTimeout": 30}}, &ep)
	e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"workers": J{"max": 2}}, &ep)
	if ep.Workers.IdleTimeout != 30 || ep.Workers.Max != 2 {
		t.Fatalf("PATCH without idleTimeout: workers %+v, want idleTimeout 30 kept", ep.Workers)
	}
	e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"scaling": J{"type": "REQUEST_COUNT", "requestCount": 3}}, nil)
	if b := e.Must(200, "GET", "/v2/serverless/"+ep.ID, nil, nil); strings.Contains(string(b), "idleTimeout") {
		t.Errorf("a REQUEST_COUNT queue endpoint shows idleTimeout: %s", b)
	}
	e.MustProblem(400, "PATCH", "/v2/serverless/"+ep.ID, J{"workers": J{"idleTimeout": 10}}, "idleTimeout")
	e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4}}, &ep)
	if ep.Workers.IdleTimeout != 30 {
		t.Errorf("back on QUEUE_DELAY: workers %+v, want idleTimeout 30", ep.Workers)
	}
}

// TestV2PodMountPatch: v2.json's PATCH rules for a pod's mounts — {} keeps
// the mount, an empty network list is refused (it once panicked the
// handler), the mount kind and a network mount's volume are fixed, its
// path may change.
func TestV2PodMountPatch(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	e.Conformant(false)
	vol := e.NewVolume("data", 10)
	other := e.NewVolume("other", 10)
	var pod, plain v2Pod
	e.Must(201, "POST", "/v2/pods", J{"name": "nv", "image": "alpine:3", "cpu": J{"id": "cpu3c", "vcpuCount": 2},
		"mounts": J{"network": []J{{"volumeId": vol.ID, "path": "/data"}}}}, &pod)
	e.Must(201, "POST", "/v2/pods", J{"name": "plain", "image": "alpine:3", "cpu": J{"id": "cpu3c", "vcpuCount": 2}}, &plain)

	e.Must(200, "PATCH", "/v2/pods/"+pod.ID, J{"mounts": J{}}, nil)
	e.MustProblem(400, "PATCH", "/v2/pods/"+pod.ID, J{"mounts": J{"network": []J{}}}, "mounts.network")
	e.MustProblem(400, "PATCH", "/v2/pods/"+pod.ID, J{"mounts": J{"network": []J{{"volumeId": other.ID, "path": "/data"}}}}, "volumeId")
	e.MustProblem(400, "PATCH", "/v2/pods/"+pod.ID, J{"mounts": J{"persistent": J{"size": 20, "path": "/w"}}}, "mount kind")
	e.MustProblem(400, "PATCH", "/v2/pods/"+plain.ID, J{"mounts": J{"network": []J{{"volumeId": vol.ID, "path": "/data"}}}}, "mount kind")
	e.MustProblem(400, "PATCH", "/v2/pods/"+plain.ID, J{"mounts": J{"persistent": J{"size": 20, "path": "/w"}}}, "mount kind")
	e.Must(200, "PATCH", "/v2/pods/"+pod.ID, J{"mounts": J{"network": []J{{"volumeId": vol.ID, "path": "/moved"}}}}, &pod)
	if len(pod.Mounts.Network) != 1 || pod.Mounts.Network[0].VolumeID != vol.ID || pod.Mounts.Network[0].Path != "/moved" {
		t.Errorf("after moving the network mount: %+v", pod.Mounts)
	}
}

// TestV2EndpointOwnTemplate: a v2 endpoint has a template of its own, made
// from templateId's and the body's container fields (RunPod: a template
// is a snapshot applied at creation); PATCH may give templateId and
// container fields together; DELETE removes the endpoint's own template
// (v2.json: "and its bound template") and leaves the user's.
func TestV2EndpointOwnTemplate(t *testing.T) {
	e := apitest.NewValidating(t)
	e.Conformant(true)
	var user, other v2Template
	e.Must(201, "POST", "/v2/templates", J{"name": "user", "image": "alpine:3", "serverless": true, "env": J{"A": "1"}}, &user)
	e.Must(201, "POST", "/v2/templates", J{"name": "other", "image": "busybox:1", "serverless": true}, &other)
	listed := func() map[string]bool {
		var l struct{ Templates []v2Template }
		e.Must(200, "GET", "/v2/templates", nil, &l)
		m := map[string]bool{}
		for _, t := range l.Templates {
			m[t.ID] = true
		}
		return m
	}
	var ep v2Endpoint
	e.Must(201, "POST", "/v2/serverless", J{"name": "ep", "type": "QUEUE", "templateId": user.ID, "disk": 20,
		"gpu": J{"pools": []string{"ADA_24"}}, "scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4}}, &ep)
	if ep.TemplateID == user.ID || ep.Image != "alpine:3" || ep.Env["A"] != "1" || !listed()[ep.TemplateID] {
		t.Fatalf("endpoint %+v", ep)
	}
	// An edit of the user's template does not reach the endpoint.
	e.Must(200, "PATCH", "/v2/templates/"+user.ID, J{"image": "alpine:9"}, nil)
	e.Must(200, "GET", "/v2/serverless/"+ep.ID, nil, &ep)
	if ep.Image != "alpine:3" {
		t.Errorf("the user's template edit reached the endpoint: %+v", ep)
	}
	// templateId with container fields: the other template, overridden.
	own := ep.TemplateID
	e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"templateId": other.ID, "args": "sleep 1"}, &ep)
	if ep.Image != "busybox:1" || ep.Args != "sleep 1" || ep.TemplateID == other.ID || ep.Version != 2 {
		t.Errorf("after PATCH templateId + args: %+v", ep)
	}
	if listed()[own] {
		t.Errorf("the endpoint's former own template %s is still listed", own)
	}
	own = ep.TemplateID
	e.Must(204, "DELETE", "/v2/serverless/"+ep.ID, nil, nil)
	if l := listed(); l[own] || !l[user.ID] || !l[other.ID] {
		t.Errorf("after DELETE: templates %v; own %s must be gone, %s and %s kept", l, own, user.ID, other.ID)
	}
}

// TestModelReferencesOnREST: modelReferences (Berth's field on v1 and v2,
// RunPod's GraphQL field) is taken on create and PATCH, read back on both
// versions, [] clears it, and a malformed or control-character reference
// is a 400 naming the field that changes nothing.
func TestModelReferencesOnREST(t *testing.T) {
	e := apitest.NewValidating(t)
	var tpl v2Template
	e.Must(201, "POST", "/v2/templates", J{"name": "m", "image": "alpine:3", "serverless": true}, &tpl)
	refs := []string{"https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct", "https://huggingface.co/acme/tiny:v1.0"}
	var ep struct {
		ID              string
		ModelReferences []string
	}
	e.Must(201, "POST", "/v2/serverless", J{"name": "ep", "type": "QUEUE", "templateId": tpl.ID, "gpu": J{"pools": []string{"ADA_24"}},
		"scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4}, "modelReferences": refs}, &ep)
	if !slices.Equal(ep.ModelReferences, refs) {
		t.Fatalf("v2 create: %q", ep.ModelReferences)
	}
	var v1 struct{ ModelReferences []string }
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID, nil, &v1)
	if !slices.Equal(v1.ModelReferences, refs) {
		t.Fatalf("v1 read: %q", v1.ModelReferences)
	}
	if out := string(e.Must(400, "PATCH", "/v2/serverless/"+ep.ID, J{"modelReferences": []string{"Qwen/Qwen2.5"}}, nil)); !strings.Contains(out, `$.modelReferences: modelReferences[0]: \"Qwen/Qwen2.5\" is not a Hugging Face model reference`) {
		t.Errorf("v2 400: %s", out)
	}
	e.MustErr(400, "PATCH", "/v1/endpoints/"+ep.ID, J{"modelReferences": []string{"https://huggingface.co/a/b\u0007"}}, "modelReferences[0]", "control character")
	many := make([]string, 17)
	for i := range many {
		many[i] = fmt.Sprintf("https://huggingface.co/acme/m%d", i)
	}
	e.MustErr(400, "PATCH", "/v1/endpoints/"+ep.ID, J{"modelReferences": many}, "modelReferences")
	e.MustErr(400, "PATCH", "/v1/endpoints/"+ep.ID, J{"modelReferences": []string{refs[0], refs[0] + ":main"}}, "given twice")
	e.Must(200, "GET", "/v2/serverless/"+ep.ID, nil, &ep)
	if !slices.Equal(ep.ModelReferences, refs) {
		t.Fatalf("a refused change changed the models: %q", ep.ModelReferences)
	}
	ep.ModelReferences = nil
	e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"modelReferences": []string{}}, &ep)
	if len(ep.ModelReferences) != 0 {
		t.Fatalf("[] did not clear: %q", ep.ModelReferences)
	}
}
