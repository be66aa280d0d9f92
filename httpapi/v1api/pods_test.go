package v1api_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/mgmt"
	"berth/runtime"
	"berth/runtime/fake"
	"berth/store"
)

func TestPodWithoutRuntime(t *testing.T) {
	e := apitest.NewValidating(t)
	e.MustErr(503, "POST", "/v1/pods", J{"imageName": "alpine:3"}, "no container runtime", "not created")
	if n := e.Count("/v1/pods"); n != 0 {
		t.Fatalf("%d pods stored after a create without runtime", n)
	}
	// A pod made while Docker was reachable: actions say why they fail
	// and the record keeps the reason; desiredStatus does not change.
	rec := store.Pod{ID: "podwithoutrt01", Name: "old", DesiredStatus: store.PodExited, Version: 1, ImageName: "alpine:3",
		DockerEntrypoint: []string{}, DockerStartCmd: []string{}, Env: map[string]string{}, Ports: []string{}, ComputeType: "CPU", CloudType: "SECURE",
		GPUTypeIDs: []string{}, DataCenterIDs: []string{mgmt.DataCenterID}, VCPUCount: 2, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := e.DB.Update(func(tx *store.Tx) error { return tx.Apply(store.Put(store.Pods, rec.ID, rec)) }); err != nil {
		t.Fatal(err)
	}
	e.MustErr(503, "POST", "/v1/pods/"+rec.ID+"/start", nil, "no container runtime")
	var p apitest.PodJSON
	e.Must(200, "GET", "/v1/pods/"+rec.ID, nil, &p)
	if p.DesiredStatus != store.PodExited || !strings.Contains(p.StatusMessage, "no container runtime") || !strings.HasPrefix(p.LastStatusChange, "Start failed: ") {
		t.Errorf("after a failed start: desiredStatus %s, statusMessage %q, lastStatusChange %q", p.DesiredStatus, p.StatusMessage, p.LastStatusChange)
	}
	// Deleting needs no runtime: the reconcile removes orphans.
	e.Must(204, "DELETE", "/v1/pods/"+rec.ID, nil, nil)
	e.MustErr(404, "GET", "/v1/pods/"+rec.ID, nil, "not found")
}

// onFake is a Berth whose pods run on the in-memory backend, through its
// own pod adapter: two RTX 4090s, images alpine:3 and alpine:4.
func onFake(t *testing.T, opts ...apitest.Option) *apitest.Env {
	return apitest.NewValidating(t, append([]apitest.Option{apitest.WithFake(apitest.PodGPUs, "alpine:3", "alpine:4")}, opts...)...)
}

// instances is what the backend holds.
func instances(e *apitest.Env) []runtime.Instance {
	e.T.Helper()
	list, err := e.Fake.List(context.Background())
	if err != nil {
		e.T.Fatal(err)
	}
	return list
}

func TestPodCreateValidation(t *testing.T) {
	e := onFake(t)
	tpl := e.NewTemplate("t", "alpine:3", nil)
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
		t.Run(c.name, func(t *testing.T) { e.MustErr(400, "POST", "/v1/pods", c.body, c.words...) })
	}
	if n := e.Count("/v1/pods"); n != 0 {
		t.Errorf("%d pods stored after refused creates", n)
	}
	if list := instances(e); len(list) != 0 {
		t.Errorf("instances made for refused creates: %+v", list)
	}
	_ = tpl
}

