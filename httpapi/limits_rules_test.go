package httpapi_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"berth/internal/apitest"
)

// TestLimitsThatArent: each "limit that isn't" an outside sweep found
// (issue 18) is a refusal now, naming the field and mgmt's range, the
// same on every surface; nothing is stored.
func TestLimitsThatArent(t *testing.T) {
	e := newValidatingServer(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	tpl := e.NewTemplate("t", "alpine:3", nil)
	endpoint := func(extra J) J {
		b := J{"name": "ep", "type": "QUEUE", "templateId": tpl.ID, "gpu": J{"pools": []string{"ADA_24"}}, "scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4}}
		for k, v := range extra {
			b[k] = v
			if v == nil {
				delete(b, k)
			}
		}
		return b
	}
	huge := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct {
		name         string
		method, path string
		body         any
		words        []string
	}{
		{"v2 workers.max 2^63-1", "POST", "/v2/serverless", endpoint(J{"workers": J{"max": math.MaxInt64}}), []string{"workers.max", "0-1000"}},
		{"v2 workers.min 1,000,000", "POST", "/v2/serverless", endpoint(J{"workers": J{"min": 1000000, "max": 1000000}}), []string{"workers.min", "0-1000"}},
		{"v2 workers.max 1e20", "POST", "/v2/serverless", `{"name":"ep","type":"QUEUE","templateId":"` + tpl.ID + `","gpu":{"pools":["ADA_24"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1e20}}`, []string{"workers.max", "0-1000", "1e+20"}},
		{"v2 gpu.count 1e9", "POST", "/v2/serverless", endpoint(J{"gpu": J{"pools": []string{"ADA_24"}, "count": 1000000000}}), []string{"gpu.count", "1-16"}},
		{"v2 vcpuCount 2^40", "POST", "/v2/serverless", endpoint(J{"gpu": nil, "cpu": []J{{"id": "cpu3c", "vcpuCount": int64(1) << 40}}}), []string{"cpu.vcpuCount", "2-256"}},
		{"v2 disk 2^63-1 (endpoint)", "POST", "/v2/serverless", endpoint(J{"image": "alpine:3", "disk": math.MaxInt64}), []string{"disk", "1-4096"}},
		{"v2 disk 2^63-1 (template)", "POST", "/v2/templates", J{"name": "big", "image": "alpine:3", "disk": math.MaxInt64}, []string{"disk", "1-4096"}},
		{"v2 1 MB name", "POST", "/v2/templates", J{"name": huge(900 << 10), "image": "alpine:3"}, []string{"name", "191"}},
		{"v2 400 KB image", "POST", "/v2/templates", J{"name": "img", "image": huge(400 << 10)}, []string{"image", "512"}},
		{"v2 queueDelay 1e308", "POST", "/v2/serverless", endpoint(J{"scaling": J{"type": "QUEUE_DELAY", "queueDelay": 1e308}}), []string{"scaling.queueDelay", "1-3600", "1e+308"}},
		{"v2 requestCount 2^63-1", "POST", "/v2/serverless", endpoint(J{"scaling": J{"type": "REQUEST_COUNT", "requestCount": math.MaxInt64}}), []string{"scaling.requestCount", "1-1000"}},
		{"v1 workersMax 1e20", "POST", "/v1/endpoints", `{"templateId":"` + tpl.ID + `","workersMax":1e20}`, []string{"workersMax", "0-1000", "1e20"}},
		{"v1 workersMax 2^63-1", "POST", "/v1/endpoints", J{"templateId": tpl.ID, "workersMax": math.MaxInt64}, []string{"workersMax", "0-1000"}},
		{"v1 1 MB name", "POST", "/v1/templates", J{"name": huge(900 << 10), "imageName": "alpine:3"}, []string{"name", "191"}},
		{"v1 400 KB image", "POST", "/v1/templates", J{"name": "img", "imageName": huge(400 << 10)}, []string{"imageName", "512"}},
		{"v1 containerDiskInGb 2^63-1", "POST", "/v1/pods", J{"imageName": "alpine:3", "containerDiskInGb": math.MaxInt64}, []string{"containerDiskInGb", "1-4096"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.T = t
			code, out := e.Call(c.method, c.path, c.body)
			if code != 400 {
				t.Fatalf("%s %s: %d, want 400: %.300s", c.method, c.path, code, out)
			}
			msg := errorText(out)
			for _, w := range c.words {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not mention %q", msg, w)
				}
			}
			if strings.Contains(msg, "-9223372036854775808") || len(out) > 4096 {
				t.Errorf("the refusal overflows or echoes the input (%d bytes): %.300s", len(out), out)
			}
		})
	}
	e.T = t
	if n := e.Count("/v1/endpoints"); n != 0 {
		t.Errorf("%d endpoints stored by refused requests", n)
	}

	// GraphQL refuses the same numbers with the same rule (its Int is 32
	// bits, so the largest fit the type and reach mgmt).
	code, out := e.Call("POST", "/graphql", J{"query": fmt.Sprintf(`mutation { saveEndpoint(input: {name: "g", templateId: "%s", workersMax: 2000000000}) { id } }`, tpl.ID)})
	if code != 200 || !strings.Contains(string(out), "workersMax must be 0-1000") {
		t.Errorf("GraphQL workersMax 2e9: %d %s", code, out)
	}

	// The largest value one surface stores reads the same on another
	// (GraphQL's Int is 32 bits).
	var big struct{ ID string }
	e.Must(201, "POST", "/v2/templates", J{"name": "biggest", "image": "alpine:3", "disk": 4096}, &big)
	code, out = e.Call("POST", "/graphql", J{"query": `{ podTemplate(id: "` + big.ID + `") { containerDiskInGb } }`})
	if code != 200 || !strings.Contains(string(out), `"containerDiskInGb":4096`) {
		t.Errorf("GraphQL reads the largest disk v2 stores as: %d %s", code, out)
	}

	// A number past GraphQL's 32-bit Int, as a literal or a variable: the
	// refusal names the field and mgmt's range.
	for _, body := range []J{
		{"query": `mutation { saveEndpoint(input: {name: "g", templateId: "` + tpl.ID + `", workersMax: 99999999999}) { id } }`},
		{"query": `mutation S($i: EndpointInput) { saveEndpoint(input: $i) { id } }`, "variables": J{"i": J{"name": "g", "templateId": tpl.ID, "workersMax": 99999999999}}},
	} {
		code, out := e.Call("POST", "/graphql", body)
		if code != 200 || !strings.Contains(string(out), "workersMax") || !strings.Contains(string(out), "0-1000 workers") {
			t.Errorf("GraphQL workersMax 99999999999: %d %s", code, out)
		}
	}

	// Volume sizes: one range, 10-4096 GB, on v1 and v2 (where it is the
	// schema's: 422).
	for _, size := range []int{9, 4097} {
		e.MustErr(400, "POST", "/v1/networkvolumes", J{"name": "v", "size": size, "dataCenterId": "EU-RO-1"}, "size", "10-4096 GB")
		e.MustProblem(422, "POST", "/v2/network-volumes", J{"name": "v", "size": size, "dataCenter": "EU-RO-1"}, "size")
	}
	for _, size := range []int{10, 4096} {
		v1 := e.NewVolume("v1", size)
		var v2 struct{ ID string }
		e.Must(201, "POST", "/v2/network-volumes", J{"name": "v2", "size": size, "dataCenter": "EU-RO-1"}, &v2)
		e.Must(204, "DELETE", "/v1/networkvolumes/"+v1.ID, nil, nil)
		e.Must(204, "DELETE", "/v2/network-volumes/"+v2.ID, nil, nil)
	}

	// A 60 KB job id is not echoed in the 404.
	ep := e.NewEndpoint(tpl.ID, nil)
	long := huge(60 << 10)
	for _, path := range []string{"/v2/" + ep.ID + "/status/" + long, "/v1/endpoints/" + ep.ID + "/jobs/" + long, "/v2/templates/" + long, "/v1/endpoints/" + long} {
		code, out := e.Call("GET", path, nil)
		if code/100 != 4 || len(out) > 1024 || !strings.Contains(string(out), "bytes)") {
			t.Errorf("GET %.60s…: %d, %d bytes: %.200s", path, code, len(out), out)
		}
	}
}

// errorText is an error body's message, whatever the surface's shape.
func errorText(out []byte) string {
	var m struct {
		Message, Error, Detail string
		Errors                 []any
	}
	json.Unmarshal(out, &m)
	return m.Message + m.Error + m.Detail
}
