package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"berth/store"
)

// RunPod Hub files of a build's source (docs/builds.md, Tests before
// release): .runpod/tests.json, the tests a build's image must pass before
// it is released, and .runpod/hub.json, whose config gives a new
// endpoint's defaults. Both are read from the build context's root.

// The Hub files' paths inside a build context.
const (
	TestsFile = ".runpod/tests.json"
	HubFile   = ".runpod/hub.json"
)

// Limits of the Hub files and their tests.
const (
	// MaxHubFileBytes bounds each file: a larger one fails the build.
	MaxHubFileBytes = 1 << 20
	// MaxBuildTests is the most tests a tests.json may hold.
	MaxBuildTests = 32
	// MaxTestInputBytes bounds one test's input (RunPod's /run takes 10
	// MB; a test's input is a request, not a data set).
	MaxTestInputBytes = 256 << 10
	// DefaultTestTimeout is a test's timeout when it gives none;
	// MaxTestTimeout the longest one may ask. All tests together are also
	// bounded by the build's step timeout (and its total timeout).
	DefaultTestTimeout = 5 * time.Minute
	MaxTestTimeout     = 30 * time.Minute
)

// BuildTest is one test of tests.json: a job's input and its timeout.
type BuildTest struct {
	Name    string          `json:"name"`
	Input   json.RawMessage `json:"input"`
	Timeout time.Duration   `json:"-"`
}

// TestConfig is tests.json's config: the test worker's machine and
// environment.
type TestConfig struct {
	GPUTypeID           string
	GPUCount            int
	CPUFlavor           string
	Env                 map[string]string
	AllowedCudaVersions []string
}

// BuildTests is a parsed tests.json.
type BuildTests struct {
	Tests  []BuildTest
	Config TestConfig
}

// fileErr is a refusal naming the Hub file and the field.
func fileErr(file, field, format string, a ...any) error {
	f := file
	if field != "" {
		f += ": " + field
	}
	return invalid(f, "%s: %s", f, fmt.Sprintf(format, a...))
}

// object decodes raw as a JSON object (null and absent are empty).
func object(file, field string, raw json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]json.RawMessage{}, nil
	}
	if raw[0] != '{' {
		return nil, fileErr(file, field, "want an object")
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fileErr(file, field, "not valid JSON: %v", err)
	}
	return m, nil
}

func jsonString(file, field string, raw json.RawMessage) (string, error) {
	var s string
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fileErr(file, field, "want a string")
	}
	if err := CheckText(field, s, false); err != nil {
		return "", fileErr(file, field, "%v", err)
	}
	if len(s) > 4096 {
		return "", fileErr(file, field, "over 4096 bytes")
	}
	return s, nil
}

func jsonInt(file, field string, raw json.RawMessage, lo, hi int64) (*int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != float64(int64(f)) {
		return nil, fileErr(file, field, "want an integer, got %s", ShortID(string(raw)))
	}
	n := int64(f)
	if n < lo || n > hi {
		return nil, fileErr(file, field, "%d is out of range (%d to %d)", n, lo, hi)
	}
	return &n, nil
}

func jsonStrings(file, field string, raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil {
		return nil, fileErr(file, field, "want an array of strings")
	}
	if len(ss) > 64 {
		return nil, fileErr(file, field, "over 64 entries")
	}
	return ss, nil
}

// envList decodes RunPod's env: [{key, value}] — or, in hub.json, {key,
// input: {default}} (the user's input's default is the value).
func envList(file, field string, raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fileErr(file, field, "want an array of {key, value}")
	}
	env := map[string]string{}
	for i, e := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		m, err := object(file, f, e)
		if err != nil {
			return nil, err
		}
		k, err := jsonString(file, f+".key", m["key"])
		if err != nil {
			return nil, err
		}
		if k == "" {
			return nil, fileErr(file, f+".key", "required")
		}
		v, ok := m["value"]
		if in, has := m["input"]; !ok && has {
			im, err := object(file, f+".input", in)
			if err != nil {
				return nil, err
			}
			v = im["default"]
		}
		var s string
		switch {
		case len(v) == 0 || string(v) == "null":
		case v[0] == '"':
			if s, err = jsonString(file, f+".value", v); err != nil {
				return nil, err
			}
		case v[0] == '{' || v[0] == '[':
			return nil, fileErr(file, f+".value", "want a string, a number or a boolean")
		default:
			s = string(bytes.TrimSpace(v)) // a number or a boolean, as written
		}
		env[k] = s
	}
	if err := validateEnv(env); err != nil {
		return nil, fileErr(file, field, "%v", err)
	}
	return env, nil
}

