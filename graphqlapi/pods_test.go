package graphqlapi_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/mgmt"
	"berth/store"
)

// fakePods stands in for the Docker runtime's pods (the runtime's own
// tests run real pod containers); it records what it was asked.
type fakePods struct {
	mu    sync.Mutex
	calls []string
	full  bool // no free GPU: StartPod fails with ErrPodCapacity
}

var podStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (f *fakePods) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakePods) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *fakePods) StartPod(_ context.Context, p store.Pod) (mgmt.PodState, error) {
	f.record(fmt.Sprintf("start %s %s %v %v", p.ComputeType, p.ImageName, p.DockerStartCmd, p.GPUTypeIDs))
	f.mu.Lock()
	full := f.full
	f.mu.Unlock()
	if full && p.ComputeType == "GPU" {
		return mgmt.PodState{}, fmt.Errorf("%w: 0 of 1 free", mgmt.ErrPodCapacity)
	}
	st := mgmt.PodState{PortMappings: map[string]int{}, PublicIP: "192.0.2.7", MemoryInGb: 15.6, MachineID: "host1", StartedAt: podStart}
	for i, port := range p.Ports {
		st.PortMappings[strings.Split(port, "/")[0]] = 41000 + i
	}
	if p.ComputeType == "GPU" {
		st.GPU = &store.PodGPU{ID: "NVIDIA GeForce RTX 4090", Count: p.GPUCount, DisplayName: "RTX 4090"}
	}
	return st, nil
}

func (f *fakePods) StopPod(_ context.Context, id string) error { f.record("stop " + id); return nil }
func (f *fakePods) ResetPod(ctx context.Context, p store.Pod) (mgmt.PodState, error) {
	return f.StartPod(ctx, p)
}
func (f *fakePods) RemovePod(_ context.Context, id string) error {
	f.record("remove " + id)
	return nil
}

type pyPod struct {
	ID, ImageName string
	Env           []string
	MachineID     string
	Machine       struct{ PodHostID string }
}

type pyPodFull struct {
	ID                string
	ContainerDiskInGb int
	CostPerHr         float64
	DesiredStatus     string
	DockerArgs        string
	DockerID          *string
	Env               []string
	GpuCount          int
	ImageName         string
	LastStatusChange  string
	MachineID         string
	MemoryInGb        int
	Name              string
	PodType           string
	Port              *int
	Ports             string
	UptimeSeconds     int
	VcpuCount         int
	VolumeInGb        int
	VolumeMountPath   string
	Runtime           *struct {
		Ports []struct {
			IP                      string
			IsIPPublic              bool
			PrivatePort, PublicPort int
			Type                    string
		}
	}
	Machine struct{ GpuDisplayName *string }
}

