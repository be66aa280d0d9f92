package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	berthapp "berth/app"
	"berth/gpu"
)

// get is a GET of the API with the test key, decoded into v; it returns
// the status code.
func (b *berth) get(path string, v any) int {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	if v != nil && res.StatusCode == http.StatusOK {
		if err := json.NewDecoder(res.Body).Decode(v); err != nil {
			b.t.Fatalf("GET %s: %v", path, err)
		}
	}
	return res.StatusCode
}

// With a Docker host that does not answer, Berth serves, and every surface
// that shows an endpoint's state says why its queued jobs wait: v1's
// status reason (the dashboard reads it), /v2/ID/health, `berth endpoint
// get` and `berth health` — not only a start-up log line.
func TestNoDockerSaysWhyJobsWait(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "no-docker.sock")
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	b := startBerthWith(t, func(c *berthapp.Config) {
		c.Backend = berthapp.DockerAuto
		c.DiscoverGPUs = func() ([]gpu.Device, error) { return []gpu.Device{cliGPU}, nil }
	})
	var tpl, ep, job rec
	b.ok(&tpl, "template", "create", "nodocker", "img:1", "--json")
	b.ok(&ep, "endpoint", "create", tpl["id"].(string), "--name", "waits", "--json")
	eid := ep["id"].(string)
	b.ok(&job, "run", eid, `{"x":1}`, "--json")
	if job["status"] != "IN_QUEUE" {
		t.Fatalf("run: %v", job)
	}
	says := func(where, text string) {
		t.Helper()
		if !strings.Contains(text, "no container runtime") || !strings.Contains(text, sock) || !strings.Contains(text, "berth worker-env") {
			t.Errorf("%s does not say why jobs wait: %q", where, text)
		}
	}

	var v1 struct {
		Status struct {
			Reason string `json:"reason"`
		} `json:"status"`
	}
	if code := b.get("/v1/endpoints/"+eid, &v1); code != http.StatusOK {
		t.Fatalf("GET /v1/endpoints/%s: %d", eid, code)
	}
	says("v1 status.reason", v1.Status.Reason)
	var list []struct {
		Status struct {
			Reason string `json:"reason"`
		} `json:"status"`
	}
	b.get("/v1/endpoints?includeWorkers=true", &list)
	if len(list) != 1 {
		t.Fatalf("endpoints: %v", list)
	}
	says("v1 list status.reason", list[0].Status.Reason)
	var health struct {
		Jobs struct {
			InQueue int `json:"inQueue"`
		} `json:"jobs"`
		Reason string `json:"reason"`
	}
	b.get("/v2/"+eid+"/health", &health)
	if health.Jobs.InQueue != 1 {
		t.Errorf("health: %+v", health)
	}
	says("/v2/ID/health reason", health.Reason)
	says("berth endpoint get", b.ok(nil, "endpoint", "get", eid))
	says("berth health", b.ok(nil, "health", eid))
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
	}
}

// The dashboard's job list (GET /v1/endpoints/ID/jobs) keeps an endpoint's
// recent jobs once their results expire: id, status, times and worker,
// marked resultExpired, never their input or output; the last RecentJobs
// per endpoint, the newest first.
func TestJobListKeepsRecentJobsAfterTheirResultsExpire(t *testing.T) {
	const recent = 3
	b := startBerthWith(t, func(c *berthapp.Config) {
		c.Queue.SyncRetention = 50 * time.Millisecond // RunPod's minute, shortened
		c.Queue.RecentJobs = recent
	})
	var tpl, ep rec
	b.ok(&tpl, "template", "create", "recent", "img:1", "--json")
	b.ok(&ep, "endpoint", "create", tpl["id"].(string), "--json")
	eid := ep["id"].(string)
	b.startWorker(eid)
	var ids []string
	for i := range recent + 2 {
		var job rec
		b.ok(&job, "runsync", eid, fmt.Sprintf(`{"secret":"input-%d"}`, i), "--json")
		if job["status"] != "COMPLETED" {
			t.Fatalf("runsync: %v", job)
		}
		ids = append(ids, job["id"].(string))
	}
	for _, id := range ids {
		waitFor(t, "the result of "+id+" to expire", func() bool {
			return b.get("/v1/endpoints/"+eid+"/jobs/"+id, nil) == http.StatusNotFound
		})
	}

	var list []map[string]any
	if code := b.get("/v1/endpoints/"+eid+"/jobs?limit=50", &list); code != http.StatusOK {
		t.Fatalf("job list: %d", code)
	}
	if len(list) != recent {
		t.Fatalf("job list after expiry: %d jobs, want the last %d: %v", len(list), recent, list)
	}
	for i, j := range list {
		want := ids[len(ids)-1-i] // newest first
		if j["id"] != want || j["status"] != "COMPLETED" || j["resultExpired"] != true {
			t.Errorf("job %d: %v, want %s COMPLETED resultExpired", i, j, want)
		}
		for _, k := range []string{"createdAt", "startedAt", "completedAt", "delayTime", "executionTime", "workerId"} {
			if j[k] == nil || j[k] == "" {
				t.Errorf("job %s lacks %s: %v", j["id"], k, j)
			}
		}
		for _, k := range []string{"input", "output", "error"} {
			if _, ok := j[k]; ok {
				t.Errorf("job %s still carries its %s: %v", j["id"], k, j)
			}
		}
	}
	// The status filter applies to them too.
	if b.get("/v1/endpoints/"+eid+"/jobs?status=FAILED", &list); len(list) != 0 {
		t.Errorf("FAILED filter: %v", list)
	}
	if b.get("/v1/endpoints/"+eid+"/jobs?limit=2", &list); len(list) != 2 || list[0]["id"] != ids[len(ids)-1] {
		t.Errorf("limit=2: %v", list)
	}
}