// ParseTests parses tests.json (RunPod's Hub format). Every refusal names
// the file and the field, e.g. `.runpod/tests.json: tests[1].timeout: want
// an integer`. Unknown fields are ignored (RunPod's files may carry more).
func ParseTests(data []byte) (BuildTests, error) {
	const f = TestsFile
	var out BuildTests
	if len(data) > MaxHubFileBytes {
		return out, fileErr(f, "", "over %d KiB", MaxHubFileBytes>>10)
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		return out, fileErr(f, "", "not valid JSON: %v", err)
	}
	top, err := object(f, "", data)
	if err != nil {
		return out, err
	}
	var list []json.RawMessage
	raw := top["tests"]
	if len(raw) == 0 || string(raw) == "null" {
		return out, fileErr(f, "tests", "required: an array of {name, input, timeout}")
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return out, fileErr(f, "tests", "want an array of {name, input, timeout}")
	}
	if len(list) > MaxBuildTests {
		return out, fileErr(f, "tests", "%d tests: at most %d", len(list), MaxBuildTests)
	}
	names := map[string]bool{}
	for i, t := range list {
		field := fmt.Sprintf("tests[%d]", i)
		m, err := object(f, field, t)
		if err != nil {
			return out, err
		}
		name, err := jsonString(f, field+".name", m["name"])
		if err != nil {
			return out, err
		}
		if name == "" {
			return out, fileErr(f, field+".name", "required")
		}
		if len(name) > 128 {
			return out, fileErr(f, field+".name", "over 128 bytes")
		}
		if names[name] {
			return out, fileErr(f, field+".name", "%s is the name of an earlier test", quote(name))
		}
		names[name] = true
		in := bytes.TrimSpace(m["input"])
		if len(in) == 0 || in[0] != '{' {
			return out, fileErr(f, field+".input", "required: the job's input, an object")
		}
		if len(in) > MaxTestInputBytes {
			return out, fileErr(f, field+".input", "over %d KiB", MaxTestInputBytes>>10)
		}
		ms, err := jsonInt(f, field+".timeout", m["timeout"], 1, MaxTestTimeout.Milliseconds())
		if err != nil {
			return out, err
		}
		bt := BuildTest{Name: name, Input: json.RawMessage(in), Timeout: DefaultTestTimeout}
		if ms != nil {
			bt.Timeout = time.Duration(*ms) * time.Millisecond
		}
		out.Tests = append(out.Tests, bt)
	}
	if len(out.Tests) == 0 {
		return out, fileErr(f, "tests", "no test: give one, or remove the file")
	}
	cfg, err := object(f, "config", top["config"])
	if err != nil {
		return out, err
	}
	c := &out.Config
	if c.GPUTypeID, err = jsonString(f, "config.gpuTypeId", cfg["gpuTypeId"]); err != nil {
		return out, err
	}
	if c.GPUTypeID != "" {
		if _, err := CheckGPUIDs("gpuTypeId", []string{c.GPUTypeID}); err != nil {
			return out, fileErr(f, "config.gpuTypeId", "%v", err)
		}
	}
	n, err := jsonInt(f, "config.gpuCount", cfg["gpuCount"], 1, 8)
	if err != nil {
		return out, err
	}
	if n != nil {
		c.GPUCount = int(*n)
	}
	if c.CPUFlavor, err = jsonString(f, "config.cpuFlavor", cfg["cpuFlavor"]); err != nil {
		return out, err
	}
	if c.CPUFlavor != "" {
		if err := checkCPUFlavors("cpuFlavor", []string{c.CPUFlavor}); err != nil {
			return out, fileErr(f, "config.cpuFlavor", "%v", err)
		}
	}
	if c.GPUTypeID != "" && c.CPUFlavor != "" {
		return out, fileErr(f, "config", "gpuTypeId and cpuFlavor: a test worker runs on a GPU or a CPU, not both")
	}
	if c.Env, err = envList(f, "config.env", cfg["env"]); err != nil {
		return out, err
	}
	if c.AllowedCudaVersions, err = jsonStrings(f, "config.allowedCudaVersions", cfg["allowedCudaVersions"]); err != nil {
		return out, err
	}
	return out, nil
}

