package mgmt_test

import (
	"strings"
	"testing"
	"time"

	"berth/mgmt"
	"berth/store"
)

func TestParseTests(t *testing.T) {
	many := `{"tests": [` + strings.Repeat(`{"name": "x", "input": {}},`, mgmt.MaxBuildTests) + `{"name": "y", "input": {}}]}`
	for _, c := range []struct {
		name, in string
		err      string // "" valid
		check    func(t *testing.T, bt mgmt.BuildTests)
	}{
		{name: "RunPod's template", in: `{"tests": [{"name": "test_case_name", "input": {"param1": "value1"}, "timeout": 10000}],
		  "config": {"gpuTypeId": "NVIDIA GeForce RTX 4090", "gpuCount": 1, "env": [{"key": "TEST_ENV_VAR", "value": "test_value"}],
		  "allowedCudaVersions": ["12.7", "12.6"]}}`, check: func(t *testing.T, bt mgmt.BuildTests) {
			if len(bt.Tests) != 1 || bt.Tests[0].Name != "test_case_name" || bt.Tests[0].Timeout != 10*time.Second ||
				string(bt.Tests[0].Input) != `{"param1": "value1"}` || bt.Config.GPUTypeID != "NVIDIA GeForce RTX 4090" ||
				bt.Config.GPUCount != 1 || bt.Config.Env["TEST_ENV_VAR"] != "test_value" || len(bt.Config.AllowedCudaVersions) != 2 {
				t.Errorf("parsed %+v", bt)
			}
		}},
		{name: "default timeout, cpu, unknown fields ignored", in: `{"tests": [{"name": "a", "input": {}, "extra": 1}], "config": {"cpuFlavor": "cpu3c"}, "more": true}`,
			check: func(t *testing.T, bt mgmt.BuildTests) {
				if bt.Tests[0].Timeout != mgmt.DefaultTestTimeout || bt.Config.CPUFlavor != "cpu3c" {
					t.Errorf("parsed %+v", bt)
				}
			}},
		{name: "env numbers and booleans as written", in: `{"tests": [{"name": "a", "input": {}}], "config": {"env": [{"key": "N", "value": 3}, {"key": "B", "value": true}]}}`,
			check: func(t *testing.T, bt mgmt.BuildTests) {
				if bt.Config.Env["N"] != "3" || bt.Config.Env["B"] != "true" {
					t.Errorf("env %v", bt.Config.Env)
				}
			}},
		{name: "not JSON", in: `{"tests": [`, err: ".runpod/tests.json: not valid JSON"},
		{name: "not an object", in: `[1]`, err: ".runpod/tests.json: want an object"},
		{name: "no tests", in: `{"config": {}}`, err: ".runpod/tests.json: tests: required"},
		{name: "empty tests", in: `{"tests": []}`, err: ".runpod/tests.json: tests: no test"},
		{name: "tests not an array", in: `{"tests": {}}`, err: ".runpod/tests.json: tests: want an array"},
		{name: "too many", in: many, err: ".runpod/tests.json: tests: 33 tests: at most 32"},
		{name: "no name", in: `{"tests": [{"input": {}}]}`, err: ".runpod/tests.json: tests[0].name: required"},
		{name: "name not a string", in: `{"tests": [{"name": 5, "input": {}}]}`, err: ".runpod/tests.json: tests[0].name: want a string"},
		{name: "twice the same name", in: `{"tests": [{"name": "a", "input": {}}, {"name": "a", "input": {}}]}`, err: ".runpod/tests.json: tests[1].name: \"a\" is the name of an earlier test"},
		{name: "no input", in: `{"tests": [{"name": "a"}]}`, err: ".runpod/tests.json: tests[0].input: required"},
		{name: "input not an object", in: `{"tests": [{"name": "a", "input": "hi"}]}`, err: ".runpod/tests.json: tests[0].input: required: the job's input, an object"},
		{name: "input too large", in: `{"tests": [{"name": "a", "input": {"x": "` + strings.Repeat("a", mgmt.MaxTestInputBytes) + `"}}]}`, err: ".runpod/tests.json: tests[0].input: over 256 KiB"},
		{name: "timeout a string", in: `{"tests": [{"name": "a", "input": {}, "timeout": "soon"}]}`, err: ".runpod/tests.json: tests[0].timeout: want an integer"},
		{name: "timeout zero", in: `{"tests": [{"name": "a", "input": {}, "timeout": 0}]}`, err: ".runpod/tests.json: tests[0].timeout: 0 is out of range"},
		{name: "timeout over the cap", in: `{"tests": [{"name": "a", "input": {}, "timeout": 1800001}]}`, err: ".runpod/tests.json: tests[0].timeout: 1800001 is out of range (1 to 1800000)"},
		{name: "config not an object", in: `{"tests": [{"name": "a", "input": {}}], "config": 3}`, err: ".runpod/tests.json: config: want an object"},
		{name: "gpu type not a string", in: `{"tests": [{"name": "a", "input": {}}], "config": {"gpuTypeId": 4090}}`, err: ".runpod/tests.json: config.gpuTypeId: want a string"},
		{name: "gpuCount", in: `{"tests": [{"name": "a", "input": {}}], "config": {"gpuCount": 0}}`, err: ".runpod/tests.json: config.gpuCount: 0 is out of range"},
		{name: "unknown cpu flavour", in: `{"tests": [{"name": "a", "input": {}}], "config": {"cpuFlavor": "cpu9z"}}`, err: ".runpod/tests.json: config.cpuFlavor"},
		{name: "gpu and cpu", in: `{"tests": [{"name": "a", "input": {}}], "config": {"gpuTypeId": "NVIDIA GeForce RTX 4090", "cpuFlavor": "cpu3c"}}`, err: ".runpod/tests.json: config: gpuTypeId and cpuFlavor"},
		{name: "env not a list", in: `{"tests": [{"name": "a", "input": {}}], "config": {"env": {"A": "b"}}}`, err: ".runpod/tests.json: config.env: want an array"},
		{name: "env without key", in: `{"tests": [{"name": "a", "input": {}}], "config": {"env": [{"value": "b"}]}}`, err: ".runpod/tests.json: config.env[0].key: required"},
		{name: "env value an object", in: `{"tests": [{"name": "a", "input": {}}], "config": {"env": [{"key": "A", "value": {}}]}}`, err: ".runpod/tests.json: config.env[0].value: want a string"},
		{name: "cuda versions", in: `{"tests": [{"name": "a", "input": {}}], "config": {"allowedCudaVersions": "12.4"}}`, err: ".runpod/tests.json: config.allowedCudaVersions: want an array of strings"},
		{name: "file too large", in: `{"tests": [], "pad": "` + strings.Repeat("a", mgmt.MaxHubFileBytes) + `"}`, err: ".runpod/tests.json: over 1024 KiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bt, err := mgmt.ParseTests([]byte(c.in))
			checkParsed(t, bt, err, c.err, c.check)
		})
	}
}

