package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/runtime"
	"berth/runtime/fake"
	"berth/store"
)

var pathParamRe = regexp.MustCompile(`\{[^}]+\}`)

// publicRoutes are served without a key: the API documents, as RunPod
// serves its own (TestOpenAPIDocument checks them).
var publicRoutes = []string{"GET /v1/openapi.json", "GET /v1/docs"}

// TestEveryRouteNeedsTheKey sends every documented operation without a
// key and with a wrong one: 401 in the route family's error shape.
func TestEveryRouteNeedsTheKey(t *testing.T) {
	e := newValidatingServer(t)
	served := apitest.ServedRoutes(t, e.API.Handler())
	for route, id := range apitest.DocOps(e.Doc) {
		if !slices.Contains(served, route) || slices.Contains(publicRoutes, route) {
			continue // TestOpenAPIDocument reports it
		}
		method, path, _ := strings.Cut(route, " ")
		path = pathParamRe.ReplaceAllStringFunc(path, func(p string) string {
			if p == "{templateId}" {
				return "abcdefghij"
			}
			return "x"
		})
		var body any
		if method == "POST" || method == "PATCH" {
			body = "{}"
		}
		for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Authorization": "wrong"}} {
			code, out := e.CallWith(method, path, body, hdr)
			if code != http.StatusUnauthorized {
				t.Errorf("%s (%s) with %v: %d, want 401: %s", route, id, hdr, code, out)
				continue
			}
			var m struct {
				Message, Error string
				Errors         []struct{ Message string }
			}
			json.Unmarshal(out, &m)
			if m.Message == "" && m.Error == "" && (len(m.Errors) == 0 || m.Errors[0].Message == "") {
				t.Errorf("%s: 401 body without message: %s", route, out)
			}
		}
	}
}

// testWorker is an in-test worker speaking the worker protocol with its own key.
type testWorker struct {
	e      *testEnv
	ep, id string
	key    string
}

func (e *testEnv) newWorker(endpointID string) *testWorker {
	e.T.Helper()
	var env map[string]string
	e.Must(200, "GET", "/v1/endpoints/"+endpointID+"/worker-env", nil, &env)
	return &testWorker{e: e, ep: endpointID, id: env["RUNPOD_POD_ID"], key: env["RUNPOD_AI_API_KEY"]}
}

// req sends a worker request the way runpod-python does: bare key, and
// result bodies as JSON under the form content type.
func (w *testWorker) req(method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, w.e.Base+"/v2/"+w.ep+path, rd)
	if err != nil {
		return 0, nil, err
	}
	r.Header.Set("Authorization", w.key)
	if body != "" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

func (w *testWorker) must(want int, method, path, body string) []byte {
	w.e.T.Helper()
	code, out, err := w.req(method, path, body)
	if err != nil || code != want {
		w.e.T.Fatalf("worker %s %s: %d %v, want %d: %s", method, path, code, err, want, out)
	}
	return out
}

// take takes one job, which must be there.
func (w *testWorker) take() string {
	w.e.T.Helper()
	var j struct{ ID string }
	json.Unmarshal(w.must(200, "GET", "/job-take/"+w.id+"?gpu=TEST&job_in_progress=0", ""), &j)
	return j.ID
}