// call is an API request with the test key from any goroutine: status,
// Retry-After and body.
func (b *berth) call(method, path, body string) (int, string, []byte, error) {
	req, _ := http.NewRequest(method, b.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Retry-After"), out, err
}

// Answers that grow with the data are bounded: a job list carries at most
// JobListBytes of inputs and outputs (the newest jobs keep theirs, the
// rest come marked dataOmitted), and the lists built at once hold at most
// ListShares (a job list 8): concurrent job lists past it wait ListWait,
// then are answered 503 with Retry-After, while other routes answer.
func TestBigAnswersAreBounded(t *testing.T) {
	b := startBerthWith(t, func(c *berthapp.Config) {
		c.HTTP.JobListBytes = 1000
		c.HTTP.ListShares, c.HTTP.ListWait = 8, time.Millisecond // one job list at a time
	})
	var tpl, ep rec
	b.ok(&tpl, "template", "create", "lists", "img:1", "--json")
	b.ok(&ep, "endpoint", "create", tpl["id"].(string), "--workers-max", "0", "--json")
	eid := ep["id"].(string)
	const jobs = 300
	pad := strings.Repeat("x", 90)
	for i := range jobs {
		if code, _, out, err := b.call("POST", "/v2/"+eid+"/run", fmt.Sprintf(`{"input":{"n":%d,"pad":%q}}`, i, pad)); code != 200 || err != nil {
			t.Fatalf("run: %d %v %s", code, err, out)
		}
	}

	var list []map[string]any
	if code := b.get("/v1/endpoints/"+eid+"/jobs?limit=1000", &list); code != 200 || len(list) != jobs {
		t.Fatalf("job list: %d, %d jobs", code, len(list))
	}
	withData := 0
	for i, j := range list {
		switch {
		case j["input"] != nil && j["dataOmitted"] == nil:
			if withData++; withData != i+1 {
				t.Fatalf("job %d has its data after one without: %v", i, j)
			}
		case j["input"] == nil && j["dataOmitted"] == true && j["id"] != nil && j["status"] == "IN_QUEUE":
		default:
			t.Fatalf("job %d: %v", i, j)
		}
	}
	if withData == 0 || withData > 1000/100 {
		t.Errorf("%d of %d jobs carry their ≈100-byte input under a 1,000-byte bound", withData, jobs)
	}

	type reply struct {
		path, retryAfter string
		code             int
		body             []byte
		err              error
	}
	replies := make(chan reply, 32)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 16 + 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/v1/endpoints/" + eid + "/jobs?limit=1000"
			if i >= 16 {
				path = "/v1/endpoints/" + eid + "/queue"
			}
			<-start
			code, ra, body, err := b.call("GET", path, "")
			replies <- reply{path, ra, code, body, err}
		}()
	}
	close(start)
	wg.Wait()
	close(replies)
	refused := 0
	for r := range replies {
		switch {
		case r.err != nil:
			t.Fatal(r.err)
		case r.code == 200:
		case strings.HasSuffix(r.path, "/queue"):
			t.Errorf("GET %s while job lists are built: %d %s", r.path, r.code, r.body)
		case r.code == 503 && r.retryAfter != "" && strings.Contains(string(r.body), "server busy"):
			refused++
		default:
			t.Errorf("GET %s: %d Retry-After %q %s", r.path, r.code, r.retryAfter, r.body)
		}
	}
	if refused == 0 {
		t.Errorf("16 concurrent job lists of %d jobs, one allowed at a time: none refused", jobs)
	}
}
