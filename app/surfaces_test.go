package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"berth/app"
	"berth/gpu"
	"berth/internal/apptest"
	"berth/mgmt"
)

// One rule in one place: the same inputs sent through REST v1, REST v2
// and GraphQL of one running Berth (the product's composition, real HTTP)
// are accepted or refused alike, a refusal naming the same field in each
// surface's own names, and a refusal stores nothing.

// onFake runs cfg's Berth on the in-memory backend (runtime/fake), pods
// through the production pod adapter: four RTX 4090s, image a:1 runs.
func onFake(t *testing.T, cfg app.Config) app.Config {
	devs := make([]gpu.Device, 4)
	for i := range devs {
		devs[i] = gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564}
	}
	apptest.OnFake(t, &cfg, devs, "a:1")
	return cfg
}

type surfaces struct {
	t        *testing.T
	url, key string
}

// call sends body (a value sent as JSON, or a string as is) and returns
// the status and decoded answer.
func (s *surfaces) call(method, path string, body any) (int, map[string]any) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, ok := body.(string)
		if !ok {
			raw, _ := json.Marshal(body)
			b = string(raw)
		}
		rd = strings.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	var m map[string]any
	json.Unmarshal(out, &m)
	if m == nil {
		m = map[string]any{"raw": string(out)}
	}
	return res.StatusCode, m
}

// outcome is what a surface answered: accepted, or refused naming field.
type outcome struct {
	refused bool
	text    string // the refusal's message(s) and field
	status  int
}

func (s *surfaces) rest(method, path string, body any) outcome {
	code, m := s.call(method, path, body)
	if code/100 == 2 {
		return outcome{status: code}
	}
	b, _ := json.Marshal(m)
	return outcome{refused: true, text: string(b), status: code}
}

// graphql sends query, or a whole request body as is when it is one
// ({"query": …, "variables": …}).
func (s *surfaces) graphql(query string) outcome {
	var body any = map[string]any{"query": query}
	if strings.HasPrefix(query, `{"query"`) {
		body = query
	}
	code, m := s.call("POST", "/graphql", body)
	errs, _ := m["errors"].([]any)
	if code == 200 && len(errs) == 0 {
		return outcome{status: code}
	}
	b, _ := json.Marshal(errs)
	return outcome{refused: true, text: string(b), status: code}
}

