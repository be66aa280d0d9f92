package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/queue"
)

// Fuzz targets for every parser of client input, driven through the real
// router as a client would reach it. The property, for any input: no panic
// (the recoverer would turn one into a 500), never a 5xx, and what is
// accepted can be read back. Structured targets also check that input
// within the documented rules is accepted and input outside them refused
// with a 400 naming the field. Seed corpora: testdata/fuzz/<Target>/;
// plain `go test` runs them, `.ci/run` adds a short -fuzz run of each.

// fuzzAPI is one Berth (store, queue, router) shared by a target's runs.
type fuzzAPI struct {
	h    http.Handler
	q    *queue.Service
	ep   string
	tpl  string
	job  string // a queued job
	done string // a completed job: long polls on it answer at once
	pod  string
	podv string // a pod with a network volume
	vol  string
	auth string
}

func newFuzzAPI(f testing.TB) *fuzzAPI {
	// Berth as app composes it, served straight to a recorder (no
	// listener round trip per input). A 1 ms job-take hold: a fuzzed long
	// poll returns at once instead of holding the run.
	e := &apitest.Env{Cfg: apptest.Config(f, apitest.Key)}
	e.Cfg.Queue.TakeHold = time.Millisecond
	// On the fake backend: pods and workers run programs that idle until
	// stopped, so a followed log never ends by itself (do bounds it).
	apptest.OnFake(f, &e.Cfg, apitest.PodGPUs, "echo:latest", "busybox:latest", "busybox", "alpine:3") // the seeds' pod images
	b := apptest.Start(f, e.Cfg)
	a := &fuzzAPI{h: b.API().Handler(), q: b.Queue(), auth: "Bearer " + apitest.Key}
	a.tpl = a.mustID(f, "POST", "/v1/templates", `{"name":"fuzz-tpl","imageName":"echo:latest","isServerless":true}`)
	a.ep = a.mustID(f, "POST", "/v1/endpoints", `{"templateId":"`+a.tpl+`","name":"fuzz-ep"}`)
	a.job = a.mustID(f, "POST", "/v2/"+a.ep+"/run", `{"input":{"seed":true}}`)
	a.done = a.mustID(f, "POST", "/v2/"+a.ep+"/run", `{"input":{"seed":"done"}}`)
	if rec := a.do("GET", "/v2/"+a.ep+"/job-take/fseed", nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), a.job) {
		f.Fatalf("job-take: %d %s", rec.Code, rec.Body)
	}
	if rec := a.do("POST", "/v2/"+a.ep+"/job-done/fseed/"+a.job, []byte(`{"output":1}`)); rec.Code != 200 {
		f.Fatalf("job-done: %d %s", rec.Code, rec.Body)
	}
	a.job, a.done = a.done, a.job // the first job was taken first: it is the completed one
	a.pod = a.mustID(f, "POST", "/v1/pods", `{"name":"fuzz-pod","imageName":"busybox:latest","computeType":"CPU"}`)
	a.vol = a.mustID(f, "POST", "/v1/networkvolumes", `{"name":"fuzz-vol","size":10,"dataCenterId":"US-KS-2"}`)
	a.podv = a.mustID(f, "POST", "/v2/pods", `{"name":"fuzz-podv","image":"busybox:latest","cpu":{"id":"cpu3c","vcpuCount":2},"mounts":{"network":[{"volumeId":"`+a.vol+`","path":"/data"}]}}`)
	return a
}

func (a *fuzzAPI) do(method, target string, body []byte) *httptest.ResponseRecorder {
	// Every request is bounded: a followed log of a running pod streams
	// until its client goes away.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, method, "http://berth"+target, bytes.NewReader(body))
	req.Header.Set("Authorization", a.auth)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	return rec
}

func (a *fuzzAPI) mustID(f testing.TB, method, path, body string) string {
	rec := a.do(method, path, []byte(body))
	var m map[string]any
	if rec.Code/100 != 2 || json.Unmarshal(rec.Body.Bytes(), &m) != nil || m["id"] == nil {
		f.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	return m["id"].(string)
}

// check is the property every target shares: no 5xx, and an error answer
// is a JSON object with a message.
func check(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var m map[string]any
		// job API {"error"}, v1 {"message"}, v2 RFC 9457 {"title","detail"}
		if json.Unmarshal(rec.Body.Bytes(), &m) != nil || (m["error"] == nil && m["message"] == nil && m["title"] == nil) {
			t.Fatalf("%s: %d with a body that is not an error object: %q", what, rec.Code, rec.Body)
		}
	}
}

