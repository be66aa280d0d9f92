package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth/internal/dockertest"
	"berth/runtime"
)

// TestDeployTests is a source holding .runpod/tests.json (RunPod's Hub
// format), through berth serve with real builds and worker containers:
// tests that pass release the build (it goes TESTING, then COMPLETED, and
// the new release answers); a failing test ends the build TEST_FAILED
// naming the test and why, nothing rolls and the old release answers; a
// malformed tests.json fails the build naming the field. No test worker
// is ever left behind, and the built images stay in the daemon.
func TestDeployTests(t *testing.T) {
	base := sdkBaseImage(t)
	s := startBerth(t)
	docker := dockertest.Require(t)
	dir := filepath.Join(t.TempDir(), "tested")
	if _, errOut, code := s.cli("init", dir); code != 0 {
		t.Fatalf("berth init: exit %d: %s", code, errOut)
	}
	var id string
	removeBuiltImages(t, s, &id)
	name := dockertest.Unique("tested-") // its own images: no other test's cleanup removes them
	args := []string{"deploy", dir, "--name", name, "--compute-type", "CPU", "--idle-timeout", "60",
		"--build-arg", "BASE_IMAGE=" + base, "--build-arg", "PIP_INSTALL=no"}
	writeTests := func(tests string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, ".runpod"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".runpod", "tests.json"), []byte(tests), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testWorkers := func() []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range list.Items {
			if strings.HasPrefix(c.Labels[runtime.LabelEndpoint], "test-") && c.Labels[runtime.LabelDataDir] == s.inst {
				out = append(out, c.ID[:12]+" "+string(c.State))
			}
		}
		return out
	}
	greet := func(want string) {
		t.Helper()
		out := s.runsync(t, id, map[string]any{"name": "Berth"})
		var o struct{ Greeting string }
		if json.Unmarshal(out, &o); o.Greeting != want {
			t.Fatalf("runsync output %s, want greeting %q", out, want)
		}
	}

	// Tests that pass: the build is TESTING while they run, then released.
	writeTests(`{"tests": [{"name": "greets", "input": {"name": "Test"}, "timeout": 60000},
	  {"name": "greets-world", "input": {}}],
	 "config": {"cpuFlavor": "cpu3c", "env": [{"key": "TEST_MODE", "value": "1"}], "allowedCudaVersions": ["12.4"]}}`)
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, code := s.cli(append(append([]string{}, args...), "-o", "json")...)
		done <- result{out, errOut, code}
	}()
	var res result
	sawTesting := false
	deadline := time.Now().Add(15 * time.Minute)