func q(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestOneRuleOnEverySurface(t *testing.T) {
	dir := t.TempDir()
	a := start(t, onFake(t, app.Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: quiet, APIKey: "k-surfaces"}))
	defer stop(t, a)
	s := &surfaces{t: t, url: a.URL(), key: "k-surfaces"}
	_, tpl := s.call("POST", "/v1/templates", map[string]any{"name": "base", "imageName": "worker:1", "isServerless": true})
	tid, _ := tpl["id"].(string)
	if tid == "" {
		t.Fatalf("template: %v", tpl)
	}
	counts := func() string {
		var out []string
		for _, p := range []string{"/v1/endpoints", "/v1/templates?includeEndpointBoundTemplates=true", "/v1/pods", "/v1/networkvolumes", "/v1/containerregistryauth"} {
			req, _ := http.NewRequest("GET", s.url+p, nil)
			req.Header.Set("Authorization", "Bearer "+s.key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var list []any
			json.NewDecoder(res.Body).Decode(&list)
			res.Body.Close()
			out = append(out, fmt.Sprint(len(list)))
		}
		return strings.Join(out, "/")
	}
	ep := func(v2 map[string]any) map[string]any {
		b := map[string]any{"name": "ep", "type": "QUEUE", "templateId": tid, "scaling": map[string]any{"type": "QUEUE_DELAY", "queueDelay": 4}}
		if _, cpu := v2["cpu"]; !cpu {
			b["gpu"] = map[string]any{"pools": []string{"ADA_24"}}
		}
		for k, v := range v2 {
			if k == "gpu" && b["gpu"] != nil {
				g := map[string]any{"pools": []string{"ADA_24"}}
				for gk, gv := range v.(map[string]any) {
					g[gk] = gv
				}
				v = g
			}
			b[k] = v
		}
		return b
	}
	long := strings.Repeat("n", 300)
	type send struct {
		method, path string
		body         any
	}
	for _, c := range []struct {
		name    string
		v1, v2  send
		gql     string
		fields  [3]string // v1, v2, GraphQL names of the refused field; "" = accepted
		cleanup bool
	}{
		// Endpoints.
		{"a GPU endpoint", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "gpuTypeIds": []string{"ADA_24"}, "workersMax": 2}},
			send{"POST", "/v2/serverless", ep(map[string]any{"workers": map[string]any{"max": 2}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", gpuIds: "ADA_24", workersMax: 2}) { id } }`, [3]string{}, true},
		{"a CPU endpoint", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "computeType": "CPU", "cpuFlavorIds": []string{"cpu3c"}, "vcpuCount": 4}},
			send{"POST", "/v2/serverless", ep(map[string]any{"cpu": []map[string]any{{"id": "cpu3c", "vcpuCount": 4}}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", instanceIds: ["cpu3c-4-8"]}) { id } }`, [3]string{}, true},
		{"an unknown CPU flavour", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "computeType": "CPU", "cpuFlavorIds": []string{"bogus"}}},
			send{"POST", "/v2/serverless", ep(map[string]any{"cpu": []map[string]any{{"id": "bogus", "vcpuCount": 2}}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", instanceIds: ["bogus-2-4"]}) { id } }`,
			[3]string{"cpuFlavorIds", "cpu.id", "instanceIds"}, false},
		{"1 vCPU on a CPU endpoint", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "computeType": "CPU", "cpuFlavorIds": []string{"cpu3c"}, "vcpuCount": 1}},
			send{"POST", "/v2/serverless", ep(map[string]any{"cpu": []map[string]any{{"id": "cpu3c", "vcpuCount": 1}}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", instanceIds: ["cpu3c-1-2"]}) { id } }`,
			[3]string{"vcpuCount", "vcpuCount", "instanceIds"}, false},
		{"not a CUDA version", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "allowedCudaVersions": []string{"not-a-version"}}},
			send{"POST", "/v2/serverless", ep(map[string]any{"gpu": map[string]any{"allowedCudaVersions": []string{"not-a-version"}}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", allowedCudaVersions: "not-a-version"}) { id } }`,
			[3]string{"allowedCudaVersions", "allowedCudaVersions", "allowedCudaVersions"}, false},
		{"CPU flavours on a GPU endpoint", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "computeType": "GPU", "cpuFlavorIds": []string{"cpu3c"}}},
			send{"POST", "/v2/serverless", ep(map[string]any{"gpu": map[string]any{}, "cpu": []map[string]any{{"id": "cpu3c", "vcpuCount": 2}}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", gpuIds: "ADA_24", instanceIds: ["cpu3c-2-4"]}) { id } }`,
			[3]string{"cpuFlavorIds", "gpu", "instanceIds"}, false},
		{"2000 workers", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "workersMax": 2000}},
			send{"POST", "/v2/serverless", ep(map[string]any{"workers": map[string]any{"max": 2000}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", workersMax: 2000}) { id } }`,
			[3]string{"workersMax", "workers.max", "workersMax"}, false},
		// JSON does not tell 3.0 from 3, and JSON Schema 2020-12 counts it
		// an integer: the bodies are sent as written. GraphQL's JSON is
		// its variables (a literal 3.0 in the query is a Float, which the
		// GraphQL spec refuses for an Int, as RunPod's server does).
		{"3.0 workers (a whole number)", send{"POST", "/v1/endpoints", `{"templateId": "` + tid + `", "workersMax": 3.0, "idleTimeout": 5e0}`},
			send{"POST", "/v2/serverless", `{"name": "ep", "type": "QUEUE", "templateId": "` + tid + `", "gpu": {"pools": ["ADA_24"], "count": 1.0}, "workers": {"max": 3.0, "idleTimeout": 5e0}, "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4}}`},
			`{"query": "mutation($w: Int, $i: Int) { saveEndpoint(input: {name: \"ep\", templateId: \"` + tid + `\", gpuIds: \"ADA_24\", workersMax: $w, idleTimeout: $i}) { id } }", "variables": {"w": 3.0, "i": 5e0}}`,
			[3]string{}, true},
		{"3.5 workers", send{"POST", "/v1/endpoints", `{"templateId": "` + tid + `", "workersMax": 3.5}`},
			send{"POST", "/v2/serverless", `{"name": "ep", "type": "QUEUE", "templateId": "` + tid + `", "gpu": {"pools": ["ADA_24"]}, "workers": {"max": 3.5}, "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4}}`},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", workersMax: 3.5}) { id } }`,
			[3]string{"workersMax", "workers.max", "workersMax"}, false},
		{"more min than max workers", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "workersMin": 3, "workersMax": 1}},
			send{"POST", "/v2/serverless", ep(map[string]any{"workers": map[string]any{"min": 3, "max": 1}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", workersMin: 3, workersMax: 1}) { id } }`,
			[3]string{"workersMin", "workers.min", "workersMin"}, false},
		{"idleTimeout past an hour", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "idleTimeout": 4000}},
			send{"POST", "/v2/serverless", ep(map[string]any{"workers": map[string]any{"idleTimeout": 4000}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", idleTimeout: 4000}) { id } }`,
			[3]string{"idleTimeout", "idleTimeout", "idleTimeout"}, false},
		{"a 300-character name", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "name": long}},
			send{"POST", "/v2/serverless", ep(map[string]any{"name": long})},
			`mutation { saveEndpoint(input: {name: "` + long + `", templateId: "` + tid + `"}) { id } }`,
			[3]string{"name", "name", "name"}, false},
		{"a missing template", send{"POST", "/v1/endpoints", map[string]any{"templateId": "nosuchtpl1"}},
			send{"POST", "/v2/serverless", ep(map[string]any{"templateId": "nosuchtpl1"})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "nosuchtpl1"}) { id } }`,
			[3]string{"templateId", "templateId", "templateId"}, false},
		{"a 10 ms timeout", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "executionTimeoutMs": 10}},
			send{"POST", "/v2/serverless", ep(map[string]any{"timeout": 10})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", executionTimeoutMs: 10}) { id } }`,
			[3]string{"executionTimeoutMs", "timeout", "executionTimeoutMs"}, false},
		{"a malformed data centre", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "dataCenterIds": []string{"eu ro 1"}}},
			send{"POST", "/v2/serverless", ep(map[string]any{"dataCenterIds": []string{"eu ro 1"}})},
			`mutation { saveEndpoint(input: {name: "ep", templateId: "` + tid + `", locations: "eu ro 1"}) { id } }`,
			[3]string{"dataCenterIds", "dataCenterIds", "locations"}, false},
		// Templates.
		{"a template", send{"POST", "/v1/templates", map[string]any{"name": "t1", "imageName": "a:1", "ports": []string{"8000/http"}}},
			send{"POST", "/v2/templates", map[string]any{"name": "t2", "image": "a:1", "ports": []string{"8000/http"}}},
			`mutation { saveTemplate(input: {name: "t3", imageName: "a:1", ports: "8000/http"}) { id } }`, [3]string{}, true},
		{"no container disk", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": "a:1", "containerDiskInGb": 0}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": "a:1", "disk": 0}},
			`mutation { saveTemplate(input: {name: "t", imageName: "a:1", containerDiskInGb: 0}) { id } }`,
			[3]string{"containerDiskInGb", "disk", "containerDiskInGb"}, false},
		{"a 5 GB pod volume", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": "a:1", "volumeInGb": 5}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": "a:1", "mounts": map[string]any{"persistent": map[string]any{"size": 5, "path": "/w"}}}},
			`mutation { saveTemplate(input: {name: "t", imageName: "a:1", volumeInGb: 5}) { id } }`,
			[3]string{"volumeInGb", "mounts.persistent.size", "volumeInGb"}, false},
		{"a malformed port", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": "a:1", "ports": []string{"x"}}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": "a:1", "ports": []string{"x"}}},
			`mutation { saveTemplate(input: {name: "t", imageName: "a:1", ports: "x"}) { id } }`,
			[3]string{"ports", "ports", "ports"}, false},
		{"an env name with =", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": "a:1", "env": map[string]string{"A=B": "1"}}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": "a:1", "env": map[string]string{"A=B": "1"}}},
			`mutation { saveTemplate(input: {name: "t", imageName: "a:1", env: [{key: "A=B", value: "1"}]}) { id } }`,
			[3]string{"env", "env", "env"}, false},
		{"a 600-character image", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": strings.Repeat("i", 600)}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": strings.Repeat("i", 600)}},
			`mutation { saveTemplate(input: {name: "t", imageName: ` + q(strings.Repeat("i", 600)) + `}) { id } }`,
			[3]string{"imageName", "image", "imageName"}, false},
		// Pods.
		{"100 GPUs", send{"POST", "/v1/pods", map[string]any{"imageName": "a:1", "gpuCount": 100}},
			send{"POST", "/v2/pods", map[string]any{"name": "p", "image": "a:1", "gpu": map[string]any{"id": "NVIDIA GeForce RTX 4090", "count": 100}}},
			`mutation { podFindAndDeployOnDemand(input: {name: "p", imageName: "a:1", gpuTypeId: "NVIDIA GeForce RTX 4090", gpuCount: 100}) { id } }`,
			[3]string{"gpuCount", "gpu.count", "gpuCount"}, false},
		{"3 vCPUs on a CPU pod", send{"POST", "/v1/pods", map[string]any{"imageName": "a:1", "computeType": "CPU", "vcpuCount": 3}},
			send{"POST", "/v2/pods", map[string]any{"name": "p", "image": "a:1", "cpu": map[string]any{"id": "cpu3c", "vcpuCount": 3}}},
			`mutation { deployCpuPod(input: {name: "p", imageName: "a:1", instanceId: "cpu3c-3-6"}) { id } }`,
			[3]string{"vcpuCount", "vcpuCount", "instanceId"}, false},
		{"the community cloud", send{"POST", "/v1/pods", map[string]any{"imageName": "a:1", "cloudType": "COMMUNITY"}},
			send{"POST", "/v2/pods", map[string]any{"name": "p", "image": "a:1", "cloud": "COMMUNITY", "cpu": map[string]any{"id": "cpu3c", "vcpuCount": 2}}},
			`mutation { podFindAndDeployOnDemand(input: {name: "p", imageName: "a:1", gpuTypeId: "NVIDIA GeForce RTX 4090", cloudType: COMMUNITY}) { id } }`,
			[3]string{}, true},
		// Free text (mgmt.CheckText): control characters are refused in
		// names, imageName and every other text field, with the field
		// named; tabs and line breaks only where text has lines.
		{"an escape sequence in a name", send{"POST", "/v1/endpoints", map[string]any{"templateId": tid, "name": "ep\x1b[2J\x1b]0;pwned\x07"}},
			send{"POST", "/v2/serverless", ep(map[string]any{"name": "ep\x1b[2J"})},
			`mutation { saveEndpoint(input: {name: ` + q("ep\x1b[2J") + `, templateId: "` + tid + `"}) { id } }`,
			[3]string{"name", "name", "name"}, false},
		{"NUL in a template name", send{"POST", "/v1/templates", map[string]any{"name": "t\x00", "imageName": "a:1"}},
			send{"POST", "/v2/templates", map[string]any{"name": "t\x00", "image": "a:1"}},
			`mutation { saveTemplate(input: {name: ` + q("t\x00") + `, imageName: "a:1"}) { id } }`,
			[3]string{"name", "name", "name"}, false},
		{"a newline in imageName", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": "a:1\nFROM evil"}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": "a:1\nFROM evil"}},
			`mutation { saveTemplate(input: {name: "t", imageName: ` + q("a:1\nFROM evil") + `}) { id } }`,
			[3]string{"imageName", "image", "imageName"}, false},
		{"a bidi override in a pod name", send{"POST", "/v1/pods", map[string]any{"name": "p\u202egnp.exe", "imageName": "a:1"}},
			send{"POST", "/v2/pods", map[string]any{"name": "p\u202egnp.exe", "image": "a:1", "gpu": map[string]any{"id": "NVIDIA GeForce RTX 4090"}}},
			`mutation { podFindAndDeployOnDemand(input: {name: ` + q("p\u202egnp.exe") + `, imageName: "a:1", gpuTypeId: "NVIDIA GeForce RTX 4090"}) { id } }`,
			[3]string{"name", "name", "name"}, false},
		{"a bidi isolate and a C1 control in a pod's image", send{"POST", "/v1/pods", map[string]any{"imageName": "a:1\u2066\u009b"}},
			send{"POST", "/v2/pods", map[string]any{"name": "p", "image": "a:1\u2066\u009b", "gpu": map[string]any{"id": "NVIDIA GeForce RTX 4090"}}},
			`mutation { podFindAndDeployOnDemand(input: {name: "p", imageName: ` + q("a:1\u2066\u009b") + `, gpuTypeId: "NVIDIA GeForce RTX 4090"}) { id } }`,
			[3]string{"imageName", "image", "imageName"}, false},
		{"a tab in a registry name", send{"POST", "/v1/containerregistryauth", map[string]any{"name": "r\tx", "username": "u", "password": "p"}},
			send{"POST", "/v2/registries", map[string]any{"name": "r\tx", "username": "u", "password": "p"}},
			`mutation { saveRegistryAuth(input: {name: ` + q("r\tx") + `, username: "u", password: "p"}) { id } }`,
			[3]string{"name", "name", "name"}, false},
		{"DEL in a registry username", send{"POST", "/v1/containerregistryauth", map[string]any{"name": "r", "username": "u\x7f", "password": "p"}},
			send{"POST", "/v2/registries", map[string]any{"name": "r", "username": "u\x7f", "password": "p"}},
			`mutation { saveRegistryAuth(input: {name: "r", username: ` + q("u\x7f") + `, password: "p"}) { id } }`,
			[3]string{"username", "username", "username"}, false},
		{"an escape in a readme", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": "a:1", "readme": "# t\n\x1b[31mred"}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": "a:1", "readme": "# t\n\x1b[31mred"}},
			`mutation { saveTemplate(input: {name: "t", imageName: "a:1", readme: ` + q("# t\n\x1b[31mred") + `}) { id } }`,
			[3]string{"readme", "readme", "readme"}, false},
		{"an escape in an env value", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": "a:1", "env": map[string]string{"A": "\x1b[2J"}}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": "a:1", "env": map[string]string{"A": "\x1b[2J"}}},
			`mutation { saveTemplate(input: {name: "t", imageName: "a:1", env: [{key: "A", value: ` + q("\x1b[2J") + `}]}) { id } }`,
			[3]string{"env", "env", "env"}, false},
		{"a newline in a mount path", send{"POST", "/v1/templates", map[string]any{"name": "t", "imageName": "a:1", "volumeInGb": 10, "volumeMountPath": "/w\n"}},
			send{"POST", "/v2/templates", map[string]any{"name": "t", "image": "a:1", "mounts": map[string]any{"persistent": map[string]any{"size": 10, "path": "/w\n"}}}},
			`mutation { saveTemplate(input: {name: "t", imageName: "a:1", volumeInGb: 10, volumeMountPath: ` + q("/w\n") + `}) { id } }`,
			[3]string{"volumeMountPath", "mounts.persistent.path", "volumeMountPath"}, false},
		{"lines in a readme, a script and an env value; non-Latin names", send{"POST", "/v1/templates", map[string]any{"name": "تجربة ✓ 試し", "imageName": "a:1",
			"readme": "# t\r\n\tindented", "dockerStartCmd": []string{"bash", "-c", "echo a\necho b"}, "env": map[string]string{"PEM": "-----BEGIN-----\nAAAA\n-----END-----"}}},
			send{"POST", "/v2/templates", map[string]any{"name": "تجربة ✓ 試し 2", "image": "a:1", "readme": "# t\r\n\tindented", "args": "bash -c 'echo a\necho b'",
				"env": map[string]string{"PEM": "-----BEGIN-----\nAAAA\n-----END-----"}}},
			`mutation { saveTemplate(input: {name: "تجربة ✓ 試し 3", imageName: "a:1", readme: ` + q("# t\r\n\tindented") + `, dockerArgs: ` + q("bash -c 'echo a\necho b'") + `, env: [{key: "PEM", value: ` + q("-----BEGIN-----\nAAAA\n-----END-----") + `}]}) { id } }`,
			[3]string{}, true},
		// Registry credentials.
		{"no password", send{"POST", "/v1/containerregistryauth", map[string]any{"name": "r", "username": "u", "password": ""}},
			send{"POST", "/v2/registries", map[string]any{"name": "r", "username": "u", "password": ""}},
			`mutation { saveRegistryAuth(input: {name: "r", username: "u", password: ""}) { id } }`,
			[3]string{"password", "password", "password"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			before := counts()
			got := [3]outcome{s.rest(c.v1.method, c.v1.path, c.v1.body), s.rest(c.v2.method, c.v2.path, c.v2.body), s.graphql(c.gql)}
			for i, surface := range []string{"v1", "v2", "GraphQL"} {
				switch {
				case c.fields[i] == "" && got[i].refused:
					t.Errorf("%s refused a valid input: %d %s", surface, got[i].status, got[i].text)
				case c.fields[i] != "" && !got[i].refused:
					t.Errorf("%s accepted what the others refuse (%s)", surface, c.fields[0])
				case c.fields[i] != "" && !strings.Contains(got[i].text, c.fields[i]):
					t.Errorf("%s's refusal does not name %q: %d %s", surface, c.fields[i], got[i].status, got[i].text)
				case got[i].status >= 500:
					t.Errorf("%s answered %d: %s", surface, got[i].status, got[i].text)
				}
			}
			if c.fields[0] != "" && counts() != before {
				t.Errorf("refusals stored something: records %s, then %s", before, counts())
			}
		})
	}
	s.t = t
}