// TestEndpointID is the id of build buildID's test worker's endpoint: a
// queue of its own, never stored, never an endpoint of the API.
func TestEndpointID(buildID string) string { return "test-" + buildID }

// IsTestEndpoint tells a test worker's endpoint id.
func IsTestEndpoint(id string) bool { return strings.HasPrefix(id, "test-build_") }

// TestEndpoint is the endpoint and template a build's test worker runs
// as: the build's endpoint and template, running the build's image, one
// worker (workersMin = workersMax = 1), without its network volume, its
// models or FlashBoot (a test touches nothing the endpoint's workers
// share), with tests.json's config over them: gpuTypeId and gpuCount, or
// cpuFlavor (a CPU worker), env added to the endpoint's.
func TestEndpoint(e store.Endpoint, t store.Template, b store.Build, c TestConfig) (store.Endpoint, store.Template) {
	id := TestEndpointID(b.ID)
	te := e
	te.ID, te.Name, te.TemplateID = id, e.Name+" (test of "+b.ID+")", id
	te.WorkersMin, te.WorkersMax, te.Version = 1, 1, 1
	te.NetworkVolumeID, te.NetworkVolumeIDs, te.ModelReferences = "", nil, nil
	te.Flashboot, te.Git = false, nil
	te.Env = maps.Clone(e.Env)
	if te.Env == nil {
		te.Env = map[string]string{}
	}
	maps.Copy(te.Env, c.Env)
	switch {
	case c.GPUTypeID != "":
		te.ComputeType, te.GPUTypeIDs, te.CPUFlavorIDs, te.InstanceIDs = "GPU", []string{c.GPUTypeID}, nil, nil
	case c.CPUFlavor != "":
		te.ComputeType, te.CPUFlavorIDs, te.GPUTypeIDs, te.InstanceIDs = "CPU", []string{c.CPUFlavor}, nil, nil
	}
	if c.GPUCount > 0 {
		te.GPUCount = c.GPUCount
	}
	if len(c.AllowedCudaVersions) > 0 {
		te.AllowedCudaVersions = c.AllowedCudaVersions
	}
	tt := buildTemplate(t, b)
	tt.ID, tt.Name = id, id
	return te, tt
}

// TestFailure is why a test did not pass: its job's status and error, or
// that it timed out.
func TestFailure(name, status, errMsg string, timeout time.Duration) string {
	msg := fmt.Sprintf("test %s failed: the job ended %s", strconv.Quote(name), status)
	if status == string(store.TimedOut) {
		msg += fmt.Sprintf(" (its timeout is %s)", timeout)
	}
	if errMsg != "" {
		msg += ": " + errMsg
	}
	return msg
}

// TestWorker reads build b's endpoint and template and returns what its
// test worker runs as (TestEndpoint). A load-balancing endpoint's worker
// takes no jobs: its tests are refused.
func (s *Service) TestWorker(ctx context.Context, b store.Build, c TestConfig) (store.Endpoint, store.Template, error) {
	if err := live(ctx); err != nil {
		return store.Endpoint{}, store.Template{}, err
	}
	var e store.Endpoint
	var t store.Template
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Endpoints, b.EndpointID, "endpoint", &e); err != nil {
			return err
		}
		return getOr404(tx, store.Templates, e.TemplateID, "template", &t)
	})
	if err != nil {
		return store.Endpoint{}, store.Template{}, err
	}
	if e.LoadBalancer() {
		return store.Endpoint{}, store.Template{}, invalid(TestsFile, "%s: endpoint %s is a LOAD_BALANCER endpoint: its workers take no jobs, and tests run as jobs", TestsFile, e.ID)
	}
	te, tt := TestEndpoint(e, t, b, c)
	return te, tt, nil
}

