package compat

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"berth/internal/dockertest"
)

// What the clients tripped on about pods, through `berth serve` with real
// pod containers (podprog: a program answering on :8888).

const podprog = "berth/e2e/compat/testdata/podprog"

type v1Pod struct {
	ID               string         `json:"id"`
	DesiredStatus    string         `json:"desiredStatus"`
	LastStatusChange string         `json:"lastStatusChange"`
	PortMappings     map[string]int `json:"portMappings"`
	VolumeInGb       int            `json:"volumeInGb"`
	VolumeMountPath  string         `json:"volumeMountPath"`
	Warnings         []string       `json:"warnings"`
	LastExit         *struct {
		ExitCode int    `json:"exitCode"`
		Reason   string `json:"reason"`
	} `json:"lastExit"`
	Machine *struct {
		DataCenterID string `json:"dataCenterId"`
	} `json:"machine"`
}

type v2Pod struct {
	Status       string   `json:"status"`
	DataCenterID string   `json:"dataCenterId"`
	Warnings     []string `json:"warnings"`
	Runtime      *struct{ Uptime int }
	Mounts       struct {
		Persistent *struct{ Path string }
		Network    []struct{ VolumeID, Path string }
	}
	SSH      struct{ Direct *struct{ Port int } }
	LastExit *struct{ ExitCode int }
}

type gqlPod struct {
	ID            string
	DesiredStatus string
	UptimeSeconds int
	Warnings      []string
	Runtime       *struct {
		Ports []struct{ PrivatePort, PublicPort int }
	}
	Machine  struct{ DataCenterId string }
	LastExit *struct {
		ExitCode int
		Reason   string
	}
}

const gqlPodFields = `id desiredStatus uptimeSeconds warnings runtime { ports { privatePort publicPort } } machine { dataCenterId } lastExit { exitCode reason }`