// A pod's mounts are fixed when it is created (v2.json's Mounts rule, in
// mgmt): REST v1 and v2 refuse adding a pod volume to a pod with a network
// volume or with none, swapping or removing a network volume, and removing
// a pod volume, each naming its field, and accept resizing the pod volume
// and moving a mount. (GraphQL has no pod edit.)
func TestPodMountsFixedOnEverySurface(t *testing.T) {
	a := start(t, onFake(t, app.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quiet, APIKey: "k-mounts"}))
	defer stop(t, a)
	s := &surfaces{t: t, url: a.URL(), key: "k-mounts"}
	made := func(path string, body map[string]any) string {
		t.Helper()
		code, m := s.call("POST", path, body)
		id, _ := m["id"].(string)
		if code/100 != 2 || id == "" {
			t.Fatalf("POST %s: %d %v", path, code, m)
		}
		return id
	}
	vol := made("/v1/networkvolumes", map[string]any{"name": "data", "size": 10, "dataCenterId": "EU-RO-1"})
	other := made("/v1/networkvolumes", map[string]any{"name": "other", "size": 10, "dataCenterId": "EU-RO-1"})
	gpuPod := map[string]any{"imageName": "a:1", "gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range gpuPod {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	networked := made("/v1/pods", with("networkVolumeId", vol, "volumeMountPath", "/data"))
	volumed := made("/v1/pods", with("volumeInGb", 20))
	bare := made("/v1/pods", with("volumeInGb", 0))

	persistent := func(size int, path string) map[string]any {
		return map[string]any{"mounts": map[string]any{"persistent": map[string]any{"size": size, "path": path}}}
	}
	network := func(id, path string) map[string]any {
		mounts := []map[string]any{}
		if id != "" {
			mounts = append(mounts, map[string]any{"volumeId": id, "path": path})
		}
		return map[string]any{"mounts": map[string]any{"network": mounts}}
	}
	for _, c := range []struct {
		name   string
		pod    string
		v1, v2 map[string]any // nil: the surface cannot say it
		field  [2]string      // "": accepted
	}{
		{"a pod volume on a network-volume pod", networked, map[string]any{"volumeInGb": 30}, persistent(30, "/data"),
			[2]string{"volumeInGb", "mounts.persistent.size"}},
		{"a pod volume on a pod without mounts", bare, map[string]any{"volumeInGb": 30}, persistent(30, "/w"),
			[2]string{"volumeInGb", "mounts.persistent.size"}},
		{"a network volume on a pod without one", volumed, nil, network(vol, "/data"), [2]string{"", "mounts.network.volumeId"}},
		{"another network volume", networked, nil, network(other, "/data"), [2]string{"", "mounts.network.volumeId"}},
		{"no network volume", networked, nil, network("", ""), [2]string{"", "mounts.network.volumeId"}},
		{"no pod volume", volumed, map[string]any{"volumeInGb": 0}, nil, [2]string{"volumeInGb", ""}},
		{"a bigger pod volume, moved", volumed, map[string]any{"volumeInGb": 40, "volumeMountPath": "/w2"}, persistent(50, "/w3"), [2]string{}},
		{"the network volume moved", networked, map[string]any{"volumeMountPath": "/d2"}, network(vol, "/d3"), [2]string{}},
		{"the same network volume, no pod volume", networked, map[string]any{"volumeInGb": 0}, network(vol, "/d3"), [2]string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			for i, surface := range []struct {
				path string
				body map[string]any
			}{{"/v1/pods/" + c.pod, c.v1}, {"/v2/pods/" + c.pod, c.v2}} {
				if surface.body == nil {
					continue
				}
				_, before := s.call("GET", "/v1/pods/"+c.pod, nil)
				got := s.rest("PATCH", surface.path, surface.body)
				_, after := s.call("GET", "/v1/pods/"+c.pod, nil)
				switch {
				case c.field[i] == "" && got.refused:
					t.Errorf("PATCH %s refused: %d %s", surface.path, got.status, got.text)
				case c.field[i] != "" && (!got.refused || got.status != 400):
					t.Errorf("PATCH %s: %d, want 400 naming %s", surface.path, got.status, c.field[i])
				case c.field[i] != "" && !strings.Contains(got.text, c.field[i]):
					t.Errorf("PATCH %s's refusal does not name %q: %s", surface.path, c.field[i], got.text)
				case c.field[i] != "" && fmt.Sprint(before) != fmt.Sprint(after):
					t.Errorf("PATCH %s refused and changed the pod: %v, then %v", surface.path, before, after)
				}
			}
		})
	}
	s.t = t
}

