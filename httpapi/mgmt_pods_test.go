package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/httpapi"
	"berth/mgmt"
	"berth/store"
)

// fakePods is a PodRuntime that records calls and can be told to fail.
type fakePods struct {
	mu         sync.Mutex
	containers map[string]string // pod id → running or stopped
	calls      []string
	failNext   error
}

func newFakePods() *fakePods { return &fakePods{containers: map[string]string{}} }

// withFakePods runs pods on f instead of the runtime (app.Config.Pods).
func withFakePods(f *fakePods) envOpt {
	return func(e *testEnv) { e.cfg.Pods = f }
}

var fakeStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (f *fakePods) record(call string) error {
	f.calls = append(f.calls, call)
	err := f.failNext
	f.failNext = nil
	return err
}

func (f *fakePods) fail(err error) {
	f.mu.Lock()
	f.failNext = err
	f.mu.Unlock()
}

func (f *fakePods) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *fakePods) state(p store.Pod) mgmt.PodState {
	st := mgmt.PodState{PortMappings: map[string]int{}, PublicIP: "127.0.0.1", MemoryInGb: 16, StartedAt: fakeStart}
	for i, port := range p.Ports {
		st.PortMappings[strings.Split(port, "/")[0]] = 40000 + i
	}
	if p.ComputeType == "GPU" {
		st.GPU = &store.PodGPU{ID: "NVIDIA GeForce RTX 4090", Count: p.GPUCount, DisplayName: "RTX 4090"}
	}
	return st
}

func (f *fakePods) StartPod(_ context.Context, p store.Pod) (mgmt.PodState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(fmt.Sprintf("start %s v%d", p.ID, p.Version)); err != nil {
		return mgmt.PodState{}, err
	}
	f.containers[p.ID] = "running"
	return f.state(p), nil
}

func (f *fakePods) StopPod(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("stop " + id); err != nil {
		return err
	}
	f.containers[id] = "stopped"
	return nil
}

func (f *fakePods) ResetPod(_ context.Context, p store.Pod) (mgmt.PodState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(fmt.Sprintf("reset %s v%d", p.ID, p.Version)); err != nil {
		return mgmt.PodState{}, err
	}
	f.containers[p.ID] = "running"
	return f.state(p), nil
}

func (f *fakePods) RemovePod(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("remove " + id); err != nil {
		return err
	}
	delete(f.containers, id)
	return nil
}

// podJSON is a pod answer with the view fields.
type podJSON struct {
	store.Pod
	Image          string               `json:"image"`
	CostPerHr      float64              `json:"costPerHr"`
	ConsumerUserID string               `json:"consumerUserId"`
	Machine        *J                   `json:"machine"`
	NetworkVolume  *store.NetworkVolume `json:"networkVolume"`
	SavingsPlans   *[]J                 `json:"savingsPlans"`
	Template       *store.Template      `json:"template"`
	EndpointID     string               `json:"endpointId"`
	State          string               `json:"state"`
}

func (e *testEnv) newPod(body J) podJSON {
	e.t.Helper()
	var p podJSON
	e.must(http.StatusCreated, "POST", "/v1/pods", body, &p)
	return p
}

