package e2e_test

import (
	"fmt"
	"strings"
	"testing"

	"berth/internal/dockertest"
	"berth/store"
)

// TestWorkerSharedMemory runs a real worker container per case and has it
// report the size of its /dev/shm and write to it through a shared
// mapping, as PyTorch's DataLoader workers do (Docker's default 64 MiB
// would be a SIGBUS: the worker dies and the job never completes). The
// size follows runtime.ShmMiB: half the worker's memory (a CPU worker of
// 2 cpu3c vCPUs has 4 GiB: 2 GiB), or the template's shmSizeInMb.
func TestWorkerSharedMemory(t *testing.T) {
	s := newStack(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	const gib = 1 << 30
	for _, c := range []struct {
		name     string
		template map[string]any // template fields beside name and image
		endpoint map[string]any
		wantShm  int64
		write    int64
	}{
		{"default: half of 2 vCPUs x 2 GB", nil, map[string]any{"vcpuCount": 2}, 2 * gib, 1 * gib},
		{"memory flavour: half of 2 vCPUs x 8 GB", nil, map[string]any{"vcpuCount": 2, "cpuFlavorIds": []string{"cpu3m"}}, 8 * gib, 1 * gib},
		{"template's shmSizeInMb", map[string]any{"shmSizeInMb": 1536}, map[string]any{"vcpuCount": 2}, 1536 << 20, 1 * gib},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := map[string]any{"name": dockertest.Unique("shm-"), "imageName": image, "isServerless": true}
			for k, v := range c.template {
				body[k] = v
			}
			var tpl store.Template
			s.call("POST", "/v1/templates", body, 200, &tpl)
			epBody := map[string]any{"templateId": tpl.ID, "computeType": "CPU", "workersMax": 1, "idleTimeout": 5}
			for k, v := range c.endpoint {
				epBody[k] = v
			}
			var ep store.Endpoint
			s.call("POST", "/v1/endpoints", epBody, 200, &ep)
			var done struct {
				Status string
				Output struct{ ShmBytes, WroteBytes int64 }
				Error  string
			}
			s.call("POST", "/v2/"+ep.ID+"/runsync?wait=90000", map[string]any{"input": map[string]any{"shm_write_bytes": c.write}}, 200, &done)
			if done.Status != "COMPLETED" || done.Output.ShmBytes != c.wantShm || done.Output.WroteBytes != c.write {
				t.Fatalf("job: %+v; want /dev/shm of %d bytes and %d bytes written", done, c.wantShm, c.write)
			}
		})
	}
}

// TestPodSharedMemory: a pod's /dev/shm follows the workers' rule —
// half the memory its shape asks for, or its template's shmSizeInMb — and
// a 1 GiB shared write succeeds (the pod prints both to its log, read
// through the API).
func TestPodSharedMemory(t *testing.T) {
	s := newStack(t)
	image := dockertest.BuildGoImage(t, "berth/runtime/testdata/testprog")
	const gib = 1 << 30
	var tpl store.Template
	s.call("POST", "/v1/templates", map[string]any{"name": dockertest.Unique("shm-pod-"), "imageName": image,
		"shmSizeInMb": 1536}, 200, &tpl)
	for _, c := range []struct {
		name    string
		pod     map[string]any
		wantShm int64
	}{
		{"CPU pod, 2 cpu3c vCPUs (4 GB): 2 GiB", map[string]any{"imageName": image, "vcpuCount": 2}, 2 * gib},
		{"CPU pod, 2 cpu3m vCPUs (16 GB): 8 GiB", map[string]any{"imageName": image, "vcpuCount": 2, "cpuFlavorIds": []string{"cpu3m"}}, 8 * gib},
		{"its template's shmSizeInMb", map[string]any{"templateId": tpl.ID}, 1536 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := map[string]any{"name": dockertest.Unique("shm-"), "computeType": "CPU", "dockerStartCmd": []string{"shm"},
				"env": map[string]string{"SHM_WRITE": fmt.Sprint(gib)}}
			for k, v := range c.pod {
				body[k] = v
			}
			var pod struct{ ID string }
			s.call("POST", "/v1/pods", body, 201, &pod)
			want := fmt.Sprintf("shm %d wrote %d", c.wantShm, gib)
			var got []byte
			s.eventually("the pod's log line "+want, func() bool {
				got = s.call("GET", "/v1/pods/"+pod.ID+"/logs", nil, 200, nil)
				return strings.Contains(string(got), "shm ")
			})
			if !strings.Contains(string(got), want) {
				t.Fatalf("pod log %q, want %q", got, want)
			}
			s.call("DELETE", "/v1/pods/"+pod.ID, nil, 204, nil)
		})
	}
}