// What clients read of an endpoint through REST v1: dataCenterIds inside
// v1.json's enum — an endpoint created without a choice answers v1.json's
// default, as RunPod does, not this host's own name — and, beside RunPod's
// documented fields, the GraphQL-shaped gpuIds, locations and flashBootType
// runpodctl reads and sends back to saveEndpoint; an empty gpuIds there
// leaves the endpoint's GPU types alone.
func TestEndpointReadsAsClientsExpect(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "shared", "spec", "runpod-openapi", "v1.json"))
	if err != nil {
		t.Fatalf("RunPod's v1.json (beside the repository, as in CI): %v", err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	var spec struct {
		Default []string `json:"default"`
		Items   struct {
			Enum []string `json:"enum"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc.Components.Schemas["Endpoint"].Properties["dataCenterIds"], &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Default) == 0 || len(spec.Items.Enum) == 0 {
		t.Fatalf("v1.json's Endpoint.dataCenterIds has no default or enum: %+v", spec)
	}
	a := start(t, app.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quiet, APIKey: "k-reads", Backend: app.DockerOff,
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }})
	defer stop(t, a)
	s := &surfaces{t: t, url: a.URL(), key: "k-reads"}
	_, tpl := s.call("POST", "/v1/templates", map[string]any{"name": "w", "imageName": "worker:1", "isServerless": true})
	strs := func(v any) []string {
		var out []string
		for _, x := range v.([]any) {
			out = append(out, x.(string))
		}
		return out
	}
	for _, c := range []struct {
		name      string
		body      map[string]any
		dcs       []string // dataCenterIds answered
		locations string
	}{
		{"no data centre chosen", map[string]any{"name": "plain", "gpuTypeIds": []string{"ADA_24", "NVIDIA GeForce RTX 4090"}, "flashboot": true},
			spec.Default, mgmt.DataCenterID},
		{"two chosen", map[string]any{"name": "placed", "gpuTypeIds": []string{"ADA_24", "NVIDIA GeForce RTX 4090"}, "flashboot": true, "dataCenterIds": []string{"EU-RO-1", "US-TX-3"}},
			[]string{"EU-RO-1", "US-TX-3"}, "EU-RO-1,US-TX-3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			body := map[string]any{"templateId": tpl["id"]}
			for k, v := range c.body {
				body[k] = v
			}
			_, created := s.call("POST", "/v1/endpoints", body)
			id, _ := created["id"].(string)
			if id == "" {
				t.Fatalf("create: %v", created)
			}
			_, got := s.call("GET", "/v1/endpoints/"+id, nil)
			_, list := s.call("GET", "/v1/endpoints/"+id+"?includeWorkers=true", nil)
			_, updated := s.call("PATCH", "/v1/endpoints/"+id, map[string]any{"workersMax": 2})
			for what, m := range map[string]map[string]any{"create": created, "get": got, "get with workers": list, "update": updated} {
				dcs := strs(m["dataCenterIds"])
				for _, dc := range dcs {
					if !slices.Contains(spec.Items.Enum, dc) {
						t.Errorf("%s: dataCenterIds holds %q, outside v1.json's enum", what, dc)
					}
				}
				if !slices.Equal(dcs, c.dcs) || m["gpuIds"] != "ADA_24,NVIDIA GeForce RTX 4090" || m["locations"] != c.locations || m["flashBootType"] != "FLASHBOOT" {
					t.Errorf("%s: dataCenterIds %v gpuIds %v locations %v flashBootType %v; want %v, the GPU ids joined, %q, FLASHBOOT",
						what, dcs, m["gpuIds"], m["locations"], m["flashBootType"], c.dcs, c.locations)
				}
			}
			// runpodctl's replay (UpdateEndpointModels) of what it read,
			// with the empty gpuIds it sends when it read none.
			read, _ := got["gpuIds"].(string)
			locations, _ := got["locations"].(string)
			flash, _ := got["flashBootType"].(string)
			for _, gpus := range []string{read, ""} {
				if o := s.graphql(`mutation { saveEndpoint(input: {id: "` + id + `", name: "` + c.body["name"].(string) + `", templateId: "` + tpl["id"].(string) + `", gpuIds: ` + q(gpus) +
					`, locations: ` + q(locations) + `, flashBootType: ` + flash + `, modelReferences: []}) { id } }`); o.refused {
					t.Fatalf("saveEndpoint with gpuIds %q: %s", gpus, o.text)
				}
				_, after := s.call("GET", "/v1/endpoints/"+id, nil)
				if !slices.Equal(strs(after["gpuTypeIds"]), []string{"ADA_24", "NVIDIA GeForce RTX 4090"}) || !slices.Equal(strs(after["dataCenterIds"]), c.dcs) || after["flashboot"] != true {
					t.Errorf("after saveEndpoint with gpuIds %q: %v", gpus, after)
				}
			}
		})
	}
	s.t = t
}