func TestPodWithoutRuntime(t *testing.T) {
	e := newValidatingServer(t)
	e.mustErr(503, "POST", "/v1/pods", J{"imageName": "alpine:3"}, "no container runtime", "not created")
	if n := e.count("/v1/pods"); n != 0 {
		t.Fatalf("%d pods stored after a create without runtime", n)
	}
	// A pod made while Docker was reachable: actions say why they fail
	// and the record keeps the reason; desiredStatus does not change.
	rec := store.Pod{ID: "podwithoutrt01", Name: "old", DesiredStatus: store.PodExited, Version: 1, ImageName: "alpine:3",
		DockerEntrypoint: []string{}, DockerStartCmd: []string{}, Env: map[string]string{}, Ports: []string{}, ComputeType: "CPU", CloudType: "SECURE",
		GPUTypeIDs: []string{}, DataCenterIDs: []string{mgmt.DataCenterID}, VCPUCount: 2, CreatedAt: fakeStart}
	if err := e.db.Update(func(tx *store.Tx) error { return tx.Apply(store.Put(store.Pods, rec.ID, rec)) }); err != nil {
		t.Fatal(err)
	}
	e.mustErr(503, "POST", "/v1/pods/"+rec.ID+"/start", nil, "no container runtime")
	var p podJSON
	e.must(200, "GET", "/v1/pods/"+rec.ID, nil, &p)
	if p.DesiredStatus != store.PodExited || !strings.Contains(p.StatusMessage, "no container runtime") || !strings.HasPrefix(p.LastStatusChange, "Start failed: ") {
		t.Errorf("after a failed start: desiredStatus %s, statusMessage %q, lastStatusChange %q", p.DesiredStatus, p.StatusMessage, p.LastStatusChange)
	}
	// Deleting needs no runtime: the reconcile removes orphans.
	e.must(204, "DELETE", "/v1/pods/"+rec.ID, nil, nil)
	e.mustErr(404, "GET", "/v1/pods/"+rec.ID, nil, "not found")
}