// PendingBuildImage is the image of an endpoint `berth deploy` made,
// until its first build releases one (its workersMin is 0 meanwhile: it
// never runs). hub.json's config is applied to such an endpoint only.
const PendingBuildImage = "berth/pending-first-build:none"

// HubConfig is hub.json's config: a new endpoint's defaults (stored on
// the build that read it).
type HubConfig = store.HubConfig

// ParseHub parses hub.json (RunPod's Hub format); only config is read
// (title, description, … are the Hub listing's). Every refusal names the
// file and the field. gpuIds is RunPod's comma-separated pools and GPU
// ids; a "-id" negation is dropped (Berth's gpuTypeIds is a list of what
// may be chosen). An env entry's value is its value, or its input's
// default.
func ParseHub(data []byte) (HubConfig, error) {
	const f = HubFile
	var h HubConfig
	if len(data) > MaxHubFileBytes {
		return h, fileErr(f, "", "over %d KiB", MaxHubFileBytes>>10)
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		return h, fileErr(f, "", "not valid JSON: %v", err)
	}
	top, err := object(f, "", data)
	if err != nil {
		return h, err
	}
	cfg, err := object(f, "config", top["config"])
	if err != nil {
		return h, err
	}
	s, err := jsonString(f, "config.runsOn", cfg["runsOn"])
	if err != nil {
		return h, err
	}
	switch strings.ToUpper(s) {
	case "":
	case "GPU", "CPU":
		h.RunsOn = strings.ToUpper(s)
	default:
		return h, fileErr(f, "config.runsOn", "want GPU or CPU, got %s", quote(ShortID(s)))
	}
	if s, err = jsonString(f, "config.endpointType", cfg["endpointType"]); err != nil {
		return h, err
	}
	switch strings.ToUpper(s) {
	case "":
	case "QB", "QUEUE":
		h.EndpointType = store.EndpointQueue
	case "LB", "LOAD_BALANCER":
		h.EndpointType = store.EndpointLoadBalancer
	default:
		return h, fileErr(f, "config.endpointType", "want QB (queue) or LB (load balancer), got %s", quote(ShortID(s)))
	}
	n, err := jsonInt(f, "config.containerDiskInGb", cfg["containerDiskInGb"], 1, 1000)
	if err != nil {
		return h, err
	}
	if n != nil {
		v := int(*n)
		h.ContainerDiskInGb = &v
	}
	if s, err = jsonString(f, "config.cpuFlavor", cfg["cpuFlavor"]); err != nil {
		return h, err
	}
	if s != "" {
		h.CPUFlavorIDs = SplitList(s)
		if err := checkCPUFlavors("cpuFlavor", h.CPUFlavorIDs); err != nil {
			return h, fileErr(f, "config.cpuFlavor", "%v", err)
		}
	}
	if n, err = jsonInt(f, "config.gpuCount", cfg["gpuCount"], 1, 8); err != nil {
		return h, err
	}
	if n != nil {
		v := int(*n)
		h.GPUCount = &v
	}
	if s, err = jsonString(f, "config.gpuIds", cfg["gpuIds"]); err != nil {
		return h, err
	}
	for _, id := range SplitList(s) {
		if !strings.HasPrefix(id, "-") {
			h.GPUTypeIDs = append(h.GPUTypeIDs, id)
		}
	}
	if _, err := CheckGPUIDs("gpuIds", h.GPUTypeIDs); err != nil {
		return h, fileErr(f, "config.gpuIds", "%v", err)
	}
	if h.AllowedCudaVersions, err = jsonStrings(f, "config.allowedCudaVersions", cfg["allowedCudaVersions"]); err != nil {
		return h, err
	}
	if h.Env, err = envList(f, "config.env", cfg["env"]); err != nil {
		return h, err
	}
	if h.RunsOn == "CPU" && (len(h.GPUTypeIDs) > 0 || h.GPUCount != nil) {
		return h, fileErr(f, "config", "runsOn CPU with gpuIds or gpuCount: a CPU endpoint has no GPUs")
	}
	if h.RunsOn == "GPU" && len(h.CPUFlavorIDs) > 0 {
		return h, fileErr(f, "config", "runsOn GPU with cpuFlavor: cpuFlavor is for CPU endpoints")
	}
	return h, nil
}