// FuzzRunBody: any bytes as a /run body. /runsync decodes with the same
// parseSubmission and then waits at least 1 s, which would slow the
// fuzzer a thousandfold; its route is in the seed-corpus tests instead.
func FuzzRunBody(f *testing.F) {
	for _, s := range []string{`{"input":{}}`, `{"input":{"prompt":"hi"},"webhook":"https://example.com/h","policy":{"ttl":60000,"executionTimeout":5000,"lowPriority":true}}`,
		`{}`, `[]`, `null`, `{"input":[]}`, `{"input":{},"policy":{"ttl":"x"}}`, `{"input":{},"webhook":"ftp://x"}`, `{"input":{"a":1e999}}`, "\xff\xfe"} {
		f.Add([]byte(s))
	}
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := a.run(body)
		check(t, "run "+string(body), rec)
		if rec.Code != 200 {
			return
		}
		var m struct{ ID string }
		if json.Unmarshal(rec.Body.Bytes(), &m) != nil || m.ID == "" {
			t.Fatalf("accepted without an id: %s", rec.Body)
		}
		if st := a.do("GET", "/v2/"+a.ep+"/status/"+m.ID, nil); st.Code != 200 {
			t.Fatalf("accepted job %s not readable: %d %s", m.ID, st.Code, st.Body)
		}
		a.do("POST", "/v2/"+a.ep+"/cancel/"+m.ID, nil) // keep the queue small
	})
}

func (a *fuzzAPI) run(body []byte) *httptest.ResponseRecorder {
	return a.do("POST", "/v2/"+a.ep+"/run", body)
}

// FuzzRunFields: a /run body built from its fields; the rules (input a
// JSON object; webhook an http(s) URL with a host; ttl and
// executionTimeout integers in range) decide the answer.
func FuzzRunFields(f *testing.F) {
	f.Add(`{"k":"v"}`, "https://example.com/hook", int64(60000), int64(5000), true)
	f.Add(`{}`, "", int64(0), int64(0), false)
	f.Add(`[1]`, "http://", int64(-1), int64(1<<40), false)
	f.Add(`{"k":`, "not a url", int64(10000), int64(1), true)
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, input, webhook string, ttl, exec int64, low bool) {
		body := map[string]any{}
		var in any
		inputOK := json.Unmarshal([]byte(input), &in) == nil && strings.HasPrefix(strings.TrimSpace(input), "{")
		if json.Valid([]byte(input)) {
			body["input"] = json.RawMessage(input)
		} else {
			body["input"] = input // a string: not an object
		}
		whOK := true
		if webhook != "" {
			body["webhook"] = webhook
			u, err := url.Parse(webhook)
			whOK = err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
		}
		pol := map[string]any{"lowPriority": low}
		polOK := true
		if ttl != 0 {
			pol["ttl"] = ttl
			polOK = polOK && ttl >= queue.MinTTL.Milliseconds() && ttl <= queue.MaxTTL.Milliseconds()
		}
		if exec != 0 {
			pol["executionTimeout"] = exec
			polOK = polOK && exec >= queue.MinExecutionTimeout.Milliseconds() && exec <= queue.MaxExecutionTimeout.Milliseconds()
		}
		body["policy"] = pol
		raw, err := json.Marshal(body)
		if err != nil {
			t.Skip()
		}
		rec := a.do("POST", "/v2/"+a.ep+"/run", raw)
		check(t, string(raw), rec)
		valid := inputOK && whOK && polOK
		if valid != (rec.Code == 200) {
			t.Fatalf("%s: %d %s; the rules say valid=%v (input %v, webhook %v, policy %v)", raw, rec.Code, rec.Body, valid, inputOK, whOK, polOK)
		}
		if !valid && rec.Code != 400 {
			t.Fatalf("%s: %d, want 400", raw, rec.Code)
		}
		if valid {
			var m struct{ ID string }
			json.Unmarshal(rec.Body.Bytes(), &m)
			a.do("POST", "/v2/"+a.ep+"/cancel/"+m.ID, nil)
		}
	})
}

// FuzzWorkerBodies: any bytes as a job-done or job-stream body (the SDK
// sends raw JSON as form content), for an unknown and for the queued job.
func FuzzWorkerBodies(f *testing.F) {
	for _, s := range []string{`{"output":{"a":1}}`, `{"error":"boom"}`, `{"output":"x","stopPod":true}`, `[{"output":1}]`,
		`{"output":[1,2]}`, `{"error":{"type":"E","message":"m"}}`, `output=1`, ``, `null`, `{"output":`} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
	}
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		method, path, rec := a.workerBody(body, which)
		check(t, method+" "+path+" "+string(body), rec)
	})
}