// checkParsed is the one table rule of a hub file's parser: want "" is
// accepted and checked, otherwise refused as Invalid naming want.
func checkParsed[T any](t *testing.T, got T, err error, want string, check func(*testing.T, T)) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && err == nil:
		t.Fatalf("accepted, want %q", want)
	case want != "":
		if !strings.Contains(err.Error(), want) || mgmt.KindOf(err) != mgmt.Invalid {
			t.Fatalf("error %q (%v), want Invalid containing %q", err, mgmt.KindOf(err), want)
		}
	default:
		check(t, got)
	}
}

// TestTestEndpoint is the rule of a test worker's settings: the
// endpoint's, one worker, nothing shared, tests.json's config over them,
// the build's image.
func TestTestEndpoint(t *testing.T) {
	e := store.Endpoint{ID: "ep1", Name: "hello", TemplateID: "tpl1", ComputeType: "GPU", GPUTypeIDs: []string{"ADA_24"}, GPUCount: 2,
		WorkersMin: 2, WorkersMax: 5, Version: 7, NetworkVolumeID: "vol1", ModelReferences: []string{"org/m"}, Flashboot: true,
		Env: map[string]string{"A": "1", "B": "2"}}
	tpl := store.Template{ID: "tpl1", Name: "hello", ImageName: "berth/hello:old", Env: map[string]string{"T": "t"}}
	b := store.Build{ID: "build_x", EndpointID: "ep1", ImageName: "berth/hello:new"}
	for _, c := range []struct {
		name  string
		cfg   mgmt.TestConfig
		b     store.Build
		check func(t *testing.T, te store.Endpoint, tt store.Template)
	}{
		{name: "the endpoint's settings", b: b, check: func(t *testing.T, te store.Endpoint, tt store.Template) {
			if te.ID != "test-build_x" || te.TemplateID != te.ID || te.WorkersMin != 1 || te.WorkersMax != 1 || te.NetworkVolumeID != "" ||
				te.ModelReferences != nil || te.Flashboot || te.ComputeType != "GPU" || te.GPUCount != 2 || te.Env["A"] != "1" {
				t.Errorf("test endpoint %+v", te)
			}
			if tt.ID != te.ID || tt.ImageName != "berth/hello:new" || tt.Env["T"] != "t" {
				t.Errorf("test template %+v", tt)
			}
		}},
		{name: "a CPU flavour and env", b: b, cfg: mgmt.TestConfig{CPUFlavor: "cpu5c", Env: map[string]string{"B": "x", "C": "y"}},
			check: func(t *testing.T, te store.Endpoint, _ store.Template) {
				if te.ComputeType != "CPU" || len(te.GPUTypeIDs) != 0 || te.CPUFlavorIDs[0] != "cpu5c" || te.Env["A"] != "1" || te.Env["B"] != "x" || te.Env["C"] != "y" {
					t.Errorf("test endpoint %+v", te)
				}
				if e.Env["B"] != "2" {
					t.Errorf("the endpoint's env was changed: %v", e.Env)
				}
			}},
		{name: "a GPU type and count", b: b, cfg: mgmt.TestConfig{GPUTypeID: "NVIDIA GeForce RTX 4090", GPUCount: 1},
			check: func(t *testing.T, te store.Endpoint, _ store.Template) {
				if te.ComputeType != "GPU" || len(te.GPUTypeIDs) != 1 || te.GPUTypeIDs[0] != "NVIDIA GeForce RTX 4090" || te.GPUCount != 1 {
					t.Errorf("test endpoint %+v", te)
				}
			}},
		{name: "a pushed image", b: store.Build{ID: "build_x", ImageName: "berth/hello:new", PushedImage: "reg/hello@sha256:ab", RegistryAuthID: "auth1"},
			check: func(t *testing.T, _ store.Endpoint, tt store.Template) {
				if tt.ImageName != "reg/hello@sha256:ab" || tt.ContainerRegistryAuthID != "auth1" {
					t.Errorf("test template %+v", tt)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			te, tt := mgmt.TestEndpoint(e, tpl, c.b, c.cfg)
			c.check(t, te, tt)
			if !mgmt.IsTestEndpoint(te.ID) || mgmt.IsTestEndpoint(e.ID) {
				t.Errorf("IsTestEndpoint")
			}
		})
	}
}

func TestParseHub(t *testing.T) {
	for _, c := range []struct {
		name, in string
		err      string
		check    func(t *testing.T, h mgmt.HubConfig)
	}{
		{name: "RunPod's template", in: `{"title": "T", "description": "D", "type": "serverless", "category": "language",
		  "config": {"runsOn": "GPU", "containerDiskInGb": 20, "gpuCount": 1, "gpuIds": "RTX A4000,-NVIDIA RTX 4090",
		  "allowedCudaVersions": ["12.8", "12.7"], "presets": [{"name": "p", "defaults": {"X": 1}}],
		  "env": [{"key": "STATIC", "value": "static_value"},
		          {"key": "STRING", "input": {"name": "n", "type": "string", "default": "default value"}},
		          {"key": "NUM", "input": {"type": "number", "default": 50}},
		          {"key": "NODEFAULT", "input": {"type": "string"}}]}}`,
			check: func(t *testing.T, h mgmt.HubConfig) {
				if h.RunsOn != "GPU" || *h.ContainerDiskInGb != 20 || *h.GPUCount != 1 || len(h.GPUTypeIDs) != 1 || h.GPUTypeIDs[0] != "RTX A4000" ||
					len(h.AllowedCudaVersions) != 2 || h.Env["STATIC"] != "static_value" || h.Env["STRING"] != "default value" ||
					h.Env["NUM"] != "50" || h.Env["NODEFAULT"] != "" {
					t.Errorf("parsed %+v", h)
				}
			}},
		{name: "CPU load balancer", in: `{"config": {"runsOn": "cpu", "endpointType": "LB", "cpuFlavor": "cpu3c,cpu5c"}}`,
			check: func(t *testing.T, h mgmt.HubConfig) {
				if h.RunsOn != "CPU" || h.EndpointType != "LOAD_BALANCER" || len(h.CPUFlavorIDs) != 2 {
					t.Errorf("parsed %+v", h)
				}
			}},
		{name: "no config", in: `{"title": "x"}`, check: func(t *testing.T, h mgmt.HubConfig) {
			if h.RunsOn != "" || h.Env != nil {
				t.Errorf("parsed %+v", h)
			}
		}},
		{name: "not JSON", in: `{`, err: ".runpod/hub.json: not valid JSON"},
		{name: "config not an object", in: `{"config": []}`, err: ".runpod/hub.json: config: want an object"},
		{name: "runsOn", in: `{"config": {"runsOn": "TPU"}}`, err: ".runpod/hub.json: config.runsOn: want GPU or CPU"},
		{name: "endpointType", in: `{"config": {"endpointType": "X"}}`, err: ".runpod/hub.json: config.endpointType: want QB"},
		{name: "disk a string", in: `{"config": {"containerDiskInGb": "20"}}`, err: ".runpod/hub.json: config.containerDiskInGb: want an integer"},
		{name: "disk zero", in: `{"config": {"containerDiskInGb": 0}}`, err: ".runpod/hub.json: config.containerDiskInGb: 0 is out of range"},
		{name: "cpu flavour", in: `{"config": {"cpuFlavor": "cpu9z"}}`, err: ".runpod/hub.json: config.cpuFlavor"},
		{name: "gpu count", in: `{"config": {"gpuCount": 1.5}}`, err: ".runpod/hub.json: config.gpuCount: want an integer"},
		{name: "gpu ids a list", in: `{"config": {"gpuIds": ["ADA_24"]}}`, err: ".runpod/hub.json: config.gpuIds: want a string"},
		{name: "env", in: `{"config": {"env": [{"key": "A", "input": 3}]}}`, err: ".runpod/hub.json: config.env[0].input: want an object"},
		{name: "cpu with gpus", in: `{"config": {"runsOn": "CPU", "gpuCount": 1}}`, err: ".runpod/hub.json: config: runsOn CPU with gpuIds or gpuCount"},
		{name: "gpu with cpu flavour", in: `{"config": {"runsOn": "GPU", "cpuFlavor": "cpu3c"}}`, err: ".runpod/hub.json: config: runsOn GPU with cpuFlavor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := mgmt.ParseHub([]byte(c.in))
			checkParsed(t, h, err, c.err, c.check)
		})
	}
}