func TestPythonPods(t *testing.T) {
	f := &fakePods{}
	e := newEnv(t, withPods(f), withPrices(t, mgmt.Prices{GPUHourly: map[string]float64{"NVIDIA GeForce RTX 4090": 0.5}, VCPUHourly: 0.01}))

	// runpod.create_pod(name, image, "NVIDIA GeForce RTX 4090", ports=..., env=...)
	var p pyPod
	e.python(fixture(t, "runpod-python/create_gpu_pod.graphql", "name", "dev", "image", "berth/dev:1", "cloudType", "ALL", "gpuTypeId", "NVIDIA GeForce RTX 4090")).ok(t, "podFindAndDeployOnDemand", &p)
	want := pyPod{ID: p.ID, ImageName: "berth/dev:1", Env: []string{"A=1", "B=two words"}, MachineID: "host1"}
	want.Machine.PodHostID = p.ID
	if len(p.ID) != 14 || !reflect.DeepEqual(p, want) {
		t.Errorf("podFindAndDeployOnDemand:\n got %+v\nwant %+v", p, want)
	}
	if c := f.takeCalls(); !reflect.DeepEqual(c, []string{"start GPU berth/dev:1 [] [NVIDIA GeForce RTX 4090]"}) {
		t.Errorf("runtime calls: %q", c)
	}
	var v1 store.Pod
	e.rest("GET", "/v1/pods/"+p.ID, nil, 200, &v1)
	if v1.Name != "dev" || v1.CloudType != "SECURE" || v1.GPUCount != 1 || v1.VolumeInGb != 0 || v1.ContainerDiskInGb != 10 ||
		v1.VCPUCount != 1 || v1.VolumeMountPath != "/runpod-volume" || !reflect.DeepEqual(v1.Ports, []string{"8888/http", "22/tcp"}) || !v1.SupportPublicIP {
		t.Errorf("/v1 pod: %+v", v1)
	}

	// runpod.get_pod(id) and get_pods()
	var full pyPodFull
	e.python(fixture(t, "runpod-python/get_pod.graphql", "podId", p.ID)).ok(t, "pod", &full)
	if full.DesiredStatus != "RUNNING" || full.CostPerHr != 0.51 || full.GpuCount != 1 || full.MemoryInGb != 16 || full.Ports != "8888/http,22/tcp" ||
		full.PodType != "RESERVED" || full.DockerArgs != "" || full.Runtime == nil || len(full.Runtime.Ports) != 2 ||
		full.Machine.GpuDisplayName == nil || *full.Machine.GpuDisplayName != "RTX 4090" || !strings.HasPrefix(full.LastStatusChange, "Created by user") {
		t.Errorf("get_pod: %+v", full)
	}
	if rp := full.Runtime.Ports[0]; rp.IP != "192.0.2.7" || !rp.IsIPPublic || rp.PrivatePort != 8888 || rp.PublicPort != 41000 || rp.Type != "http" {
		t.Errorf("runtime port: %+v", rp)
	}
	var my struct{ Pods []pyPodFull }
	e.python(fixture(t, "runpod-python/get_pods.graphql")).ok(t, "myself", &my)
	if len(my.Pods) != 1 || my.Pods[0].ID != p.ID {
		t.Errorf("get_pods: %+v", my)
	}

	// stop_pod, resume_pod, terminate_pod.
	var st struct{ ID, DesiredStatus string }
	e.python(fixture(t, "runpod-python/stop_pod.graphql", "podId", p.ID)).ok(t, "podStop", &st)
	if st.DesiredStatus != "EXITED" {
		t.Errorf("podStop: %+v", st)
	}
	e.python(fixture(t, "runpod-python/get_pod.graphql", "podId", p.ID)).ok(t, "pod", &full)
	if full.Runtime != nil || full.UptimeSeconds != 0 {
		t.Errorf("stopped pod shows a runtime: %+v", full.Runtime)
	}
	e.python(fixture(t, "runpod-python/resume_pod.graphql", "podId", p.ID, "gpuCount", "2")).refused(t, "podResume", "gpuCount")
	var res struct {
		ID, DesiredStatus string
		Env               []string
	}
	e.python(fixture(t, "runpod-python/resume_pod.graphql", "podId", p.ID, "gpuCount", "1")).ok(t, "podResume", &res)
	if res.DesiredStatus != "RUNNING" || len(res.Env) != 2 {
		t.Errorf("podResume: %+v", res)
	}

	// create_pod without a GPU type: deployCpuPod with the SDK's default
	// template id "runpod-ubuntu" and an instance id.
	var cpu pyPod
	e.python(fixture(t, "runpod-python/create_cpu_pod.graphql", "name", "cpu", "image", "alpine:3")).ok(t, "deployCpuPod", &cpu)
	e.rest("GET", "/v1/pods/"+cpu.ID, nil, 200, &v1)
	if v1.ComputeType != "CPU" || v1.VCPUCount != 2 || !reflect.DeepEqual(v1.CPUFlavorIDs, []string{"cpu3c"}) || v1.TemplateID != "" || v1.ImageName != "alpine:3" {
		t.Errorf("deployCpuPod: %+v", v1)
	}

	var gone bool
	e.python(fixture(t, "runpod-python/terminate_pod.graphql", "podId", cpu.ID)).ok(t, "podTerminate", &gone)
	e.rest("GET", "/v1/pods/"+cpu.ID, nil, 404, nil)
	f.takeCalls()

	// cloudType COMMUNITY is recorded, as on every surface.
	var comm pyPod
	e.python(fixture(t, "runpod-python/create_gpu_pod.graphql", "name", "c", "image", "x:1", "cloudType", "COMMUNITY", "gpuTypeId", "NVIDIA A40")).
		ok(t, "podFindAndDeployOnDemand", &comm)
	var commV1 struct{ CloudType string }
	e.rest("GET", "/v1/pods/"+comm.ID, nil, 200, &commV1)
	if commV1.CloudType != "COMMUNITY" {
		t.Errorf("cloudType COMMUNITY read back as %q", commV1.CloudType)
	}
	e.rest("DELETE", "/v1/pods/"+comm.ID, nil, 204, nil)
	f.takeCalls()

	// Refusals: nothing stored, nothing started.
	before := e.count(store.Pods)
	e.python(strings.Replace(fixture(t, "runpod-python/create_cpu_pod.graphql", "name", "c", "image", "alpine:3"), `"cpu3c-2-4"`, `"gpu9-2-4"`, 1)).
		refused(t, "deployCpuPod", "instanceId")
	e.python(strings.Replace(fixture(t, "runpod-python/create_cpu_pod.graphql", "name", "c", "image", ""), `imageName: ""`, `imageName: ""`, 1)).
		refused(t, "deployCpuPod", "runpod-ubuntu")
	e.python(`mutation { podFindAndDeployOnDemand(input: {name: "d", imageName: "x:1", gpuTypeId: "NVIDIA A40", dataCenterId: "nowhere"}) { id } }`).
		refused(t, "podFindAndDeployOnDemand", "dataCenterId", "nowhere")
	e.python(`mutation { podFindAndDeployOnDemand(input: {name: "s", imageName: "x:1", gpuTypeId: "NVIDIA A40", stopAfter: "2026-01-01T00:00:00Z"}) { id } }`).
		refused(t, "podFindAndDeployOnDemand", "stopAfter")
	f.mu.Lock()
	f.full = true
	f.mu.Unlock()
	e.python(fixture(t, "runpod-python/create_gpu_pod.graphql", "name", "big", "image", "x:1", "cloudType", "SECURE", "gpuTypeId", "NVIDIA GeForce RTX 4090")).
		refused(t, "podFindAndDeployOnDemand", "free GPUs")
	if n := e.count(store.Pods); n != before {
		t.Errorf("refused pods left %d records, want %d", n, before)
	}
}
