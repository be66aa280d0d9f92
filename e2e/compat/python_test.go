package compat

import (
	"slices"
	"testing"

	"berth/internal/dockertest"
)

// runpod-python 1.12.0 against `berth serve`, run for real with Debian's
// python3 (see internal/clientkit).

// TestRunpodPythonClientOnHost: runpod.Endpoint and AsyncioEndpoint
// against an endpoint whose worker is a handler written with
// runpod.serverless.start, running on the host with the identity
// `berth worker-env` prints (the endpoint itself starts no container).
func TestRunpodPythonClientOnHost(t *testing.T) {
	t.Parallel()
	s := startBerth(t)
	var tpl, ep struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": "host-worker", "imageName": "berth-test/not-pulled:1", "isServerless": true}, 200, &tpl)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "host", "templateId": tpl.ID, "workersMin": 0, "workersMax": 0}, 200, &ep)
	hostWorker(t, s, ep.ID)
	checks := runSDKScript(t, s, nil, "testdata/sdk_client.py", ep.ID)
	if len(checks) < 14 {
		t.Errorf("only %d client checks ran", len(checks))
	}
}

// TestRunpodPythonClientInContainer: the same client calls against an
// endpoint whose worker Berth launches in a container: Debian's python3
// and packages, the SDK copied in, the same handler.
func TestRunpodPythonClientInContainer(t *testing.T) {
	t.Parallel()
	img := sdkImage(t)
	s := startBerth(t)
	var tpl, ep struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": "sdk-worker", "imageName": img, "isServerless": true}, 200, &tpl)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "container", "templateId": tpl.ID, "computeType": "CPU",
		"workersMin": 1, "workersMax": 1, "idleTimeout": 60}, 200, &ep)
	checks := runSDKScript(t, s, nil, "testdata/sdk_client.py", ep.ID)
	if len(checks) < 14 {
		t.Errorf("only %d client checks ran", len(checks))
	}
}

// clientSuite are runpod-python's exports the client tests above call.
var clientSuite = []string{"AsyncioEndpoint", "AsyncioJob", "Endpoint"}

// TestRunpodPythonManagement: every management function runpod-python
// exports, called as a provisioning script calls them, with pods in real
// containers; the script lists what runpod exports, and every export must
// be called here or by the client tests.
func TestRunpodPythonManagement(t *testing.T) {
	t.Parallel()
	img := dockertest.BuildGoImage(t, podprog)
	s := startBerth(t)
	var nv struct{ ID, DataCenterID string }
	s.rest("POST", "/v1/networkvolumes", map[string]any{"name": "sdk-volume", "size": 10, "dataCenterId": "EU-RO-1"}, 200, &nv)
	checks := runSDKScript(t, s, map[string]string{"IMAGE": img, "VOLUME": nv.ID, "VOLUME_DC": "EU-RO-1"}, "testdata/sdk_management.py")
	var exported, called []string
	for _, c := range checks {
		if c.Exported != nil {
			exported, called = c.Exported, c.Called
		}
	}
	if len(exported) < 20 {
		t.Fatalf("runpod exports only %d callables? %v", len(exported), exported)
	}
	for _, name := range exported {
		if !slices.Contains(called, name) && !slices.Contains(clientSuite, name) {
			t.Errorf("runpod.%s is exported but no test calls it: add it to testdata/sdk_management.py (or the client suite)", name)
		}
	}
	t.Logf("%d checks; runpod exports %d callables: %v", len(checks), len(exported), exported)
}