// TestApplyHubDefaults is the one rule of hub.json's defaults: applied to
// an endpoint deploy made, where the command gave nothing.
func TestApplyHubDefaults(t *testing.T) {
	seven, two := 7, 2
	hub := mgmt.HubConfig{RunsOn: "CPU", ContainerDiskInGb: &seven, CPUFlavorIDs: []string{"cpu5c"}, Env: map[string]string{"HUB": "hub", "KEEP": "hub"}}
	newEp := func() (store.Endpoint, store.Template) {
		e := mgmt.NewEndpointDefaults()
		e.ID, e.Name, e.TemplateID = "ep1", "hello", "tpl1"
		e.Env = map[string]string{"KEEP": "flag"}
		return e, store.Template{ID: "tpl1", ImageName: mgmt.PendingBuildImage, ContainerDiskInGb: 5, Env: map[string]string{"TPL": "t"}}
	}
	for _, c := range []struct {
		name    string
		hub     mgmt.HubConfig
		given   []string
		image   string
		applied string
		err     string
		check   func(t *testing.T, e store.Endpoint, tpl store.Template)
	}{
		{name: "nothing given: every field", hub: hub, applied: "computeType cpuFlavorIds env containerDiskInGb",
			check: func(t *testing.T, e store.Endpoint, tpl store.Template) {
				if e.ComputeType != "CPU" || e.CPUFlavorIDs[0] != "cpu5c" || e.Env["HUB"] != "hub" || e.Env["KEEP"] != "flag" || tpl.ContainerDiskInGb != 7 {
					t.Errorf("endpoint %+v template %+v", e, tpl)
				}
			}},
		{name: "given fields win", hub: hub, given: []string{"cpuFlavorIds", "env"}, applied: "computeType env containerDiskInGb",
			check: func(t *testing.T, e store.Endpoint, _ store.Template) {
				if len(e.CPUFlavorIDs) != 0 || e.Env["KEEP"] != "flag" || e.Env["HUB"] != "hub" {
					t.Errorf("endpoint %+v", e)
				}
			}},
		{name: "computeType given", hub: mgmt.HubConfig{RunsOn: "CPU"}, given: []string{"computeType"}, applied: "",
			check: func(t *testing.T, e store.Endpoint, _ store.Template) {
				if e.ComputeType != "GPU" {
					t.Errorf("endpoint %+v", e)
				}
			}},
		{name: "an endpoint that ran an image: untouched", hub: hub, image: "berth/hello:abc", applied: "",
			check: func(t *testing.T, e store.Endpoint, tpl store.Template) {
				if e.ComputeType != "GPU" || tpl.ContainerDiskInGb != 5 || e.Env["HUB"] != "" {
					t.Errorf("endpoint %+v template %+v", e, tpl)
				}
			}},
		{name: "GPUs and a load balancer", hub: mgmt.HubConfig{RunsOn: "GPU", EndpointType: "LOAD_BALANCER", GPUCount: &two, GPUTypeIDs: []string{"ADA_24"}, AllowedCudaVersions: []string{"12.4"}},
			applied: "type gpuCount gpuTypeIds allowedCudaVersions",
			check: func(t *testing.T, e store.Endpoint, _ store.Template) {
				if e.Type != "LOAD_BALANCER" || e.ScalerType != "REQUEST_COUNT" || e.GPUCount != 2 || e.GPUTypeIDs[0] != "ADA_24" || e.AllowedCudaVersions[0] != "12.4" {
					t.Errorf("endpoint %+v", e)
				}
			}},
		{name: "a GPU hub on a CPU endpoint the command made: refused, nothing changed", hub: mgmt.HubConfig{GPUTypeIDs: []string{"ADA_24"}}, given: []string{"computeType"},
			err: "gpuTypeIds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, tpl := newEp()
			if c.name == "a GPU hub on a CPU endpoint the command made: refused, nothing changed" {
				e.ComputeType = "CPU"
			}
			if c.image != "" {
				tpl.ImageName = c.image
			}
			e0, t0 := e.ComputeType, tpl.ContainerDiskInGb
			applied, err := mgmt.ApplyHubDefaults(c.hub, c.given, &e, &tpl)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || e.ComputeType != e0 || tpl.ContainerDiskInGb != t0 || len(e.GPUTypeIDs) != 0 {
					t.Fatalf("err %v, endpoint %+v: want a refusal naming %s and nothing changed", err, e, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(applied, " "); got != c.applied {
				t.Errorf("applied %q, want %q", got, c.applied)
			}
			c.check(t, e, tpl)
		})
	}
}