// workerBody posts body to job-done or job-stream as which selects: bits
// 0-1 the route and form, bit 2 the queued job rather than an unknown one.
func (a *fuzzAPI) workerBody(body []byte, which uint8) (string, string, *httptest.ResponseRecorder) {
	job := "no-such-job"
	if which&4 != 0 {
		job = a.job
	}
	var path string
	switch which % 4 {
	case 0:
		path = "/v2/" + a.ep + "/job-done/fw/" + job
	case 1:
		path = "/v2/" + a.ep + "/job-stream/fw/" + job
	case 2:
		path = "/v2/" + a.ep + "/job-done/fw/" + job + "?isStream=true"
	default:
		path = "/v2/" + a.ep + "/job-done/fw/" + job + "?isStream=false&gpu=X"
	}
	return "POST", path, a.do("POST", path, body)
}

// FuzzQuery: any query string on every route that reads one.
func FuzzQuery(f *testing.F) {
	for i, q := range []string{"wait=1000", "wait=-1", "wait=99999999999999999999", "ttl=60000", "ttl=x", "batch_size=3", "batch_size=0",
		"job_id=a,b,,c&status=unhealthy&check=x&reason=y", "tail=10&follow=false&jobId=j", "tail=-3", "follow=maybe",
		"computeType=GPU&gpuTypeId=NVIDIA+GeForce+RTX+4090&desiredStatus=RUNNING", "includeTemplate=true&includeWorkers=true",
		"status=COMPLETED&limit=5", "limit=-1", "%zz", "a=%00&b=\xff",
		"include=AVAILABILITY&product=POD,SERVERLESS&count=2", "lastN=3&startTime=2026-01-01T00:00:00Z", "include=GPU_AVAILABILITY,CPU_AVAILABILITY",
		"cudaVersions=12.4,x&minCudaVersion=12", "product=,,", "lastN=99999999999999999999", "window=day", "window=%1b[2J"} {
		f.Add(uint8(i), q)
	}
	a := newFuzzAPI(f)
	routes := []struct{ method, path string }{
		{"POST", "/v2/{ep}/status-sync/{job}"}, {"GET", "/v2/{ep}/stream/{job}"}, {"GET", "/v2/{ep}/status/{job}"},
		{"GET", "/v2/{ep}/job-take/fq"}, {"GET", "/v2/{ep}/job-take-batch/fq"}, {"GET", "/v2/{ep}/ping/fq"},
		{"GET", "/v2/{ep}/health"}, {"GET", "/v1/endpoints"}, {"GET", "/v1/endpoints/{ep}"}, {"GET", "/v1/templates"},
		{"GET", "/v1/pods"}, {"GET", "/v1/pods/{pod}"}, {"GET", "/v1/networkvolumes"}, {"GET", "/v1/billing/pods"},
		{"GET", "/v1/billing/endpoints"}, {"GET", "/v1/billing/networkvolumes"}, {"GET", "/v1/pods/{pod}/logs"},
		{"GET", "/v1/endpoints/{ep}/workers/fq/logs"}, {"GET", "/v1/endpoints/{ep}/jobs"}, {"GET", "/v1/endpoints/{ep}/queue"},
		{"GET", "/v1/gpus"}, {"GET", "/v2/{ep}/status-sync/no-such-job"}, {"GET", "/v1/endpoints/{ep}/jobs/{job}"},
		{"GET", "/v2/pods"}, {"GET", "/v2/serverless"}, {"GET", "/v2/serverless/{ep}"}, {"GET", "/v2/serverless/{ep}/workers"},
		{"GET", "/v2/templates"}, {"GET", "/v2/billing"}, {"GET", "/v2/billing/pods"}, {"GET", "/v2/catalog/gpus"},
		{"GET", "/v2/catalog/templates"}, {"GET", "/v2/network-volumes"},
		{"GET", "/v2/catalog/cpus"}, {"GET", "/v2/catalog/datacenters"}, {"GET", "/v2/billing/serverless"},
		{"GET", "/v1/endpoints/{ep}/metrics"},
	}
	f.Fuzz(func(t *testing.T, which uint8, query string) {
		r := routes[int(which)%len(routes)]
		// Long polls on the completed job answer at once whatever wait says.
		p := strings.NewReplacer("{ep}", a.ep, "{job}", a.done, "{pod}", a.pod).Replace(r.path)
		target := p + "?" + query
		if _, err := url.ParseRequestURI(target); err != nil || strings.ContainsAny(query, " \r\n\t#") {
			t.Skip() // not a request a client can send
		}
		rec := a.do(r.method, target, nil)
		if rec.Code == http.StatusNotFound && strings.Contains(rec.Body.String(), "no such route") {
			t.Fatalf("%s %s: route not matched", r.method, target)
		}
		check(t, r.method+" "+target, rec)
	})
}