// TestEveryRoute drives every documented operation through the validating
// server, successes and errors, with a worker using the worker protocol,
// and checks none was left out: the document cannot drift from the code.
func TestEveryRoute(t *testing.T) {
	e := newValidatingServer(t, apitest.WithFake(apitest.PodGPUs), apitest.WithLoopbackWebhooks)
	// The template's image prints a runpod worker's log and runs until
	// stopped; its workers say they are up.
	up := make(chan string, 4)
	e.Fake.Image("alpine:3", func(ctx context.Context, p fake.Process) int {
		io.WriteString(p.Out, apitest.WorkerLog)
		if w := p.Labels[runtime.LabelWorker]; w != "" {
			select {
			case up <- w:
			default:
			}
		}
		<-ctx.Done()
		return 0
	})
	// Docs and metrics.
	e.Must(200, "GET", "/v1/openapi.json", nil, nil)
	e.Must(200, "GET", "/v2/openapi.json", nil, nil)
	e.Must(200, "GET", "/v1/docs", nil, nil)
	// berth apply's route (package apply and compat test it): a dry run,
	// an apply, and a file that does not decode.
	applyBody := J{"templates": []J{{"name": "applied", "imageName": "me/applied:1", "isServerless": true}},
		"endpoints": []J{{"name": "applied", "template": "applied", "workersMax": 0}}}
	var applied struct {
		Actions []struct{ Op string }
		IDs     map[string]map[string]string
	}
	e.Must(200, "POST", "/v1/apply?dryRun=true", applyBody, &applied)
	if len(applied.Actions) != 2 || applied.Actions[0].Op != "create" {
		t.Errorf("apply dry run: %+v", applied)
	}
	e.Must(200, "POST", "/v1/apply", applyBody, &applied)
	if applied.IDs["endpoints"]["applied"] == "" {
		t.Errorf("apply: %+v", applied)
	}
	e.Must(400, "POST", "/v1/apply", J{"endpoints": []J{{"name": "x"}}}, nil)
	// GraphQL (graphqlapi tests each operation): a query and a refusal.
	var gq struct {
		Data   struct{ Myself struct{ ID string } }
		Errors []struct{ Message string }
	}
	e.Must(200, "POST", "/graphql", J{"query": "query { myself { id } }"}, &gq)
	if gq.Data.Myself.ID != "berth" || len(gq.Errors) != 0 {
		t.Errorf("/graphql myself: %+v", gq)
	}
	e.Must(200, "POST", "/graphql", J{"query": "mutation { deleteEndpoint(id: \"nosuchendpoint\") }"}, &gq)
	if len(gq.Errors) != 1 || !strings.Contains(gq.Errors[0].Message, "not found") {
		t.Errorf("/graphql refusal: %+v", gq)
	}
	e.Must(400, "POST", "/graphql", "[1]", nil)

	// Management: every resource through its life.
	auth := e.NewRegistryAuth("hub", "me", "pw")
	e.Must(200, "GET", "/v1/containerregistryauth", nil, nil)
	e.Must(200, "GET", "/v1/containerregistryauth/"+auth.ID, nil, nil)
	vol := e.NewVolume("data", 10)
	e.Must(200, "GET", "/v1/networkvolumes", nil, nil)
	e.Must(200, "GET", "/v1/networkvolumes/"+vol.ID, nil, nil)
	e.Must(200, "PATCH", "/v1/networkvolumes/"+vol.ID, J{"name": "data2"}, nil)
	e.Must(200, "POST", "/v1/networkvolumes/"+vol.ID+"/update", J{"size": 11}, nil)
	tpl := e.NewTemplate("t", "alpine:3", J{"containerRegistryAuthId": auth.ID})
	e.Must(200, "GET", "/v1/templates?includeEndpointBoundTemplates=true", nil, nil)
	e.Must(200, "GET", "/v1/templates/"+tpl.ID, nil, nil)
	// Port labels, set through GraphQL, show in /v1 as Berth's portLabels.
	e.Must(200, "POST", "/graphql", J{"query": `mutation($id: String) { saveTemplate(input: {id: $id, portsConfig: [{port: "8888", name: "Jupyter"}]}) { id } }`,
		"variables": J{"id": tpl.ID}}, nil)
	var labelled struct{ PortLabels map[string]string }
	e.Must(200, "GET", "/v1/templates/"+tpl.ID, nil, &labelled)
	if labelled.PortLabels["8888"] != "Jupyter" {
		t.Errorf("portLabels in /v1: %+v", labelled)
	}
	e.Must(200, "PATCH", "/v1/templates/"+tpl.ID, J{"readme": "r"}, nil)
	e.Must(200, "POST", "/v1/templates/"+tpl.ID+"/update", J{"isPublic": true}, nil)
	ep := e.NewEndpoint(tpl.ID, J{"networkVolumeId": vol.ID, "workersMin": 1})
	var worker string // the endpoint's container worker, in includeWorkers
	select {
	case worker = <-up:
	case <-time.After(30 * time.Second):
		t.Fatal("the endpoint's minimum worker did not start")
	}
	e.Must(200, "GET", "/v1/endpoints?includeTemplate=true&includeWorkers=true", nil, nil)
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"?includeWorkers=true", nil, nil)
	e.Must(200, "PATCH", "/v1/endpoints/"+ep.ID, J{"workersMax": 2}, nil)
	e.Must(200, "POST", "/v1/endpoints/"+ep.ID+"/update", J{"idleTimeout": 9}, nil)
	pod := e.NewPod(J{"templateId": tpl.ID, "networkVolumeId": vol.ID})
	e.Must(200, "GET", "/v1/pods?includeWorkers=true&includeMachine=true", nil, nil)
	e.Must(200, "GET", "/v1/pods/"+pod.ID+"?includeMachine=true&includeNetworkVolume=true&includeTemplate=true&includeSavingsPlans=true", nil, nil)
	e.Must(200, "PATCH", "/v1/pods/"+pod.ID, J{"name": "p"}, nil)
	e.Must(200, "POST", "/v1/pods/"+pod.ID+"/update", J{"env": J{"X": "1"}}, nil)
	for _, a := range []string{"stop", "start", "restart", "reset"} {
		e.Must(200, "POST", "/v1/pods/"+pod.ID+"/"+a, nil, nil)
	}
	for _, p := range []string{"/v1/billing/pods?grouping=podId", "/v1/billing/endpoints?bucketSize=hour", "/v1/billing/networkvolumes"} {
		e.Must(200, "GET", p, nil, nil)
	}

	// Berth's runtime extensions: GPUs, container logs, endpoint status.
	e.Must(200, "GET", "/v1/gpus", nil, nil)
	e.Must(200, "GET", "/v1/backup", nil, nil)
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"/workers/"+worker+"/logs?tail=10&jobId=job-a&follow=false", nil, nil)
	e.Must(200, "GET", "/v1/pods/"+pod.ID+"/logs?tail=1", nil, nil)
	e.MustErr(400, "GET", "/v1/pods/"+pod.ID+"/logs?tail=-1", nil, "tail")
	e.MustErr(404, "GET", "/v1/endpoints/"+ep.ID+"/workers/nosuchworker/logs", nil, "not found")
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID, nil, nil)

	// The job API and the worker protocol.
	w := e.newWorker(ep.ID)
	v2 := "/v2/" + ep.ID
	var ref struct{ ID, Status string }
	e.Must(200, "POST", v2+"/run", J{"input": J{"prompt": "hi"}, "policy": J{"ttl": 60000}, "webhook": "http://127.0.0.1:9/hook"}, &ref)
	var st map[string]any
	e.Must(200, "GET", v2+"/status/"+ref.ID, nil, &st)
	e.Must(200, "POST", v2+"/status/"+ref.ID+"?ttl=120000", nil, &st)
	e.Must(200, "GET", v2+"/health", nil, nil)
	e.Must(200, "GET", v2+"/stream/"+ref.ID+"?wait=0", nil, nil)
	if id := w.take(); id != ref.ID {
		t.Fatalf("took %s, want %s", id, ref.ID)
	}
	w.must(200, "POST", "/job-stream/"+w.id+"/"+ref.ID+"?gpu=TEST&isStream=false", `{"output": "tok"}`)
	var sr struct{ Stream []json.RawMessage }
	e.Must(200, "POST", v2+"/stream/"+ref.ID, nil, &sr)
	if len(sr.Stream) != 1 {
		t.Errorf("stream %+v", sr)
	}
	w.must(200, "GET", "/ping/"+w.id+"?job_id="+ref.ID+"&runpod_version=1.7.0", "")
	w.must(200, "POST", "/job-done/"+w.id+"/"+ref.ID+"?gpu=TEST&isStream=true", `{"output": ["tok"]}`)
	e.Must(200, "GET", v2+"/status-sync/"+ref.ID+"?wait=1000", nil, &st)
	e.Must(200, "POST", v2+"/status-sync/"+ref.ID, nil, &st)
	if st["status"] != "COMPLETED" {
		t.Errorf("status after job-done: %v", st)
	}

	// runsync: the worker takes it in a batch while the client waits.
	done := make(chan error, 1)
	go func() {
		for {
			code, out, err := w.req("GET", "/job-take-batch/"+w.id+"?batch_size=2&job_in_progress=0", "")
			if err != nil || (code != 200 && code != 204) {
				done <- fmt.Errorf("job-take-batch: %d %v %s", code, err, out)
				return
			}
			if code == 204 {
				continue
			}
			var jobs []struct{ ID string }
			json.Unmarshal(out, &jobs)
			code, out, err = w.req("POST", "/job-done/"+w.id+"/"+jobs[0].ID+"?isStream=false", `{"output": {"sum": 3}}`)
			if err == nil && code != 200 {
				err = fmt.Errorf("job-done: %d %s", code, out)
			}
			done <- err
			return
		}
	}()
	e.Must(200, "POST", v2+"/runsync?wait=10000", J{"input": J{"a": 1, "b": 2}}, &st)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st["status"] != "COMPLETED" || !reflect.DeepEqual(st["output"], map[string]any{"sum": 3.0}) {
		t.Errorf("runsync: %v", st)
	}

	// A failed job, retried, then cancelled; a retry of a queued job is refused.
	e.Must(200, "POST", v2+"/run", J{"input": J{}}, &ref)
	w.take()
	w.must(200, "POST", "/job-done/"+w.id+"/"+ref.ID+"?isStream=false", `{"error": "boom"}`)
	e.Must(200, "POST", v2+"/retry/"+ref.ID, nil, nil)
	var refused map[string]any
	e.Must(400, "POST", v2+"/retry/"+ref.ID, nil, &refused)
	if refused["status"] != "IN_QUEUE" || refused["error"] == nil {
		t.Errorf("retry of a queued job: %v", refused)
	}
	e.Must(200, "POST", v2+"/cancel/"+ref.ID, nil, nil)

	// Cancelling a running job reaches the worker through job-stop.
	e.Must(200, "POST", v2+"/run", J{"input": J{}}, &ref)
	w.take()
	e.Must(200, "POST", v2+"/cancel/"+ref.ID, nil, nil)
	var stop struct{ JobsToStop []string }
	json.Unmarshal(w.must(200, "GET", "/job-stop/"+w.id+"?gpu=TEST", ""), &stop)
	if !reflect.DeepEqual(stop.JobsToStop, []string{ref.ID}) {
		t.Errorf("job-stop: %+v", stop)
	}
	w.must(204, "GET", "/job-stop/"+w.id, "")
	w.must(204, "GET", "/job-take/"+w.id, "")
	w.must(204, "GET", "/job-take-batch/"+w.id+"?batch_size=3", "")

	e.Must(200, "POST", v2+"/run", J{"input": J{}}, nil)
	e.Must(200, "POST", v2+"/run", J{"input": J{}}, nil)
	var purged struct{ Removed int }
	e.Must(200, "POST", v2+"/purge-queue", nil, &purged)
	if purged.Removed != 2 {
		t.Errorf("purge removed %d, want 2", purged.Removed)
	}

	// Berth's read-only job views: the list, one job, the queue.
	var jobs []map[string]any
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"/jobs?status=COMPLETED,CANCELLED&limit=10", nil, &jobs)
	if len(jobs) != 4 || jobs[0]["status"] != "CANCELLED" || jobs[3]["output"] == nil || jobs[0]["input"] == nil {
		t.Errorf("job list: %v", jobs)
	}
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"/jobs", nil, &jobs)
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"/jobs/"+ref.ID, nil, nil)
	var qv map[string]any
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"/queue", nil, &qv)
	if qv["inQueue"] != 0.0 || qv["completed"] != 2.0 || qv["oldestQueuedAt"] != nil {
		t.Errorf("queue: %v", qv)
	}
	e.MustErr(400, "GET", "/v1/endpoints/"+ep.ID+"/jobs?status=DONE", nil, "status")
	e.MustErr(400, "GET", "/v1/endpoints/"+ep.ID+"/jobs?limit=0", nil, "limit")
	e.MustErr(404, "GET", "/v1/endpoints/"+ep.ID+"/jobs/no-such-job", nil, "not found")
	e.MustErr(404, "GET", "/v1/endpoints/nosuchendpoint/queue", nil, "not found")
	// The plotted series (app/series_test.go checks their content).
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"/metrics?window=day", nil, nil)
	e.MustErr(404, "GET", "/v1/endpoints/nosuchendpoint/metrics?window=day", nil, "not found")

	// Job API and worker errors.
	e.MustErr(404, "GET", v2+"/status/no-such-job", nil, "not found")
	e.MustErr(404, "GET", "/v2/nosuchendpoint/health", nil, "not found")
	e.MustErr(400, "POST", v2+"/run", J{"input": "text"}, "input")
	e.MustErr(400, "POST", v2+"/runsync?wait=5", J{"input": J{}}, "wait")
	e.MustErr(400, "GET", v2+"/status/x?ttl=1", nil, "ttl")
	code, _, _ := w.req("GET", "/job-take-batch/"+w.id+"?batch_size=0", "")
	if code != 400 {
		t.Errorf("batch_size=0: %d", code)
	}
	code, _, _ = w.req("POST", "/job-done/"+w.id+"/x", `not json`)
	if code != 400 {
		t.Errorf("job-done with a non-JSON body: %d", code)
	}

	code, metrics := e.Call("GET", "/metrics", nil)
	if code != 200 || !strings.Contains(string(metrics), "berth_queue_jobs") {
		t.Errorf("/metrics: %d", code)
	}

	// The OpenAI route (openai_test.go tests it in depth).
	for _, c := range [][2]string{{"POST", "chat/completions"}, {"POST", "completions"}, {"POST", "embeddings"}, {"POST", "responses"}, {"GET", "models"}} {
		answerOpenAI(w, `{"output": [{"object": "x"}]}`)
		var b any
		if c[0] == "POST" {
			b = J{"model": "m"}
		}
		e.Must(200, c[0], v2+"/openai/v1/"+c[1], b, nil)
	}
	e.Must(404, "POST", v2+"/openai/v1/", J{}, nil)
	e.Must(404, "GET", v2+"/openai/v1/", nil, nil)

	// Berth's key management and audit trail (docs/keys.md).
	var key struct{ ID, Key string }
	e.Must(200, "POST", "/v1/keys", J{"name": "ci-bot", "permission": "RESTRICTED", "endpoints": J{ep.ID: "READ_WRITE"}}, &key)
	e.Must(200, "GET", "/v1/keys", nil, nil)
	e.Must(200, "GET", "/v1/keys/"+key.ID, nil, nil)
	e.Must(200, "PATCH", "/v1/keys/"+key.ID, J{"enabled": false}, nil)
	e.Must(200, "GET", "/v1/audit?limit=5", nil, nil)
	e.Must(204, "DELETE", "/v1/keys/"+key.ID, nil, nil)

	// Deletes, in dependency order.
	e.Must(204, "DELETE", "/v1/pods/"+pod.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/endpoints/"+ep.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/templates/"+tpl.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/networkvolumes/"+vol.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/containerregistryauth/"+auth.ID, nil, nil)

	// Every documented operation was exercised.
	var missing []string
	for route, id := range apitest.DocOps(e.Doc) {
		if e.Seen(id) == 0 {
			missing = append(missing, id+" ("+route+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("operations not exercised: %s", strings.Join(missing, ", "))
	}
}

// TestRestartKeepsResources: close and reopen the store and server; every
// resource reads back exactly.
func TestRestartKeepsResources(t *testing.T) {
	e := newValidatingServer(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	auth := e.NewRegistryAuth("hub", "me", "pw")
	vol := e.NewVolume("data", 10)
	tpl := e.NewTemplate("t", "alpine:3", J{"containerRegistryAuthId": auth.ID, "env": J{"K": "V"}, "readme": "# r"})
	ep := e.NewEndpoint(tpl.ID, J{"networkVolumeIds": []string{vol.ID}, "gpuTypeIds": []string{"NVIDIA A40", "NVIDIA L4"}, "env": J{"E": "1"},
		"workersMin": 1, "scalerType": "REQUEST_COUNT", "flashboot": true, "minCudaVersion": "12.4"})
	pod := e.NewPod(J{"templateId": tpl.ID, "networkVolumeId": vol.ID, "locked": true, "countryCodes": []string{"NL"}})
	stopped := e.NewPod(J{"imageName": "alpine:3", "computeType": "CPU"})
	e.Must(200, "POST", "/v1/pods/"+stopped.ID+"/stop", nil, nil)
	if err := store.PutUsageInterval(e.DB, store.UsageInterval{Kind: store.UsagePod, ID: pod.ID, GPUTypeID: "NVIDIA A40", GPUCount: 1,
		Start: time.Now().Add(-2 * time.Hour), End: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}

	paths := []string{
		"/v1/containerregistryauth", "/v1/containerregistryauth/" + auth.ID,
		"/v1/networkvolumes", "/v1/networkvolumes/" + vol.ID,
		"/v1/templates?includeEndpointBoundTemplates=true", "/v1/templates/" + tpl.ID,
		"/v1/endpoints?includeTemplate=true", "/v1/endpoints/" + ep.ID,
		"/v1/pods", "/v1/pods/" + pod.ID + "?includeTemplate=true&includeNetworkVolume=true", "/v1/pods/" + stopped.ID,
		// Up to half an hour ago: the running pod's own time grows.
		"/v1/billing/pods?grouping=podId&bucketSize=hour&endTime=" + time.Now().Add(-30*time.Minute).UTC().Format(time.RFC3339),
	}
	before := map[string]string{}
	for _, p := range paths {
		before[p] = string(e.Must(200, "GET", p, nil, nil))
	}
	e.Restart()
	for _, p := range paths {
		if after := string(e.Must(200, "GET", p, nil, nil)); after != before[p] {
			t.Errorf("GET %s changed across a restart:\nbefore %s\nafter  %s", p, before[p], after)
		}
	}
	if user, pass, err := store.RegistryCredentials(e.DB, auth.ID); err != nil || user != "me" || pass != "pw" {
		t.Errorf("credentials after restart: %q %q %v", user, pass, err)
	}
	// The job API still knows the endpoint.
	e.Must(200, "GET", "/v2/"+ep.ID+"/health", nil, nil)
}
