package graphqlapi_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"berth/gpu"
	"berth/mgmt"
	"berth/runtime"
	"berth/store"
)

// podGPUs are the host's GPUs of the pod tests: one RTX 4090 and one A40.
var podGPUs = []gpu.Device{
	{Index: 0, UUID: "GPU-4090", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564},
	{Index: 1, UUID: "GPU-A40", Name: "NVIDIA A40", TypeID: "NVIDIA A40", MemoryMiB: 46068},
}

// instance is pod id's instance on the fake backend; none fails the test.
func (e *env) instance(id string) runtime.Instance {
	e.t.Helper()
	in, ok := e.fake.Pod(id)
	if !ok {
		e.t.Fatalf("pod %s has no instance on the backend", id)
	}
	return in
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
	e := newEnv(t, withFake(podGPUs, "berth/dev:1", "alpine:3", "x:1"), withPrices(t, mgmt.Prices{GPUHourly: map[string]float64{"NVIDIA GeForce RTX 4090": 0.5}, VCPUHourly: 0.01}))

	// runpod.create_pod(name, image, "NVIDIA GeForce RTX 4090", ports=..., env=...)
	var p pyPod
	e.python(fixture(t, "runpod-python/create_gpu_pod.graphql", "name", "dev", "image", "berth/dev:1", "cloudType", "ALL", "gpuTypeId", "NVIDIA GeForce RTX 4090")).ok(t, "podFindAndDeployOnDemand", &p)
	host, _ := os.Hostname()
	want := pyPod{ID: p.ID, ImageName: "berth/dev:1", Env: []string{"A=1", "B=two words"}, MachineID: host}
	want.Machine.PodHostID = p.ID
	if len(p.ID) != 14 || !reflect.DeepEqual(p, want) {
		t.Errorf("podFindAndDeployOnDemand:\n got %+v\nwant %+v", p, want)
	}
	if in := e.instance(p.ID); !in.Running || in.Image != "berth/dev:1" || !reflect.DeepEqual(in.GPUs, []string{"GPU-4090"}) {
		t.Errorf("the pod's instance: running %v, image %s, GPUs %v; want berth/dev:1 running on the 4090", in.Running, in.Image, in.GPUs)
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
	if full.DesiredStatus != "RUNNING" || full.CostPerHr != 0.51 || full.GpuCount != 1 || full.MemoryInGb <= 0 || full.Ports != "8888/http,22/tcp" ||
		full.PodType != "RESERVED" || full.DockerArgs != "" || full.Runtime == nil || len(full.Runtime.Ports) != 2 ||
		full.Machine.GpuDisplayName == nil || *full.Machine.GpuDisplayName != "RTX 4090" || !strings.HasPrefix(full.LastStatusChange, "Created by user") {
		t.Errorf("get_pod: %+v", full)
	}
	// The port as the backend published it, on the pod's public address.
	published := e.instance(p.ID).PublicPorts["8888/tcp"]
	if rp := full.Runtime.Ports[0]; rp.IP == "" || rp.IP != v1.PublicIP || !rp.IsIPPublic || rp.PrivatePort != 8888 || rp.PublicPort != published || rp.Type != "http" {
		t.Errorf("runtime port: %+v, want 8888 published as %d on %q", rp, published, v1.PublicIP)
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
	if in := e.instance(p.ID); in.Running {
		t.Errorf("a stopped pod's instance still runs: %+v", in)
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
	if _, ok := e.fake.Pod(cpu.ID); ok {
		t.Errorf("a terminated pod's instance is still on the backend")
	}

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
	// The 4090 is the running pod's: none is free.
	e.python(fixture(t, "runpod-python/create_gpu_pod.graphql", "name", "big", "image", "x:1", "cloudType", "SECURE", "gpuTypeId", "NVIDIA GeForce RTX 4090")).
		refused(t, "podFindAndDeployOnDemand", "free GPUs")
	if n := e.count(store.Pods); n != before {
		t.Errorf("refused pods left %d records, want %d", n, before)
	}
}
