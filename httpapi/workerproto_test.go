package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/worker"
)

// The listener containers reach (WorkerHandler) and the API serve the same
// worker protocol: every /v2/{endpointId} route that lets a worker's own
// key through is served by both, WorkerHandler serves nothing else, and
// every URL a worker is given resolves there.
func TestWorkerRoutesServedByBothListeners(t *testing.T) {
	b := apptest.Start(t, apptest.Config(t, apitest.Key))
	api, q := b.API(), b.Queue()
	main, wk := api.Handler(), api.WorkerHandler()

	do := func(h http.Handler, method, path, key string) int {
		// A cancelled request: long polls (job-take, job-stop) answer at
		// once, and only the routing and the key check matter here.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(`{"output":1}`))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	rec := httptest.NewRecorder()
	main.ServeHTTP(rec, func() *http.Request {
		r := httptest.NewRequest("POST", "/v1/templates", strings.NewReader(`{"name":"t","imageName":"echo:1","isServerless":true}`))
		r.Header.Set("Authorization", "Bearer "+apitest.Key)
		return r
	}())
	tpl := decodeMap(t, rec.Body.Bytes())
	rec = httptest.NewRecorder()
	main.ServeHTTP(rec, func() *http.Request {
		r := httptest.NewRequest("POST", "/v1/endpoints", strings.NewReader(`{"templateId":"`+tpl["id"].(string)+`"}`))
		r.Header.Set("Authorization", "Bearer "+apitest.Key)
		return r
	}())
	ep := decodeMap(t, rec.Body.Bytes())["id"].(string)
	reg, err := q.RegisterWorker(ep, true)
	if err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("{endpointId}", ep, "{workerId}", reg.WorkerID, "{jobId}", "job1")

	// Which routes of each router let the worker's key through.
	workerServed := func(h http.Handler) []string {
		var out []string
		err := h.(*mux.Router).Walk(func(rt *mux.Route, _ *mux.Router, _ []*mux.Route) error {
			tpl, err := rt.GetPathTemplate()
			if err != nil || !strings.HasPrefix(tpl, "/v2/") || tpl == "/v2/openapi.json" ||
				tpl == "/v2/serverless/{id}/webhooks/git" {
				return nil // the document and the signed git webhook take no key
			}
			methods, _ := rt.GetMethods()
			for _, m := range methods {
				path := fill.Replace(tpl)
				path = strings.NewReplacer("{id}", "x", "{podId}", "x").Replace(path)
				if code := do(h, m, path, reg.Key); code != http.StatusUnauthorized && code != http.StatusNotFound {
					out = append(out, m+" "+tpl)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	onMain, onWorker := workerServed(main), workerServed(wk)
	var table []string
	for _, rt := range api.WorkerRoutes() {
		table = append(table, rt.Method+" /v2/{endpointId}"+rt.Path)
	}
	slices.Sort(table)
	if !slices.Equal(onMain, table) || !slices.Equal(onWorker, table) {
		t.Errorf("worker routes disagree:\n  table:          %v\n  API:            %v\n  worker listener: %v", table, onMain, onWorker)
	}
	if len(table) < 6 {
		t.Errorf("worker route table: %v", table)
	}

	// Every URL the platform gives a worker, and the ones the SDK derives
	// from them (job-take-batch, job-stop), resolve on the worker listener.
	env := worker.PlatformEnv("http://berth", ep, reg.WorkerID, reg.Key, 1000)
	take := env["RUNPOD_WEBHOOK_GET_JOB"]
	urls := map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB": take, "RUNPOD_WEBHOOK_PING": env["RUNPOD_WEBHOOK_PING"],
		"RUNPOD_WEBHOOK_POST_OUTPUT": env["RUNPOD_WEBHOOK_POST_OUTPUT"], "RUNPOD_WEBHOOK_POST_STREAM": env["RUNPOD_WEBHOOK_POST_STREAM"],
		"job-take-batch": strings.Replace(take, "/job-take/", "/job-take-batch/", 1),
		"job-stop":       strings.Replace(take, "/job-take/", "/job-stop/", 1),
	}
	for name, raw := range urls {
		u, err := url.Parse(strings.ReplaceAll(raw, "$ID", "job1"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		method := http.MethodGet
		if strings.Contains(name, "POST") {
			method = http.MethodPost
		}
		if code := do(wk, method, u.RequestURI(), reg.Key); code == http.StatusNotFound || code == http.StatusMethodNotAllowed || code == http.StatusUnauthorized {
			t.Errorf("%s %s on the worker listener: %d", method, u.RequestURI(), code)
		}
	}

	// Nothing else is served there, whatever the key.
	for _, p := range []string{"/v2/" + ep + "/run", "/v2/" + ep + "/status/j1", "/v2/" + ep + "/health", "/v1/endpoints",
		"/v1/endpoints/" + ep + "/worker-env", "/metrics", "/v2/openapi.json", "/v2/pods", "/v2/serverless/" + ep + "/workers", "/graphql", "/"} {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if code := do(wk, m, p, apitest.Key); code != http.StatusNotFound {
				t.Errorf("%s %s on the worker listener: %d, want 404", m, p, code)
			}
		}
	}
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return m
}