func TestPodCreate(t *testing.T) {
	e := onFake(t)
	p := e.NewPod(J{"imageName": "alpine:3", "gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}, "env": J{"A": "1"}})
	if len(p.ID) != 14 || p.Name != "my pod" || p.DesiredStatus != store.PodRunning || p.Version != 1 || p.Image != "alpine:3" {
		t.Errorf("created pod: %+v", p.Pod)
	}
	in := e.PodInstance(p.ID)
	if !in.Running || in.Image != "alpine:3" || in.Env["A"] != "1" || len(in.GPUs) != 1 {
		t.Errorf("the pod's instance: %+v", in)
	}
	// What the runtime did is what the record says: its GPU, its ports as
	// published, when it started.
	if p.GPU == nil || p.GPU.ID != "NVIDIA GeForce RTX 4090" || p.GPU.Count != 1 || !reflect.DeepEqual(p.GPU.UUIDs, in.GPUs) ||
		p.PortMappings["22"] == 0 || p.PortMappings["22"] != in.PublicPorts["22/tcp"] || p.PublicIP == "" {
		t.Errorf("runtime state not recorded: gpu %+v ports %v (published %v) ip %q", p.GPU, p.PortMappings, in.PublicPorts, p.PublicIP)
	}
	if !p.LastStartedAt.Equal(in.StartedAt) || !strings.HasPrefix(p.LastStatusChange, "Created by user: ") || p.StatusMessage != "" {
		t.Errorf("lastStartedAt %v (started %v) lastStatusChange %q statusMessage %q", p.LastStartedAt, in.StartedAt, p.LastStatusChange, p.StatusMessage)
	}
	// A failed start leaves nothing behind: an image that cannot be
	// pulled, more GPUs than the host has, a runtime that fails.
	e.MustErr(400, "POST", "/v1/pods", J{"imageName": "alpine:9"}, "not created", "pull alpine:9")
	e.MustErr(409, "POST", "/v1/pods", J{"imageName": "alpine:3", "gpuCount": 8}, "GPUs")
	e.Fake.FailNext(fake.OpCreate, errors.New("docker exploded"))
	e.MustErr(503, "POST", "/v1/pods", J{"imageName": "alpine:3"}, "docker exploded")
	if n := e.Count("/v1/pods"); n != 1 {
		t.Errorf("%d pods after failed creates, want 1", n)
	}
	if list := instances(e); len(list) != 1 || list[0].ID != in.ID {
		t.Errorf("instances after failed creates: %+v, want only %s's", list, p.ID)
	}
	// A CPU pod has no GPU fields.
	c := e.NewPod(J{"imageName": "alpine:3", "computeType": "CPU", "vcpuCount": 4, "cpuFlavorIds": []string{"cpu3c"}, "gpuCount": 2})
	if c.GPU != nil || c.GPUCount != 0 || c.VCPUCount != 4 {
		t.Errorf("CPU pod: gpu %+v gpuCount %d vcpu %d", c.GPU, c.GPUCount, c.VCPUCount)
	}
}

func TestPodFromTemplate(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "registry.local/app:1"))
	auth := e.NewRegistryAuth("hub", "u", "p")
	tpl := e.NewTemplate("t", "registry.local/app:1", J{"env": J{"A": "1", "B": "2"}, "ports": []string{"8000/http"},
		"dockerStartCmd": []string{"serve"}, "containerRegistryAuthId": auth.ID, "volumeInGb": 15})
	p := e.NewPod(J{"templateId": tpl.ID, "env": J{"B": "3", "C": "4"}, "volumeInGb": 17})
	want := map[string]string{"A": "1", "B": "3", "C": "4"}
	if p.ImageName != tpl.ImageName || !reflect.DeepEqual(p.Env, want) || !reflect.DeepEqual(p.Ports, []string{"8000/http"}) ||
		!reflect.DeepEqual(p.DockerStartCmd, []string{"serve"}) || p.ContainerRegistryAuthID != auth.ID || p.VolumeInGb != 17 || p.TemplateID != tpl.ID {
		t.Errorf("pod from template: %+v", p.Pod)
	}
	in := e.PodInstance(p.ID)
	if !in.Running || in.Image != tpl.ImageName || in.Env["A"] != "1" || in.Env["B"] != "3" || in.Env["C"] != "4" || in.Env["RUNPOD_POD_ID"] != p.ID {
		t.Errorf("the pod's instance: %+v", in)
	}
}