func (s *server) gqlPod(t *testing.T, id string) gqlPod {
	t.Helper()
	r := s.gql(`query($id: String!) { pod(input: {podId: $id}) { `+gqlPodFields+` } }`, map[string]any{"id": id})
	if len(r.Errors) > 0 {
		t.Fatalf("graphql pod: %+v", r.Errors)
	}
	var p gqlPod
	if err := json.Unmarshal(r.Data["pod"], &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPodNetworkVolumeAndDataCentre: a pod created as runpod-python's
// create_pod(name, image, network_volume_id=NV) sends it (a CPU pod with
// the SDK's defaults: volumeMountPath /runpod-volume, no volumeInGb) runs,
// with the network volume mounted at its volumeMountPath in place of the
// pod volume, as RunPod mounts it; the pod is in the volume's data centre
// on every surface, and a pod asked for in a data centre reads that one.
func TestPodNetworkVolumeAndDataCentre(t *testing.T) {
	t.Parallel()
	img := dockertest.BuildGoImage(t, podprog)
	s := startBerth(t)
	var nv struct{ ID string }
	s.rest("POST", "/v1/networkvolumes", map[string]any{"name": "models", "size": 10, "dataCenterId": "EU-RO-1"}, 200, &nv)

	// runpod-python's deployCpuPod document for create_pod(..., network_volume_id=NV,
	// ports="8888/tcp"): data_center_id taken from get_user()'s volumes.
	r := s.gql(`mutation { deployCpuPod(input: { name: "nv-pod", imageName: "`+img+`", cloudType: ALL, startSsh: true, dataCenterId: "EU-RO-1", dockerArgs: "", containerDiskInGb: 10, ports: "8888/tcp", volumeMountPath: "/runpod-volume", templateId: "runpod-ubuntu", networkVolumeId: "`+nv.ID+`" }) { id imageName env machineId machine { podHostId } } }`, nil)
	if len(r.Errors) > 0 {
		t.Fatalf("create_pod with a network volume: %+v", r.Errors)
	}
	var created struct{ ID string }
	json.Unmarshal(r.Data["deployCpuPod"], &created)

	var p v1Pod
	s.rest("GET", "/v1/pods/"+created.ID+"?includeMachine=true", nil, 200, &p)
	if p.DesiredStatus != "RUNNING" || p.VolumeMountPath != "/runpod-volume" || p.VolumeInGb != 0 || p.PortMappings["8888"] == 0 {
		t.Fatalf("v1 pod: %+v", p)
	}
	// The container sees the network volume's directory at /runpod-volume.
	if got := podCommand(t, p.PortMappings["8888"], "write /runpod-volume/hello from-the-pod"); got != "ok" {
		t.Fatalf("write on the volume: %q", got)
	}
	b, err := os.ReadFile(filepath.Join(s.Data, "volumes", nv.ID, "hello"))
	if err != nil || string(b) != "from-the-pod" {
		t.Fatalf("the pod's /runpod-volume is not network volume %s: %q %v", nv.ID, b, err)
	}
	// And no pod volume was made.
	if _, err := os.Stat(filepath.Join(s.Data, "pods", p.ID, "volume")); !os.IsNotExist(err) {
		t.Errorf("a pod volume was made beside the network volume: %v", err)
	}
	// create_pod(…, volume_mount_path="/workspace", network_volume_id=NV)
	// for a GPU pod with a pod volume asked for: the network volume is at
	// /workspace, and there is no pod volume (RunPod mounts it in place of
	// the pod volume).
	var w v1Pod
	s.rest("POST", "/v1/pods", map[string]any{"name": "ws", "imageName": img, "networkVolumeId": nv.ID, "volumeInGb": 10,
		"volumeMountPath": "/workspace", "ports": []string{"8888/tcp"}}, 201, &w)
	if got := podCommand(t, w.PortMappings["8888"], "write /workspace/at-workspace yes"); got != "ok" {
		t.Fatalf("write on /workspace: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(s.Data, "volumes", nv.ID, "at-workspace")); err != nil || string(b) != "yes" {
		t.Errorf("the pod's /workspace is not network volume %s: %q %v", nv.ID, b, err)
	}
	if got := podCommand(t, w.PortMappings["8888"], "ls /runpod-volume"); !strings.Contains(got, "no such file") {
		t.Errorf("/runpod-volume exists in a pod whose volume is at /workspace: %q", got)
	}
	if _, err := os.Stat(filepath.Join(s.Data, "pods", w.ID, "volume")); !os.IsNotExist(err) {
		t.Errorf("a pod volume was made beside the network volume: %v", err)
	}
	if !slices.ContainsFunc(w.Warnings, func(s string) bool { return strings.Contains(s, "volumeInGb: ignored") }) {
		t.Errorf("volumeInGb given with a network volume: no warning in %q", w.Warnings)
	}

	var v2 v2Pod
	s.rest("GET", "/v2/pods/"+p.ID, nil, 200, &v2)
	if len(v2.Mounts.Network) != 1 || v2.Mounts.Network[0].VolumeID != nv.ID || v2.Mounts.Network[0].Path != "/runpod-volume" || v2.Mounts.Persistent != nil {
		t.Errorf("v2 mounts: %+v", v2.Mounts)
	}
	// One data centre everywhere: the volume's.
	g := s.gqlPod(t, p.ID)
	if p.Machine == nil || p.Machine.DataCenterID != "EU-RO-1" || v2.DataCenterID != "EU-RO-1" || g.Machine.DataCenterId != "EU-RO-1" {
		t.Errorf("data centre: v1 machine %+v, v2 %q, graphql %q; want EU-RO-1 everywhere", p.Machine, v2.DataCenterID, g.Machine.DataCenterId)
	}

	// A pod asked for in US-TX-3 (REST v1) reads US-TX-3 on v1, v2 and GraphQL.
	var q v1Pod
	s.rest("POST", "/v1/pods", map[string]any{"name": "dc", "imageName": img, "computeType": "CPU", "dataCenterIds": []string{"US-TX-3"}, "ports": []string{"8888/tcp"}}, 201, &q)
	s.rest("GET", "/v1/pods/"+q.ID+"?includeMachine=true", nil, 200, &q)
	s.rest("GET", "/v2/pods/"+q.ID, nil, 200, &v2)
	g = s.gqlPod(t, q.ID)
	if q.Machine == nil || q.Machine.DataCenterID != "US-TX-3" || v2.DataCenterID != "US-TX-3" || g.Machine.DataCenterId != "US-TX-3" {
		t.Errorf("data centre: v1 machine %+v, v2 %q, graphql %q; want US-TX-3 everywhere", q.Machine, v2.DataCenterID, g.Machine.DataCenterId)
	}
	// The filters find it there.
	var list []struct{ ID string }
	s.rest("GET", "/v1/pods?dataCenterId=US-TX-3", nil, 200, &list)
	if len(list) != 1 || list[0].ID != q.ID {
		t.Errorf("/v1/pods?dataCenterId=US-TX-3: %+v", list)
	}
}

// TestPodStatusFollowsContainer: a pod whose container exits on its own
// reads EXITED with its exit code and reason on v1, v2, GraphQL and the
// CLI; no surface offers its dead ports; starting it again clears the
// exit; an exit while Berth is down is found at start-up.
func TestPodStatusFollowsContainer(t *testing.T) {
	t.Parallel()
	docker := dockertest.Require(t)
	img := dockertest.BuildGoImage(t, podprog)
	s := startBerth(t)
	var p v1Pod
	s.rest("POST", "/v1/pods", map[string]any{"name": "exits", "imageName": img, "computeType": "CPU", "ports": []string{"8888/tcp", "22/tcp"}}, 201, &p)
	if p.DesiredStatus != "RUNNING" || p.PortMappings["8888"] == 0 {
		t.Fatalf("created: %+v", p)
	}
	id := p.ID
	if got := podCommand(t, p.PortMappings["8888"], "exit 3"); got != "bye" {
		t.Fatalf("exit command: %q", got)
	}
	eventually(t, "v1 pod EXITED", func() bool {
		s.rest("GET", "/v1/pods/"+p.ID, nil, 200, &p)
		return p.DesiredStatus == "EXITED"
	})
	if p.LastExit == nil || p.LastExit.ExitCode != 3 || p.LastExit.Reason != "exit code 3" || !strings.Contains(p.LastStatusChange, "exit code 3") || len(p.PortMappings) != 0 {
		t.Errorf("v1 pod after its container exited: %+v (lastExit %+v)", p, p.LastExit)
	}
	var v2 v2Pod
	s.rest("GET", "/v2/pods/"+p.ID, nil, 200, &v2)
	if v2.Status != "EXITED" || v2.Runtime != nil || v2.SSH.Direct != nil || v2.LastExit == nil || v2.LastExit.ExitCode != 3 {
		t.Errorf("v2 pod: %+v", v2)
	}
	g := s.gqlPod(t, p.ID)
	if g.DesiredStatus != "EXITED" || g.Runtime != nil || g.UptimeSeconds != 0 || g.LastExit == nil || g.LastExit.ExitCode != 3 {
		t.Errorf("graphql pod: %+v", g)
	}
	out, errs, code := s.cli("pod", "get", p.ID, "-o", "table")
	if code != 0 || !strings.Contains(out, "EXITED") || !strings.Contains(out, "exit code 3") {
		t.Errorf("berth pod get: exit %d\n%s%s", code, out, errs)
	}

	// Started again: RUNNING, the exit cleared.
	p = v1Pod{}
	s.rest("POST", "/v1/pods/"+id+"/start", nil, 200, &p)
	if p.DesiredStatus != "RUNNING" || p.LastExit != nil || p.PortMappings["8888"] == 0 {
		t.Fatalf("started again: %+v", p)
	}

	// The container ends while Berth is down: found at the next start.
	s.Stop()
	podCommand(t, p.PortMappings["8888"], "exit 4")
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	eventually(t, "the pod's container stopped", func() bool {
		list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("name", "berth-pod-"+id)})
		return err == nil && len(list.Items) == 1 && list.Items[0].State == "exited"
	})
	s.Start()
	eventually(t, "v1 pod EXITED after a restart", func() bool {
		p = v1Pod{}
		s.rest("GET", "/v1/pods/"+id, nil, 200, &p)
		return p.DesiredStatus == "EXITED"
	})
	if p.LastExit == nil || p.LastExit.ExitCode != 4 {
		t.Errorf("after a restart: %+v", p.LastExit)
	}
}

// TestWarningsReachEverySurface: what Berth accepts but cannot honour is
// said on every surface, GraphQL included (the record's warnings field
// and the response's extensions), and in Berth's log.
func TestWarningsReachEverySurface(t *testing.T) {
	t.Parallel()
	img := dockertest.BuildGoImage(t, podprog)
	s := startBerth(t)
	// A GPU pod on this GPU-less host, as runpod-python's create_pod sends it.
	r := s.gql(`mutation { podFindAndDeployOnDemand(input: { name: "gpu", imageName: "`+img+`", cloudType: ALL, startSsh: true, gpuTypeId: "NVIDIA GeForce RTX 4090", supportPublicIp: true, gpuCount: 1, volumeInGb: 0, minVcpuCount: 1, minMemoryInGb: 1, dataCenterId: null, dockerArgs: "", containerDiskInGb: 10, volumeMountPath: "/runpod-volume" }) { id warnings } }`, nil)
	if len(r.Errors) > 0 {
		t.Fatalf("GPU pod: %+v", r.Errors)
	}
	var gp gqlPod
	json.Unmarshal(r.Data["podFindAndDeployOnDemand"], &gp)
	const noGPU = "no GPUs on this machine"
	has := func(ws []string, s string) bool {
		for _, w := range ws {
			if strings.Contains(w, s) {
				return true
			}
		}
		return false
	}
	extWarnings := func(r gqlResponse) []string {
		var ws []string
		b, _ := json.Marshal(r.Extensions["warnings"])
		json.Unmarshal(b, &ws)
		return ws
	}
	ext := extWarnings(r)
	if !has(gp.Warnings, noGPU) || !has(ext, "pod "+gp.ID+": "+noGPU) {
		t.Errorf("graphql: pod warnings %q, extensions %q", gp.Warnings, ext)
	}
	var p v1Pod
	s.rest("GET", "/v1/pods/"+gp.ID, nil, 200, &p)
	var v2 v2Pod
	s.rest("GET", "/v2/pods/"+gp.ID, nil, 200, &v2)
	if !has(p.Warnings, noGPU) || !has(v2.Warnings, noGPU) {
		t.Errorf("v1 warnings %q, v2 warnings %q", p.Warnings, v2.Warnings)
	}
	if out, _, _ := s.cli("pod", "get", gp.ID, "-o", "json"); !strings.Contains(out, noGPU) {
		t.Errorf("berth pod get: %s", out)
	}
	if !strings.Contains(s.Logs.String(), noGPU) {
		t.Errorf("berth's log does not say %q", noGPU)
	}

	// An endpoint with ids Berth does not know (gpuIds "CPU" is no GPU
	// type; MARS-1 no data centre), through saveEndpoint.
	var tpl struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": "w", "imageName": img, "isServerless": true}, 200, &tpl)
	r = s.gql(`mutation { saveEndpoint(input: { name: "e", templateId: "`+tpl.ID+`", gpuIds: "CPU", networkVolumeId: "", locations: "MARS-1", idleTimeout: 5, scalerType: "QUEUE_DELAY", scalerValue: 4, workersMin: 0, workersMax: 0, gpuCount: 1 }) { id warnings } }`, nil)
	if len(r.Errors) > 0 {
		t.Fatalf("saveEndpoint: %+v", r.Errors)
	}
	var ep struct {
		ID       string
		Warnings []string
	}
	json.Unmarshal(r.Data["saveEndpoint"], &ep)
	ext = extWarnings(r)
	for _, w := range []string{`gpuIds: "CPU" is not a GPU type`, `locations: data centre "MARS-1"`} {
		if !has(ep.Warnings, w) || !has(ext, w) {
			t.Errorf("saveEndpoint: %q not in warnings %q / extensions %q", w, ep.Warnings, ext)
		}
	}
	var v1e struct{ Warnings []string }
	s.rest("GET", "/v1/endpoints/"+ep.ID, nil, 200, &v1e)
	if !has(v1e.Warnings, "MARS-1") || !has(v1e.Warnings, `"CPU"`) {
		t.Errorf("v1 endpoint warnings: %q", v1e.Warnings)
	}
}