// FuzzManagementBodies: any bytes as the body of every v1 management
// write; an accepted create is read back.
func FuzzManagementBodies(f *testing.F) {
	for i, s := range []string{
		`{"name":"t1","imageName":"img:1","isServerless":true,"env":{"A":"b"},"containerDiskInGb":10}`,
		`{"templateId":"{tpl}","name":"e1","workersMin":0,"workersMax":2,"gpuTypeIds":["NVIDIA GeForce RTX 4090"]}`,
		`{"name":"p1","imageName":"busybox","computeType":"CPU","ports":["8888/http","22/tcp"]}`,
		`{"name":"v1","size":15,"dataCenterId":"US-KS-2"}`,
		`{"name":"r1","username":"u","password":"p"}`,
		`{"workersMax":5,"idleTimeout":10}`, `{"name":"renamed"}`, `{"size":20}`,
		`{"name":1}`, `{"unknown":true}`, `{"workersMin":5,"workersMax":1}`, `{"env":[1]}`, `[]`, ``, `{"name":"x"}{}`,
	} {
		f.Add(uint8(i), []byte(s))
	}
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		r, body, rec := a.mgmtBody(which, body)
		check(t, r.method+" "+r.path+" "+string(body), rec)
		if rec.Code/100 != 2 || r.read == "" {
			return
		}
		var m struct{ ID string }
		if json.Unmarshal(rec.Body.Bytes(), &m) != nil || m.ID == "" {
			t.Fatalf("created without an id: %s", rec.Body)
		}
		if g := a.do("GET", r.read+m.ID, nil); g.Code != 200 {
			t.Fatalf("created %s not readable: %d %s", m.ID, g.Code, g.Body)
		}
		a.do("DELETE", r.read+m.ID, nil) // keep names free and the store small
	})
}

type mgmtRoute struct{ method, path, read string }

var mgmtRoutes = []mgmtRoute{
	{"POST", "/v1/templates", "/v1/templates/"}, {"POST", "/v1/endpoints", "/v1/endpoints/"}, {"POST", "/v1/pods", "/v1/pods/"},
	{"POST", "/v1/networkvolumes", "/v1/networkvolumes/"}, {"POST", "/v1/containerregistryauth", "/v1/containerregistryauth/"},
	{"PATCH", "/v1/templates/{tpl}", ""}, {"PATCH", "/v1/endpoints/{ep}", ""}, {"POST", "/v1/endpoints/{ep}/update", ""},
	{"PATCH", "/v1/pods/{pod}", ""}, {"PATCH", "/v1/networkvolumes/{vol}", ""},
	{"POST", "/v1/pods/{pod}/stop", ""}, {"POST", "/v1/pods/{pod}/start", ""},
}

// mgmtBody sends body to the management write which selects, with the
// seed ids ({tpl}, {ep}, {pod}, {vol}) filled in.
func (a *fuzzAPI) mgmtBody(which uint8, body []byte) (mgmtRoute, []byte, *httptest.ResponseRecorder) {
	r := mgmtRoutes[int(which)%len(mgmtRoutes)]
	rp := strings.NewReplacer("{ep}", a.ep, "{tpl}", a.tpl, "{podv}", a.podv, "{pod}", a.pod, "{vol}", a.vol)
	body = []byte(rp.Replace(string(body)))
	return r, body, a.do(r.method, rp.Replace(r.path), body)
}