func TestPodActions(t *testing.T) {
	e := onFake(t)
	p := e.NewPod(J{"imageName": "alpine:3", "name": "dev"})
	base := "/v1/pods/" + p.ID
	first := e.PodInstance(p.ID)

	var got apitest.PodJSON
	e.Must(200, "POST", base+"/stop", nil, &got)
	if got.DesiredStatus != store.PodExited || got.PortMappings != nil || got.PublicIP != "" || !strings.HasPrefix(got.LastStatusChange, "Stopped by user") {
		t.Errorf("after stop: %s ports %v ip %q %q", got.DesiredStatus, got.PortMappings, got.PublicIP, got.LastStatusChange)
	}
	if in := e.PodInstance(p.ID); in.Running || in.ID != first.ID {
		t.Errorf("after stop, the instance: %+v, want %s stopped", in, first.ID)
	}
	e.Must(200, "POST", base+"/start", nil, &got)
	in := e.PodInstance(p.ID)
	if got.DesiredStatus != store.PodRunning || got.PortMappings["8888"] == 0 || got.PortMappings["8888"] != in.PublicPorts["8888/tcp"] ||
		!in.Running || in.ID != first.ID || !got.LastStartedAt.Equal(in.StartedAt) {
		t.Errorf("after start: %s %v %v; instance %+v", got.DesiredStatus, got.PortMappings, got.LastStartedAt, in)
	}
	e.Must(200, "POST", base+"/restart", nil, &got)
	if in := e.PodInstance(p.ID); !in.Running || in.ID != first.ID {
		t.Errorf("after restart, the instance: %+v, want %s running", in, first.ID)
	}
	e.Must(200, "POST", base+"/reset", nil, &got)
	if got.DesiredStatus != store.PodRunning || !strings.HasPrefix(got.LastStatusChange, "Reset by user") {
		t.Errorf("after reset: %s %q", got.DesiredStatus, got.LastStatusChange)
	}
	if in := e.PodInstance(p.ID); !in.Running || in.ID == first.ID {
		t.Errorf("after reset, the instance: %+v, want a new one running", in)
	}

	// Runtime failures: the answer and the record say why; desiredStatus stays.
	e.Fake.FailNext(fake.OpStop, errors.New("daemon gone"))
	e.MustErr(503, "POST", base+"/stop", nil, "daemon gone")
	e.Must(200, "GET", base, nil, &got)
	if got.DesiredStatus != store.PodRunning || !strings.Contains(got.StatusMessage, "daemon gone") || !strings.HasPrefix(got.LastStatusChange, "Stop failed") {
		t.Errorf("after a failed stop: %s %q %q", got.DesiredStatus, got.StatusMessage, got.LastStatusChange)
	}
	// Every GPU taken while the pod is stopped: its reset finds none.
	e.Must(200, "POST", base+"/stop", nil, &got)
	if got.StatusMessage != "" {
		t.Errorf("statusMessage %q kept after a successful action", got.StatusMessage)
	}
	if err := e.App.GPUs().Restore("squatter", []string{apitest.PodGPUs[0].UUID, apitest.PodGPUs[1].UUID}); err != nil {
		t.Fatal(err)
	}
	e.MustErr(409, "POST", base+"/reset", nil, "GPUs")
	e.App.GPUs().Release("squatter")

	// Locked pods cannot be stopped, reset, restarted or deleted.
	e.Must(200, "POST", base+"/start", nil, nil)
	e.Must(200, "PATCH", base, J{"locked": true}, &got)
	if !got.Locked {
		t.Fatal("lock not stored")
	}
	for _, a := range []string{"stop", "reset", "restart"} {
		e.MustErr(409, "POST", base+"/"+a, nil, "locked")
	}
	e.MustErr(409, "DELETE", base, nil, "locked")
	e.MustErr(409, "PATCH", base, J{"imageName": "alpine:4"}, "locked")
	e.Must(200, "POST", base+"/start", nil, nil) // starting is allowed
	e.Must(200, "PATCH", base, J{"locked": false, "name": "renamed"}, &got)
	if got.Locked || got.Name != "renamed" {
		t.Errorf("unlock and rename: %+v", got.Pod)
	}
	for _, a := range []string{"start", "stop", "reset", "restart"} {
		e.MustErr(404, "POST", "/v1/pods/nosuchpod00000/"+a, nil, "not found")
	}

	e.Must(204, "DELETE", base, nil, nil)
	if list := instances(e); len(list) != 0 {
		t.Errorf("instances after the pod's deletion: %+v", list)
	}
	e.MustErr(404, "GET", base, nil, "not found")
	e.MustErr(404, "DELETE", base, nil, "not found")
}

func TestPodUpdate(t *testing.T) {
	e := onFake(t)
	p := e.NewPod(J{"imageName": "alpine:3"})
	base := "/v1/pods/" + p.ID
	first := e.PodInstance(p.ID)
	var got apitest.PodJSON
	// Name only: no new container.
	e.Must(200, "PATCH", base, J{"name": "n2"}, &got)
	if in := e.PodInstance(p.ID); got.Version != 1 || in.ID != first.ID || !in.Running {
		t.Errorf("a rename reset the pod (version %d, instance %+v)", got.Version, in)
	}
	// Image change on a running pod: stored, version bumped, a new
	// container of the new image.
	e.Must(200, "POST", base+"/update", J{"imageName": "alpine:4", "env": J{"X": "1"}}, &got)
	if got.Version != 2 || got.ImageName != "alpine:4" || got.Env["X"] != "1" {
		t.Errorf("after update: %+v", got.Pod)
	}
	second := e.PodInstance(p.ID)
	if second.ID == first.ID || !second.Running || second.Image != "alpine:4" || second.Env["X"] != "1" {
		t.Errorf("after update, the instance: %+v, want a new one of alpine:4", second)
	}
	// On a stopped pod the change waits for the next start.
	e.Must(200, "POST", base+"/stop", nil, nil)
	e.Must(200, "PATCH", base, J{"dockerStartCmd": []string{"sleep", "1"}}, &got)
	if in := e.PodInstance(p.ID); got.Version != 3 || in.ID != second.ID || in.Running {
		t.Errorf("a stopped pod was reset (version %d, instance %+v)", got.Version, in)
	}
	// A failed reset: 503, the change is kept and the record says why.
	e.Must(200, "POST", base+"/start", nil, nil)
	e.Fake.FailNext(fake.OpCreate, errors.New("no disk"))
	e.MustErr(503, "PATCH", base, J{"ports": "80/http"}, "no disk", "stored")
	e.Must(200, "GET", base, nil, &got)
	if !reflect.DeepEqual(got.Ports, []string{"80/http"}) || got.Version != 4 || !strings.Contains(got.StatusMessage, "no disk") {
		t.Errorf("after a failed reset: ports %v version %d message %q", got.Ports, got.Version, got.StatusMessage)
	}
	before := e.Must(200, "GET", base, nil, nil)
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
		e.MustErr(400, "PATCH", base, c.body, c.word)
	}
	if after := e.Must(200, "GET", base, nil, nil); string(after) != string(before) {
		t.Errorf("refused updates changed the pod")
	}
	e.MustErr(404, "PATCH", "/v1/pods/nosuchpod00000", J{"name": "x"}, "not found")
}