func TestPodCreateValidation(t *testing.T) {
	f := newFakePods()
	e := newValidatingServer(t, withFakePods(f))
	tpl := e.newTemplate("t", "alpine:3", nil)
	cases := []struct {
		name  string
		body  J
		words []string
	}{
		{"no image", J{"name": "x"}, []string{"imageName"}},
		{"empty image", J{"imageName": ""}, []string{"imageName"}},
		{"empty name", J{"imageName": "a", "name": ""}, []string{"name"}},
		{"long name", J{"imageName": "a", "name": strings.Repeat("n", 192)}, []string{"name", "191"}},
		{"computeType", J{"imageName": "a", "computeType": "TPU"}, []string{"computeType"}},
		{"cloudType", J{"imageName": "a", "cloudType": "PRIVATE"}, []string{"cloudType"}},
		{"gpuCount", J{"imageName": "a", "gpuCount": 0}, []string{"gpuCount"}},
		{"vcpuCount", J{"imageName": "a", "vcpuCount": 0}, []string{"vcpuCount"}},
		{"minRAMPerGPU", J{"imageName": "a", "minRAMPerGPU": -1}, []string{"minRAMPerGPU"}},
		{"dataCenterIds", J{"imageName": "a", "dataCenterIds": []string{"eu-ro-1"}}, []string{"dataCenterIds", "eu-ro-1"}},
		{"gpuTypeIds", J{"imageName": "a", "gpuTypeIds": []string{"NVIDIA A40\n"}}, []string{"gpuTypeIds"}},
		{"priority", J{"imageName": "a", "gpuTypePriority": "fastest"}, []string{"gpuTypePriority"}},
		{"volumeEncrypted", J{"imageName": "a", "volumeEncrypted": true}, []string{"volumeEncrypted"}},
		{"cpuFlavorIds", J{"imageName": "a", "cpuFlavorIds": []string{"cpu9z"}}, []string{"cpuFlavorIds"}},
		{"cuda", J{"imageName": "a", "allowedCudaVersions": []string{"twelve"}}, []string{"allowedCudaVersions"}},
		{"mbps", J{"imageName": "a", "minDownloadMbps": -3}, []string{"minDownloadMbps"}},
		{"ports", J{"imageName": "a", "ports": []string{"22"}}, []string{"ports"}},
		{"disk", J{"imageName": "a", "containerDiskInGb": -1}, []string{"containerDiskInGb"}},
		{"mount", J{"imageName": "a", "volumeMountPath": "ws"}, []string{"volumeMountPath"}},
		{"env", J{"imageName": "a", "env": J{"": "x"}}, []string{"env"}},
		{"template", J{"templateId": "zzzzzzzzzz"}, []string{"templateId"}},
		{"volume", J{"imageName": "a", "networkVolumeId": "nope"}, []string{"networkVolumeId"}},
		{"registry", J{"imageName": "a", "containerRegistryAuthId": "nope"}, []string{"containerRegistryAuthId"}},
		{"unknown", J{"imageName": "a", "gpuTypeID": []string{}}, []string{"gpuTypeID"}},
		{"type", J{"imageName": "a", "gpuCount": "2"}, []string{"gpuCount"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { e.mustErr(400, "POST", "/v1/pods", c.body, c.words...) })
	}
	if n := e.count("/v1/pods"); n != 0 {
		t.Errorf("%d pods stored after refused creates", n)
	}
	if calls := f.takeCalls(); len(calls) != 0 {
		t.Errorf("runtime called for refused creates: %v", calls)
	}
	_ = tpl
}

func TestPodCreate(t *testing.T) {
	f := newFakePods()
	e := newValidatingServer(t, withFakePods(f))
	p := e.newPod(J{"imageName": "alpine:3", "gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}, "env": J{"A": "1"}})
	if len(p.ID) != 14 || p.Name != "my pod" || p.DesiredStatus != store.PodRunning || p.Version != 1 || p.Image != "alpine:3" {
		t.Errorf("created pod: %+v", p.Pod)
	}
	if p.GPU == nil || p.GPU.ID != "NVIDIA GeForce RTX 4090" || p.GPU.Count != 1 || p.PortMappings["22"] != 40001 || p.PublicIP != "127.0.0.1" {
		t.Errorf("runtime state not recorded: gpu %+v ports %v ip %q", p.GPU, p.PortMappings, p.PublicIP)
	}
	if !p.LastStartedAt.Equal(fakeStart) || !strings.HasPrefix(p.LastStatusChange, "Created by user: ") || p.StatusMessage != "" {
		t.Errorf("lastStartedAt %v lastStatusChange %q statusMessage %q", p.LastStartedAt, p.LastStatusChange, p.StatusMessage)
	}
	if want := []string{"start " + p.ID + " v1"}; !reflect.DeepEqual(f.takeCalls(), want) {
		t.Errorf("runtime calls, want %v", want)
	}
	// A failed start leaves nothing behind.
	f.fail(fmt.Errorf("pull alpine:9: %w", mgmt.ErrPodInvalid))
	e.mustErr(400, "POST", "/v1/pods", J{"imageName": "alpine:9"}, "not created", "pull alpine:9")
	f.fail(mgmt.ErrPodCapacity)
	e.mustErr(409, "POST", "/v1/pods", J{"imageName": "alpine:3", "gpuCount": 8}, "GPUs")
	f.fail(errors.New("docker exploded"))
	e.mustErr(503, "POST", "/v1/pods", J{"imageName": "alpine:3"}, "docker exploded")
	if n := e.count("/v1/pods"); n != 1 {
		t.Errorf("%d pods after failed creates, want 1", n)
	}
	calls := f.takeCalls()
	if len(calls) != 6 || !strings.HasPrefix(calls[1], "remove ") {
		t.Errorf("failed creates should start then remove: %v", calls)
	}
	// A CPU pod has no GPU fields.
	c := e.newPod(J{"imageName": "alpine:3", "computeType": "CPU", "vcpuCount": 4, "cpuFlavorIds": []string{"cpu3c"}, "gpuCount": 2})
	if c.GPU != nil || c.GPUCount != 0 || c.VCPUCount != 4 {
		t.Errorf("CPU pod: gpu %+v gpuCount %d vcpu %d", c.GPU, c.GPUCount, c.VCPUCount)
	}
}

func TestPodFromTemplate(t *testing.T) {
	e := newValidatingServer(t, withFakePods(newFakePods()))
	auth := e.newRegistryAuth("hub", "u", "p")
	tpl := e.newTemplate("t", "registry.local/app:1", J{"env": J{"A": "1", "B": "2"}, "ports": []string{"8000/http"},
		"dockerStartCmd": []string{"serve"}, "containerRegistryAuthId": auth.ID, "volumeInGb": 15})
	p := e.newPod(J{"templateId": tpl.ID, "env": J{"B": "3", "C": "4"}, "volumeInGb": 17})
	want := map[string]string{"A": "1", "B": "3", "C": "4"}
	if p.ImageName != tpl.ImageName || !reflect.DeepEqual(p.Env, want) || !reflect.DeepEqual(p.Ports, []string{"8000/http"}) ||
		!reflect.DeepEqual(p.DockerStartCmd, []string{"serve"}) || p.ContainerRegistryAuthID != auth.ID || p.VolumeInGb != 17 || p.TemplateID != tpl.ID {
		t.Errorf("pod from template: %+v", p.Pod)
	}
}

func TestPodActions(t *testing.T) {
	f := newFakePods()
	e := newValidatingServer(t, withFakePods(f))
	p := e.newPod(J{"imageName": "alpine:3", "name": "dev"})
	f.takeCalls()
	base := "/v1/pods/" + p.ID

	var got podJSON
	e.must(200, "POST", base+"/stop", nil, &got)
	if got.DesiredStatus != store.PodExited || got.PortMappings != nil || got.PublicIP != "" || !strings.HasPrefix(got.LastStatusChange, "Stopped by user") {
		t.Errorf("after stop: %s ports %v ip %q %q", got.DesiredStatus, got.PortMappings, got.PublicIP, got.LastStatusChange)
	}
	e.must(200, "POST", base+"/start", nil, &got)
	if got.DesiredStatus != store.PodRunning || got.PortMappings["8888"] != 40000 {
		t.Errorf("after start: %s %v", got.DesiredStatus, got.PortMappings)
	}
	e.must(200, "POST", base+"/restart", nil, &got)
	e.must(200, "POST", base+"/reset", nil, &got)
	if got.DesiredStatus != store.PodRunning || !strings.HasPrefix(got.LastStatusChange, "Reset by user") {
		t.Errorf("after reset: %s %q", got.DesiredStatus, got.LastStatusChange)
	}
	want := []string{"stop " + p.ID, "start " + p.ID + " v1", "stop " + p.ID, "start " + p.ID + " v1", "reset " + p.ID + " v1"}
	if calls := f.takeCalls(); !reflect.DeepEqual(calls, want) {
		t.Errorf("runtime calls %v, want %v", calls, want)
	}

	// Runtime failures: the answer and the record say why; desiredStatus stays.
	f.fail(errors.New("daemon gone"))
	e.mustErr(503, "POST", base+"/stop", nil, "daemon gone")
	e.must(200, "GET", base, nil, &got)
	if got.DesiredStatus != store.PodRunning || !strings.Contains(got.StatusMessage, "daemon gone") || !strings.HasPrefix(got.LastStatusChange, "Stop failed") {
		t.Errorf("after a failed stop: %s %q %q", got.DesiredStatus, got.StatusMessage, got.LastStatusChange)
	}
	f.fail(mgmt.ErrPodCapacity)
	e.mustErr(409, "POST", base+"/reset", nil, "GPUs")
	e.must(200, "POST", base+"/stop", nil, &got)
	if got.StatusMessage != "" {
		t.Errorf("statusMessage %q kept after a successful action", got.StatusMessage)
	}
	f.takeCalls()

	// Locked pods cannot be stopped, reset, restarted or deleted.
	e.must(200, "POST", base+"/start", nil, nil)
	e.must(200, "PATCH", base, J{"locked": true}, &got)
	if !got.Locked {
		t.Fatal("lock not stored")
	}
	for _, a := range []string{"stop", "reset", "restart"} {
		e.mustErr(409, "POST", base+"/"+a, nil, "locked")
	}
	e.mustErr(409, "DELETE", base, nil, "locked")
	e.mustErr(409, "PATCH", base, J{"imageName": "alpine:4"}, "locked")
	e.must(200, "POST", base+"/start", nil, nil) // starting is allowed
	e.must(200, "PATCH", base, J{"locked": false, "name": "renamed"}, &got)
	if got.Locked || got.Name != "renamed" {
		t.Errorf("unlock and rename: %+v", got.Pod)
	}
	for _, a := range []string{"start", "stop", "reset", "restart"} {
		e.mustErr(404, "POST", "/v1/pods/nosuchpod00000/"+a, nil, "not found")
	}
	f.takeCalls()

	e.must(204, "DELETE", base, nil, nil)
	if calls := f.takeCalls(); !reflect.DeepEqual(calls, []string{"remove " + p.ID}) {
		t.Errorf("delete calls %v", calls)
	}
	e.mustErr(404, "GET", base, nil, "not found")
	e.mustErr(404, "DELETE", base, nil, "not found")
}

func TestPodUpdate(t *testing.T) {
	f := newFakePods()
	e := newValidatingServer(t, withFakePods(f))
	p := e.newPod(J{"imageName": "alpine:3"})
	f.takeCalls()
	base := "/v1/pods/" + p.ID
	var got podJSON
	// Name only: no new container.
	e.must(200, "PATCH", base, J{"name": "n2"}, &got)
	if got.Version != 1 || len(f.takeCalls()) != 0 {
		t.Errorf("a rename reset the pod (version %d)", got.Version)
	}
	// Image change on a running pod: stored, version bumped, reset.
	e.must(200, "POST", base+"/update", J{"imageName": "alpine:4", "env": J{"X": "1"}}, &got)
	if got.Version != 2 || got.ImageName != "alpine:4" || got.Env["X"] != "1" {
		t.Errorf("after update: %+v", got.Pod)
	}
	if calls := f.takeCalls(); !reflect.DeepEqual(calls, []string{"reset " + p.ID + " v2"}) {
		t.Errorf("calls %v, want a reset at v2", calls)
	}
	// On a stopped pod the change waits for the next start.
	e.must(200, "POST", base+"/stop", nil, nil)
	f.takeCalls()
	e.must(200, "PATCH", base, J{"dockerStartCmd": []string{"sleep", "1"}}, &got)
	if got.Version != 3 || len(f.takeCalls()) != 0 {
		t.Errorf("a stopped pod was reset (version %d)", got.Version)
	}
	// A failed reset: 503, the change is kept and the record says why.
	e.must(200, "POST", base+"/start", nil, nil)
	f.takeCalls()
	f.fail(errors.New("no disk"))
	e.mustErr(503, "PATCH", base, J{"ports": "80/http"}, "no disk", "stored")
	e.must(200, "GET", base, nil, &got)
	if !reflect.DeepEqual(got.Ports, []string{"80/http"}) || got.Version != 4 || !strings.Contains(got.StatusMessage, "no disk") {
		t.Errorf("after a failed reset: ports %v version %d message %q", got.Ports, got.Version, got.StatusMessage)
	}
	before := e.must(200, "GET", base, nil, nil)
	for _, c := range []struct {
		body J
		word string
	}{
		{J{"gpuCount": 2}, "gpuCount"}, // not an update field
		{J{"imageName": ""}, "imageName"},
		{J{"volumeInGb": -1}, "volumeInGb"},
		{J{"containerRegistryAuthId": "nope"}, "containerRegistryAuthId"},
		{J{"ports": []string{"x/y"}}, "ports"},
	} {
		e.mustErr(400, "PATCH", base, c.body, c.word)
	}
	if after := e.must(200, "GET", base, nil, nil); string(after) != string(before) {
		t.Errorf("refused updates changed the pod")
	}
	e.mustErr(404, "PATCH", "/v1/pods/nosuchpod00000", J{"name": "x"}, "not found")
}

func TestPodListAndIncludes(t *testing.T) {
	f := newFakePods()
	e := newValidatingServer(t, withFakePods(f), withHTTP(func(c *httpapi.Config) {
		c.WorkerInfo = func(ep string) []mgmt.WorkerInfo {
			return []mgmt.WorkerInfo{{ID: "wrk" + ep[:4], State: "initializing", ImageName: "w:1", Version: 1, Message: "pulling"}}
		}
	}))
	vol := e.newVolume("data", 10)
	tpl := e.newTemplate("t", "alpine:3", nil)
	gpu := e.newPod(J{"imageName": "alpine:3", "name": "gpu", "networkVolumeId": vol.ID, "gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}})
	cpu := e.newPod(J{"templateId": tpl.ID, "name": "cpu", "computeType": "CPU", "cpuFlavorIds": []string{"cpu5c"}})
	e.must(200, "POST", "/v1/pods/"+cpu.ID+"/stop", nil, nil)
	ep := e.newEndpoint(tpl.ID, nil)
	var env map[string]string
	e.must(200, "GET", "/v1/endpoints/"+ep.ID+"/worker-env", nil, &env)

	cases := []struct {
		query string
		want  []string
	}{
		{"", []string{gpu.ID, cpu.ID}},
		{"?computeType=CPU", []string{cpu.ID}},
		{"?desiredStatus=RUNNING", []string{gpu.ID}},
		{"?desiredStatus=TERMINATED", nil},
		{"?name=gpu", []string{gpu.ID}},
		{"?id=" + cpu.ID, []string{cpu.ID}},
		{"?imageName=alpine:3", []string{gpu.ID, cpu.ID}},
		{"?templateId=" + tpl.ID, []string{cpu.ID}},
		{"?networkVolumeId=" + vol.ID, []string{gpu.ID}},
		{"?gpuTypeId=NVIDIA+GeForce+RTX+4090", []string{gpu.ID}},
		{"?gpuTypeId=NVIDIA+A40&gpuTypeId=NVIDIA+GeForce+RTX+4090", []string{gpu.ID}},
		{"?cpuFlavorId=cpu5c", []string{cpu.ID}},
		{"?dataCenterId=" + mgmt.DataCenterID, []string{gpu.ID, cpu.ID}},
		{"?dataCenterId=EU-RO-1", nil},
		{"?endpointId=" + ep.ID, nil}, // workers only with includeWorkers
		{"?includeWorkers=true&endpointId=" + ep.ID, []string{"wrk" + ep.ID[:4], env["RUNPOD_POD_ID"]}},
	}
	for _, c := range cases {
		var list []podJSON
		e.must(200, "GET", "/v1/pods"+c.query, nil, &list)
		var got []string
		for _, p := range list {
			got = append(got, p.ID)
		}
		want := c.want
		if len(want) == 2 && strings.HasPrefix(want[0], "wrk") && want[0] > want[1] {
			want = []string{want[1], want[0]}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("GET /v1/pods%s = %v, want %v", c.query, got, want)
		}
	}
	e.mustErr(400, "GET", "/v1/pods?computeType=TPU", nil, "computeType")
	e.mustErr(400, "GET", "/v1/pods?desiredStatus=PAUSED", nil, "desiredStatus")
	e.mustErr(400, "GET", "/v1/pods?includeMachine=perhaps", nil, "includeMachine")

	var list []podJSON
	e.must(200, "GET", "/v1/pods?includeWorkers=true&id=wrk"+ep.ID[:4], nil, &list)
	if len(list) != 1 || list[0].EndpointID != ep.ID || list[0].State != "initializing" || list[0].StatusMessage != "pulling" {
		t.Errorf("runtime worker in the pod list: %+v", list)
	}

	var p podJSON
	e.must(200, "GET", "/v1/pods/"+gpu.ID+"?includeMachine=true&includeNetworkVolume=true&includeSavingsPlans=true&includeTemplate=true", nil, &p)
	if p.Machine == nil || (*p.Machine)["dataCenterId"] != mgmt.DataCenterID || p.NetworkVolume == nil || p.NetworkVolume.ID != vol.ID ||
		p.SavingsPlans == nil || len(*p.SavingsPlans) != 0 || p.Template != nil {
		t.Errorf("includes on a pod without template: machine %v volume %v plans %v template %v", p.Machine, p.NetworkVolume, p.SavingsPlans, p.Template)
	}
	e.must(200, "GET", "/v1/pods/"+cpu.ID+"?includeTemplate=true", nil, &p)
	if p.Template == nil || p.Template.ID != tpl.ID || p.Machine != nil || p.NetworkVolume != nil {
		t.Errorf("includeTemplate: %+v", p)
	}
	e.must(200, "GET", "/v1/pods/"+cpu.ID, nil, &p)
	if p.Template != nil || p.SavingsPlans != nil {
		t.Errorf("includes without flags")
	}
	e.mustErr(404, "GET", "/v1/pods/nosuchpod00000", nil, "not found")
	e.mustErr(400, "GET", "/v1/pods/"+cpu.ID+"?includeTemplate=1x", nil, "includeTemplate")
}
