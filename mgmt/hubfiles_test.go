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
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && err == nil:
				t.Fatalf("accepted, want %q", c.err)
			case c.err != "":
				if !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %q, want it to contain %q", err, c.err)
				}
				if mgmt.KindOf(err) != mgmt.Invalid {
					t.Errorf("error kind %v, want Invalid", mgmt.KindOf(err))
				}
			default:
				c.check(t, bt)
			}
		})
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