func TestPodListAndIncludes(t *testing.T) {
	e := onFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events, _ := e.Fake.Events(ctx)
	vol := e.NewVolume("data", 10)
	tpl := e.NewTemplate("t", "alpine:3", nil)
	gpu := e.NewPod(J{"imageName": "alpine:3", "name": "gpu", "networkVolumeId": vol.ID, "gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}})
	cpu := e.NewPod(J{"templateId": tpl.ID, "name": "cpu", "computeType": "CPU", "cpuFlavorIds": []string{"cpu5c"}})
	e.Must(200, "POST", "/v1/pods/"+cpu.ID+"/stop", nil, nil)
	// The endpoint's one warm worker: a container of the runtime (its
	// program never connects, so it stays initializing).
	ep := e.NewEndpoint(tpl.ID, J{"workersMin": 1})
	var wrk string
	for wrk == "" {
		select {
		case ev := <-events:
			if ev.Action == runtime.EventStart && ev.Labels[runtime.LabelEndpoint] == ep.ID {
				wrk = ev.Labels[runtime.LabelWorker]
			}
		case <-ctx.Done():
			t.Fatal("the endpoint's worker never started")
		}
	}
	var env map[string]string
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"/worker-env", nil, &env)

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
		{"?includeWorkers=true&endpointId=" + ep.ID, []string{wrk, env["RUNPOD_POD_ID"]}},
	}
	for _, c := range cases {
		var list []apitest.PodJSON
		e.Must(200, "GET", "/v1/pods"+c.query, nil, &list)
		var got []string
		for _, p := range list {
			got = append(got, p.ID)
		}
		want := c.want
		if len(want) == 2 && want[0] == wrk && want[0] > want[1] {
			want = []string{want[1], want[0]}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("GET /v1/pods%s = %v, want %v", c.query, got, want)
		}
	}
	e.MustErr(400, "GET", "/v1/pods?computeType=TPU", nil, "computeType")
	e.MustErr(400, "GET", "/v1/pods?desiredStatus=PAUSED", nil, "desiredStatus")
	e.MustErr(400, "GET", "/v1/pods?includeMachine=perhaps", nil, "includeMachine")

	var list []apitest.PodJSON
	e.Must(200, "GET", "/v1/pods?includeWorkers=true&id="+wrk, nil, &list)
	if len(list) != 1 || list[0].EndpointID != ep.ID || list[0].State != "initializing" || list[0].ImageName != "alpine:3" {
		t.Errorf("runtime worker in the pod list: %+v", list)
	}

	var p apitest.PodJSON
	e.Must(200, "GET", "/v1/pods/"+gpu.ID+"?includeMachine=true&includeNetworkVolume=true&includeSavingsPlans=true&includeTemplate=true", nil, &p)
	if p.Machine == nil || (*p.Machine)["dataCenterId"] != mgmt.DataCenterID || p.NetworkVolume == nil || p.NetworkVolume.ID != vol.ID ||
		p.SavingsPlans == nil || len(*p.SavingsPlans) != 0 || p.Template != nil {
		t.Errorf("includes on a pod without template: machine %v volume %v plans %v template %v", p.Machine, p.NetworkVolume, p.SavingsPlans, p.Template)
	}
	e.Must(200, "GET", "/v1/pods/"+cpu.ID+"?includeTemplate=true", nil, &p)
	if p.Template == nil || p.Template.ID != tpl.ID || p.Machine != nil || p.NetworkVolume != nil {
		t.Errorf("includeTemplate: %+v", p)
	}
	e.Must(200, "GET", "/v1/pods/"+cpu.ID, nil, &p)
	if p.Template != nil || p.SavingsPlans != nil {
		t.Errorf("includes without flags")
	}
	e.MustErr(404, "GET", "/v1/pods/nosuchpod00000", nil, "not found")
	e.MustErr(400, "GET", "/v1/pods/"+cpu.ID+"?includeTemplate=1x", nil, "includeTemplate")
}