// FuzzGraphQL: any bytes as a POST /graphql body, and any query document
// with variables. GraphQL answers refusals 200 with errors[]; the property
// is no 5xx and no "internal error" (a resolver panic or an unmapped
// failure) in the errors.
func FuzzGraphQL(f *testing.F) {
	for _, s := range []string{
		`{"query":"query { myself { endpoints { id name templateId } } }"}`,
		`{"query":"mutation($input: EndpointInput!) { saveEndpoint(input: $input) { id } }","variables":{"input":{"name":"g","templateId":"{tpl}"}}}`,
		`{"query":"mutation { saveTemplate(input: {name: \"gt\", imageName: \"a:1\", containerDiskInGb: 5, volumeInGb: 0, dockerArgs: \"\", env: []}) { id } }"}`,
		`{"query":"query { pod(input: {podId: \"{pod}\"}) { id desiredStatus } }"}`,
		`{"query":"query { gpuTypes { id displayName memoryInGb } }"}`,
		`{"query":"mutation { deleteTemplate(templateName: \"nope\") }"}`,
		`{"query":"{ myself { id } }","variables":{"x":[1,{"y":null}]},"operationName":"Nope"}`,
		`{"query":"{{{{"}`, `{"query":""}`, `{"query":1}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		body, rec := a.graphql(body)
		if rec.Code >= 500 {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
		var out struct {
			Errors []struct{ Message string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: %d, the answer is not JSON: %q", body, rec.Code, rec.Body)
		}
		if rec.Code != 200 && len(out.Errors) == 0 {
			t.Fatalf("%s: %d without errors[]", body, rec.Code)
		}
		for _, e := range out.Errors {
			if strings.Contains(e.Message, "internal error") {
				t.Fatalf("%s: %s", body, rec.Body)
			}
		}
	})
}

func (a *fuzzAPI) graphql(body []byte) ([]byte, *httptest.ResponseRecorder) {
	body = []byte(strings.NewReplacer("{ep}", a.ep, "{tpl}", a.tpl, "{pod}", a.pod).Replace(string(body)))
	return body, a.do("POST", "/graphql", body)
}

// FuzzV2Bodies: any bytes as the body of every REST v2 write; an
// accepted create is read back.
func FuzzV2Bodies(f *testing.F) {
	for i, s := range []string{
		`{"name":"t2","image":"busybox:1","args":"sleep 1","ports":["8000/http"],"env":{"A":"1"}}`,
		`{"name":"e2","type":"QUEUE","templateId":"{tpl}","workers":{"min":0,"max":1,"idleTimeout":5}}`,
		`{"name":"p2","image":"alpine:3","cpu":{"id":"cpu3g","vcpuCount":2}}`,
		`{"name":"v2","size":10,"dataCenter":"EU-RO-1","type":"HIGH_PERFORMANCE"}`,
		`{"name":"r2","username":"u","password":"p"}`,
		`{"env":{"B":"2"}}`, `{"scaling":{"type":"REQUEST_COUNT","requestCount":3}}`, `{"name":"p2b"}`, `{"size":20}`,
		`{"action":"stop"}`, `{"keys":["not a key"]}`, `{"bogus":1}`, `[]`, ``,
	} {
		f.Add(uint8(i), []byte(s))
	}
	// The pod with a network volume (v2Routes[11]).
	for _, s := range []string{`{"mounts":{"network":[]}}`, `{"mounts":{"network":[{"volumeId":"{vol}","path":"/d2"}]}}`,
		`{"mounts":{"persistent":{"size":20,"path":"/w"}}}`, `{"mounts":{}}`, `{"mounts":{"network":[{"volumeId":"x","path":"/d"}]}}`} {
		f.Add(uint8(11), []byte(s))
	}
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		r, body, rec := a.v2Body(which, body)
		check(t, r.method+" "+r.path+" "+string(body), rec)
		if rec.Code/100 != 2 || r.read == "" {
			return
		}
		var m struct{ ID string }
		if json.Unmarshal(rec.Body.Bytes(), &m) != nil || m.ID == "" {
			t.Fatalf("created without an id: %s", rec.Body)
		}
		if g := a.do("GET", r.read+m.ID, nil); g.Code != 200 {
			t.Fatalf("created %s not readable: %d %s", m.ID, g.Code, g.Body)
		}
		a.do("DELETE", r.read+m.ID, nil)
	})
}

var v2Routes = []mgmtRoute{
	{"POST", "/v2/templates", "/v2/templates/"}, {"POST", "/v2/serverless", "/v2/serverless/"}, {"POST", "/v2/pods", "/v2/pods/"},
	{"POST", "/v2/network-volumes", "/v2/network-volumes/"}, {"POST", "/v2/registries", "/v2/registries/"},
	{"PATCH", "/v2/templates/{tpl}", ""}, {"PATCH", "/v2/serverless/{ep}", ""}, {"PATCH", "/v2/pods/{pod}", ""},
	{"PATCH", "/v2/network-volumes/{vol}", ""}, {"POST", "/v2/pods/{pod}/action", ""}, {"PUT", "/v2/account/ssh-keys", ""},
	{"PATCH", "/v2/pods/{podv}", ""},
}

func (a *fuzzAPI) v2Body(which uint8, body []byte) (mgmtRoute, []byte, *httptest.ResponseRecorder) {
	r := v2Routes[int(which)%len(v2Routes)]
	rp := strings.NewReplacer("{ep}", a.ep, "{tpl}", a.tpl, "{podv}", a.podv, "{pod}", a.pod, "{vol}", a.vol)
	body = []byte(rp.Replace(string(body)))
	return r, body, a.do(r.method, rp.Replace(r.path), body)
}