// SplitList splits a comma-separated list, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ApplyHubDefaults is the one rule of hub.json's defaults: on an endpoint
// `berth deploy` made (its template still runs PendingBuildImage) each
// field of config is applied unless the command gave it (given: the
// endpoint fields of deploy's flags, or of apply's file): runsOn →
// computeType, endpointType → type, containerDiskInGb (the template's),
// cpuFlavor → cpuFlavorIds, gpuCount, gpuIds → gpuTypeIds,
// allowedCudaVersions; env entries are added whose key the endpoint's and
// the template's env do not hold. An endpoint that ran an image before is
// left as it is: its settings are what its commands made them. It returns
// the fields applied, in a stable order; e and t are changed only when
// the result passes every rule of an endpoint.
func ApplyHubDefaults(h HubConfig, given []string, e *store.Endpoint, t *store.Template) ([]string, error) {
	if t.ImageName != PendingBuildImage {
		return nil, nil
	}
	gave := map[string]bool{}
	for _, g := range given {
		gave[g] = true
	}
	ne, nt := *e, *t
	var applied []string
	var in EndpointInput
	if h.RunsOn != "" && !gave["computeType"] && h.RunsOn != computeType(&ne) {
		ne.ComputeType = h.RunsOn
		if h.RunsOn == "CPU" && !gave["gpuTypeIds"] {
			ne.GPUTypeIDs = []string{}
		}
		applied = append(applied, "computeType")
	}
	if h.EndpointType != "" && !gave["type"] && h.EndpointType != endpointType(&ne) {
		ne.Type = h.EndpointType
		if h.EndpointType == store.EndpointLoadBalancer {
			ne.ScalerType = "REQUEST_COUNT" // as creation does
		}
		applied = append(applied, "type")
	}
	if h.CPUFlavorIDs != nil && !gave["cpuFlavorIds"] {
		in.CPUFlavorIDs = h.CPUFlavorIDs
		applied = append(applied, "cpuFlavorIds")
	}
	if h.GPUCount != nil && !gave["gpuCount"] {
		in.GPUCount = h.GPUCount
		applied = append(applied, "gpuCount")
	}
	if h.GPUTypeIDs != nil && !gave["gpuTypeIds"] {
		in.GPUTypeIDs = h.GPUTypeIDs
		applied = append(applied, "gpuTypeIds")
	}
	if h.AllowedCudaVersions != nil && !gave["allowedCudaVersions"] && computeType(&ne) == "GPU" {
		in.AllowedCudaVersions = h.AllowedCudaVersions
		applied = append(applied, "allowedCudaVersions")
	}
	if len(h.Env) > 0 {
		env := maps.Clone(ne.Env)
		if env == nil {
			env = map[string]string{}
		}
		added := false
		for k, v := range h.Env {
			_, inEp := env[k]
			_, inTpl := nt.Env[k]
			if !inEp && !inTpl {
				env[k], added = v, true
			}
		}
		if added {
			in.Env = env
			applied = append(applied, "env")
		}
	}
	if err := ApplyEndpoint(&ne, in, false); err != nil {
		return nil, err
	}
	if err := checkCompute(&ne, in); err != nil {
		return nil, err
	}
	if h.ContainerDiskInGb != nil && !gave["containerDiskInGb"] && *h.ContainerDiskInGb != nt.ContainerDiskInGb {
		nt.ContainerDiskInGb = *h.ContainerDiskInGb
		applied = append(applied, "containerDiskInGb")
	}
	*e, *t = ne, nt
	return applied, nil
}
