package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/versions"

	"berth/gpu"
	"berth/internal/dockertest"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/store"
)

// cdiFakeGPUPath is where the test CDI spec mounts the fake GPU's file.
const cdiFakeGPUPath = "/dev/berth-fake-gpu"

// TestCDIDeviceReachesWorker: where the daemon has CDI on, a test CDI spec
// stands in for a GPU (kind nvidia.com/gpu, named by a fake UUID); a GPU
// endpoint's worker is pinned to it as a CDI device request, and the job
// sees the device's edits (an env var and a mounted file) inside the
// container.
func TestCDIDeviceReachesWorker(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := docker.Connect(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("docker.Connect: %v", err)
	}
	info := d.Info()
	_ = d.Close()
	// A capability skip, also under BERTH_REQUIRE_DOCKER=1: the daemon
	// answers, it just cannot inject CDI devices.
	if !info.CDIEnabled {
		t.Skipf("Docker Engine %s (API %s) does not have CDI enabled (no CDISpecDirs in Info): "+
			"CDI needs Docker Engine >= 25 with the \"cdi\" feature on (default since 28.2)",
			info.ServerVersion, info.APIVersion)
	}

	uuid := "GPU-berth-test-" + dockertest.Unique("")
	devFile := filepath.Join(t.TempDir(), "fake-gpu")
	if err := os.WriteFile(devFile, []byte(uuid), 0o644); err != nil {
		t.Fatal(err)
	}
	specPath, created := writeCDISpec(t, info.CDISpecDirs, uuid, devFile)
	waitCDIDevice(t, cli, "nvidia.com/gpu="+uuid, specPath, created)

	e := newEnv(t, withGPUs([]gpu.Device{{Index: 0, UUID: uuid, Name: "NVIDIA Test GPU", TypeID: "NVIDIA Test GPU", MemoryMiB: 1024}}))
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) {
		ep.ComputeType, ep.GPUCount, ep.GPUTypeIDs = "GPU", 1, []string{"NVIDIA Test GPU"}
		ep.WorkersMin, ep.WorkersMax, ep.IdleTimeout = 0, 1, 60
	})
	s := e.start()
	if !e.b.Docker().CDIEnabled() {
		t.Fatal("Berth's Docker does not see CDI, the first connection did")
	}

	envJob := e.submit(ep.ID, `{"env": "BERTH_FAKE_GPU"}`)
	fileJob := e.submit(ep.ID, `{"read_file": "`+cdiFakeGPUPath+`"}`)
	for _, id := range []string{envJob, fileJob} {
		if out := jsonString(e.waitCompleted(ep.ID, id)); out != uuid {
			t.Fatalf("job %s output %q, want the injected device %q (status %+v)", id, out, uuid, s.Status(ep.ID))
		}
	}
	r, err := e.q().Status(ep.ID, envJob, 0)
	if err != nil {
		t.Fatal(err)
	}
	workerID := r.WorkerID

	cs := e.running(ep.ID)
	if len(cs) != 1 {
		t.Fatalf("%d running worker containers, want 1", len(cs))
	}
	c := cs[0]
	if !slices.Equal(c.GPUDeviceIDs, []string{uuid}) || c.Labels[runtime.LabelGPUs] != uuid || c.Labels[runtime.LabelWorker] != workerID {
		t.Fatalf("container %+v: want device %s, label %s=%s and worker %s", c, uuid, runtime.LabelGPUs, uuid, workerID)
	}
	// The request went through the CDI driver, not the nvidia one.
	in, err := cli.ContainerInspect(context.Background(), c.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hc := in.Container.HostConfig; hc == nil || len(hc.DeviceRequests) != 1 ||
		hc.DeviceRequests[0].Driver != "cdi" || !slices.Equal(hc.DeviceRequests[0].DeviceIDs, []string{"nvidia.com/gpu=" + uuid}) {
		t.Fatalf("device requests %+v: want one cdi request for nvidia.com/gpu=%s", in.Container.HostConfig, uuid)
	}
	// What GET /v1/gpus shows: the worker holds the GPU.
	snap := e.gpus().Snapshot()
	if len(snap) != 1 || snap[0].UUID != uuid || snap[0].Holder != workerID {
		t.Fatalf("GPU snapshot %+v: want %s held by %s", snap, uuid, workerID)
	}
}

// writeCDISpec writes a CDI spec for one nvidia.com/gpu device named uuid
// into the first CDI spec dir it can write (creating it if needed), and
// removes it when the test ends. The device's edits set BERTH_FAKE_GPU and
// bind-mount devFile at cdiFakeGPUPath. created reports that the dir did not
// exist before.
func writeCDISpec(t *testing.T, dirs []string, uuid, devFile string) (path string, created bool) {
	t.Helper()
	// CDI spec format (tags.cncf.io/container-device-interface SPEC.md);
	// 0.5.0 covers these fields and is accepted by every CDI-capable Docker.
	spec := map[string]any{
		"cdiVersion": "0.5.0",
		"kind":       "nvidia.com/gpu",
		"devices": []any{map[string]any{
			"name": uuid,
			"containerEdits": map[string]any{
				"env": []string{"BERTH_FAKE_GPU=" + uuid},
				"mounts": []any{map[string]any{
					"hostPath":      devFile,
					"containerPath": cdiFakeGPUPath,
					"options":       []string{"ro", "nosuid", "nodev", "bind"},
				}},
			},
		}},
	}
	raw, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	for _, dir := range dirs {
		_, statErr := os.Stat(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		// Written under a name the CDI cache ignores, then renamed, so the
		// daemon's directory watch never reads a half-written spec.
		name := "berth-test-" + uuid
		tmp := filepath.Join(dir, "."+name+".tmp")
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(tmp, raw, 0o644); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
			errs = append(errs, err)
			continue
		}
		t.Cleanup(func() {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("remove CDI spec: %v", err)
			}
		})
		t.Logf("CDI spec %s:\n%s", path, raw)
		return path, errors.Is(statErr, os.ErrNotExist)
	}
	t.Skipf("no writable CDI spec dir among %v (the test writes a spec there, so run it as root on the daemon's host): %v",
		dirs, errors.Join(errs...))
	return "", false
}

// waitCDIDevice waits until the daemon lists the CDI device, on daemons that
// list devices (Info.DiscoveredDevices, API 1.50+, Docker 28.2+). Older ones
// pick the spec up through their directory watch while the worker image is
// built.
func waitCDIDevice(t *testing.T, cli *client.Client, fqdn, specPath string, createdDir bool) {
	t.Helper()
	if versions.LessThan(cli.ClientVersion(), "1.50") {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := cli.Info(context.Background(), client.InfoOptions{})
		if err != nil {
			t.Fatalf("docker info: %v", err)
		}
		for _, dev := range res.Info.DiscoveredDevices {
			if dev.ID == fqdn {
				return
			}
		}
		if time.Now().After(deadline) {
			msg := "the daemon does not list CDI device %s from %s (spec rejected, or the daemon runs on another host); see dockerd's log"
			if createdDir {
				// The CDI cache may not watch a dir that appeared after it started.
				t.Skipf(msg+"; the test created %s, so restart dockerd and run it again", fqdn, specPath, filepath.Dir(specPath))
			}
			t.Fatalf(msg, fqdn, specPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