wait:
	for time.Now().Before(deadline) {
		select {
		case res = <-done:
			break wait
		case <-time.After(100 * time.Millisecond): // polling the build's status while deploy runs
		}
		if id == "" {
			var eps []struct{ ID, Name string }
			s.rest("GET", "/v1/endpoints", nil, 200, &eps)
			for _, e := range eps {
				if e.Name == name {
					id = e.ID
				}
			}
			continue
		}
		if bs := s.builds(t, id); len(bs) > 0 && bs[0].Status == "TESTING" {
			sawTesting = true
		}
	}
	if res.code != 0 {
		t.Fatalf("berth deploy with passing tests: exit %d\n%s\n%s", res.code, res.out, res.errOut)
	}
	var ep map[string]any
	if err := json.Unmarshal([]byte(res.out), &ep); err != nil || ep["id"] != id {
		t.Fatalf("berth deploy -o json: %v %s (endpoint %q)", err, res.out, id)
	}
	if !sawTesting {
		t.Errorf("the build was never seen TESTING")
	}
	bs := s.builds(t, id)
	if len(bs) != 1 || bs[0].Status != "COMPLETED" || bs[0].ReleaseVersion == nil {
		t.Fatalf("builds after passing tests: %+v", bs)
	}
	first := bs[0]
	code, log := s.do("GET", "/v2/serverless/"+id+"/builds/"+first.ID+"/logs?follow=false", nil)
	for _, want := range []string{`test \"greets\" passed`, `test \"greets-world\" passed`, "all 2 tests passed", "the test worker is removed"} {
		if code != 200 || !bytes.Contains(log, []byte(want)) {
			t.Errorf("the build's log lacks %q: %d %.3000s", want, code, log)
		}
	}
	greet("Hello, Berth!")
	if w := testWorkers(); len(w) != 0 {
		t.Errorf("test workers left after the tests passed: %v", w)
	}

	// A failing test: TEST_FAILED naming it and why; the old release serves.
	h := filepath.Join(dir, "handler.py")
	src, _ := os.ReadFile(h)
	changed := bytes.Replace(src, []byte(`    name = job["input"].get("name", "world")`),
		[]byte("    if job[\"input\"].get(\"fail\"):\n        raise ValueError(\"asked to fail\")\n    name = job[\"input\"].get(\"name\", \"world\")"), 1)
	changed = bytes.Replace(changed, []byte(`f"Hello, {name}!"`), []byte(`f"Hi, {name}!"`), 1)
	if bytes.Equal(changed, src) {
		t.Fatal("the handler's lines moved: the test cannot change them")
	}
	os.WriteFile(h, changed, 0o644)
	writeTests(`{"tests": [{"name": "greets", "input": {"name": "Test"}}, {"name": "must-not-fail", "input": {"fail": true}, "timeout": 60000}]}`)
	_, errOut, code := s.cli(args...)
	if code != 1 || !strings.Contains(errOut, "TEST_FAILED") || !strings.Contains(errOut, `test "must-not-fail" failed`) {
		t.Fatalf("berth deploy with a failing test: exit %d, want 1 saying TEST_FAILED and the test\n%s", code, errOut)
	}
	bs = s.builds(t, id)
	if bs[0].Status != "TEST_FAILED" || bs[0].Error == nil || !strings.Contains(*bs[0].Error, `test "must-not-fail" failed: the job ended FAILED`) ||
		!strings.Contains(*bs[0].Error, "asked to fail") || bs[0].ReleaseVersion != nil {
		t.Fatalf("the build with a failing test: %+v (error %v)", bs[0], deref(bs[0].Error))
	}
	if w := testWorkers(); len(w) != 0 {
		t.Errorf("test workers left after a failed test: %v", w)
	}
	greet("Hello, Berth!")

	// A malformed tests.json: FAILED naming the file and the field, before
	// anything is built.
	writeTests(`{"tests": [{"name": "greets", "input": {"name": "Test"}, "timeout": "soon"}]}`)
	_, errOut, code = s.cli(args...)
	bs = s.builds(t, id)
	if code != 1 || bs[0].Status != "FAILED" || bs[0].Error == nil || !strings.Contains(*bs[0].Error, ".runpod/tests.json: tests[0].timeout: want an integer") {
		t.Fatalf("a malformed tests.json: exit %d, build %+v (error %v)\n%s", code, bs[0], deref(bs[0].Error), errOut)
	}
	greet("Hello, Berth!")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := docker.ImageInspect(ctx, first.ImageName); err != nil {
		t.Errorf("the released image %s: %v", first.ImageName, err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestDeployHubDefaults is .runpod/hub.json's config through berth serve:
// the endpoint deploy makes takes its settings where the command gives
// none (a CPU endpoint, its flavour, the template's disk, env reaching the
// worker), and the flags given win over it.
func TestDeployHubDefaults(t *testing.T) {
	base := sdkBaseImage(t)
	s := startBerth(t)
	dir := filepath.Join(t.TempDir(), "hub")
	if _, errOut, code := s.cli("init", dir); code != 0 {
		t.Fatalf("berth init: exit %d: %s", code, errOut)
	}
	h := filepath.Join(dir, "handler.py")
	src, _ := os.ReadFile(h)
	changed := bytes.Replace(src, []byte(`    return {"greeting": f"Hello, {name}!"}`),
		[]byte(`    import os
    return {"greeting": f"Hello, {name}!", "hubVar": os.environ.get("HUB_VAR", "")}`), 1)
	if bytes.Equal(changed, src) {
		t.Fatal("the handler's lines moved: the test cannot change them")
	}
	os.WriteFile(h, changed, 0o644)
	os.MkdirAll(filepath.Join(dir, ".runpod"), 0o755)
	os.WriteFile(filepath.Join(dir, ".runpod", "hub.json"), []byte(`{"title": "hub test", "type": "serverless", "category": "language",
	  "config": {"runsOn": "CPU", "containerDiskInGb": 7, "cpuFlavor": "cpu5c",
	  "env": [{"key": "HUB_VAR", "input": {"name": "v", "type": "string", "default": "from-hub"}}]}}`), 0o644)

	for _, c := range []struct {
		name                    string
		flags                   []string
		computeType, flavor, hv string
		applied                 string
	}{
		{name: "defaults", flags: nil, computeType: "CPU", flavor: "cpu5c", hv: "from-hub", applied: "computeType cpuFlavorIds env containerDiskInGb"},
		{name: "flags win", flags: []string{"--compute-type", "CPU", "--cpu-flavor-ids", "cpu3g", "--env", "HUB_VAR=from-flag"},
			computeType: "CPU", flavor: "cpu3g", hv: "from-flag", applied: "containerDiskInGb"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var id string
			removeBuiltImages(t, s, &id)
			name := dockertest.Unique("hub-")
			args := append([]string{"deploy", dir, "--name", name, "--idle-timeout", "60", "-o", "json",
				"--build-arg", "BASE_IMAGE=" + base, "--build-arg", "PIP_INSTALL=no"}, c.flags...)
			out, errOut, code := s.cli(args...)
			if code != 0 {
				t.Fatalf("berth deploy: exit %d\n%s\n%s", code, out, errOut)
			}
			var ep struct {
				ID, ComputeType, TemplateID string
				CPUFlavorIDs                []string `json:"cpuFlavorIds"`
				Env                         map[string]string
			}
			if err := json.Unmarshal([]byte(out), &ep); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			id = ep.ID
			s.rest("GET", "/v1/endpoints/"+id, nil, 200, &ep)
			var tpl struct{ ContainerDiskInGb int }
			s.rest("GET", "/v1/templates/"+ep.TemplateID, nil, 200, &tpl)
			if ep.ComputeType != c.computeType || len(ep.CPUFlavorIDs) != 1 || ep.CPUFlavorIDs[0] != c.flavor || ep.Env["HUB_VAR"] != c.hv || tpl.ContainerDiskInGb != 7 {
				t.Errorf("endpoint %+v, template disk %d: want %s %s HUB_VAR=%s disk 7", ep, tpl.ContainerDiskInGb, c.computeType, c.flavor, c.hv)
			}
			var bd struct{ HubApplied []string }
			bs := s.builds(t, id)
			s.rest("GET", "/v2/serverless/"+id+"/builds/"+bs[0].ID, nil, 200, &bd)
			if got := strings.Join(bd.HubApplied, " "); got != c.applied {
				t.Errorf("hubApplied %q, want %q", got, c.applied)
			}
			var o struct{ Greeting, HubVar string }
			if json.Unmarshal(s.runsync(t, id, map[string]any{"name": "Hub"}), &o); o.HubVar != c.hv || o.Greeting != "Hello, Hub!" {
				t.Errorf("the worker's answer %+v: want HUB_VAR %s", o, c.hv)
			}
		})
	}
}
