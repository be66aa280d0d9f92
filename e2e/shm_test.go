package e2e_test

import (
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
