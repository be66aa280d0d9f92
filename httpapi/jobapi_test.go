package httpapi_test

// The job API's answers without a worker: auth, bad input, not found,
// payload and rate limits, worker-env, metrics, the concurrency cap. The
// job API end to end with a worker program is e2e/jobs.

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/httpapi"
	"berth/internal/apitest"
	"berth/queue"
)

func TestE2ECancelQueuedAndPurge(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	a, b, c := e.Run(ep, `{}`), e.Run(ep, `{}`), e.Run(ep, `{}`)
	if m := e.Admin("POST", "/v2/"+ep+"/cancel/"+a, nil, 200); m["status"] != "CANCELLED" {
		t.Fatal(m)
	}
	m := e.Admin("POST", "/v2/"+ep+"/purge-queue", nil, 200)
	if m["removed"] != float64(2) || m["status"] != "completed" {
		t.Fatal(m)
	}
	for _, id := range []string{b, c} {
		if r := e.Do("GET", "/v2/"+ep+"/status/"+id, apitest.Key, nil); r.Code != 404 {
			t.Fatalf("purged job: %d %s", r.Code, r.Body)
		}
	}
	if m := e.Admin("GET", "/v2/"+ep+"/status/"+a, nil, 200); m["status"] != "CANCELLED" {
		t.Fatal(m)
	}
}

func TestE2EAuth(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	other := e.Endpoint(nil)
	wenv := e.WorkerEnv(ep)
	wkey, wid := wenv["RUNPOD_AI_API_KEY"], wenv["RUNPOD_POD_ID"]
	tests := []struct {
		name, method, path, auth string
		want                     int
	}{
		{"bearer", "GET", "/v2/" + ep + "/health", "Bearer " + apitest.Key, 200},
		{"lowercase bearer", "GET", "/v2/" + ep + "/health", "bearer " + apitest.Key, 200},
		{"bare key", "GET", "/v2/" + ep + "/health", apitest.Key, 200},
		{"no key", "GET", "/v2/" + ep + "/health", "", 401},
		{"wrong key", "GET", "/v2/" + ep + "/health", "Bearer nope", 401},
		{"basic scheme", "GET", "/v2/" + ep + "/health", "Basic " + apitest.Key, 401},
		{"management without key", "GET", "/v1/endpoints/" + ep, "", 401},
		{"metrics without key", "GET", "/metrics", "", 401},
		{"worker key on job API", "GET", "/v2/" + ep + "/health", wkey, 401},
		{"worker key on management", "GET", "/v1/endpoints/" + ep, wkey, 401},
		{"worker key on its route", "GET", "/v2/" + ep + "/ping/" + wid, wkey, 200},
		{"worker key as bearer", "GET", "/v2/" + ep + "/ping/" + wid, "Bearer " + wkey, 200},
		{"worker key, unsubstituted id", "GET", "/v2/" + ep + "/ping/$RUNPOD_POD_ID", wkey, 200},
		{"worker key, other worker id", "GET", "/v2/" + ep + "/ping/someoneelse", wkey, 401},
		{"worker key, other endpoint", "GET", "/v2/" + other + "/ping/" + wid, wkey, 401},
		{"admin key on worker route", "GET", "/v2/" + ep + "/ping/" + wid, apitest.Key, 200},
		{"no key on worker route", "GET", "/v2/" + ep + "/ping/" + wid, "", 401},
	}
	for _, tt := range tests {
		r := e.Do(tt.method, tt.path, tt.auth, nil)
		if r.Code != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, r.Code, r.Body, tt.want)
			continue
		}
		if r.Code == 401 {
			m := r.JSON(t)
			if m["error"] == nil && m["message"] == nil {
				t.Errorf("%s: 401 without a message: %s", tt.name, r.Body)
			}
		}
	}
}

func TestE2EBadInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	tests := []struct {
		name, path, body, field string
		want                    int
	}{
		{"not JSON", "/run", `{`, "JSON", 400},
		{"array body", "/run", `[]`, "JSON object", 400},
		{"no input", "/run", `{}`, "input", 400},
		{"null input", "/run", `{"input":null}`, "input", 400},
		{"input not object", "/run", `{"input":"x"}`, "input", 400},
		{"ttl too small", "/run", `{"input":{},"policy":{"ttl":9999}}`, "policy.ttl", 400},
		{"ttl too big", "/run", `{"input":{},"policy":{"ttl":604800001}}`, "policy.ttl", 400},
		{"ttl not integer", "/run", `{"input":{},"policy":{"ttl":1.5}}`, "policy.ttl", 400},
		{"exec timeout too small", "/run", `{"input":{},"policy":{"executionTimeout":4999}}`, "policy.executionTimeout", 400},
		{"exec timeout too big", "/runsync", `{"input":{},"policy":{"executionTimeout":604800001}}`, "policy.executionTimeout", 400},
		{"lowPriority not bool", "/run", `{"input":{},"policy":{"lowPriority":"yes"}}`, "policy.lowPriority", 400},
		{"policy not object", "/run", `{"input":{},"policy":5}`, "policy", 400},
		{"webhook not URL", "/run", `{"input":{},"webhook":"ftp://x"}`, "webhook", 400},
		{"webhook not string", "/run", `{"input":{},"webhook":5}`, "webhook", 400},
		{"s3Config field not string", "/run", `{"input":{},"s3Config":{"accessId":5}}`, "s3Config.accessId", 400},
		{"runsync wait too small", "/runsync?wait=999", `{"input":{}}`, "wait", 400},
		{"runsync wait too big", "/runsync?wait=300001", `{"input":{}}`, "wait", 400},
		{"runsync wait malformed", "/runsync?wait=soon", `{"input":{}}`, "wait", 400},
	}
	for _, tt := range tests {
		r := e.Do("POST", "/v2/"+ep+tt.path, apitest.Key, tt.body)
		if r.Code != tt.want {
			t.Errorf("%s: %d %s", tt.name, r.Code, r.Body)
			continue
		}
		if msg, _ := r.JSON(t)["error"].(string); !strings.Contains(msg, tt.field) {
			t.Errorf("%s: message %q does not name %s", tt.name, msg, tt.field)
		}
	}
	for _, p := range []string{"/status/x?ttl=5", "/status/x?ttl=abc", "/stream/x?wait=-1", "/status-sync/x?wait=0"} {
		if r := e.Do("GET", "/v2/"+ep+p, apitest.Key, nil); r.Code != 400 {
			t.Errorf("%s: %d %s", p, r.Code, r.Body)
		}
	}
	if h := e.Q.Health(ep); h.Jobs != (queue.JobCounts{}) {
		t.Fatalf("bad requests stored jobs: %+v", h.Jobs)
	}
	// Valid optional fields are accepted and handed to the worker.
	e.Admin("POST", "/v2/"+ep+"/run", `{"input":{},"policy":{"ttl":10000,"executionTimeout":5000,"lowPriority":true},"s3Config":{"accessId":"a","accessSecret":"b","bucketName":"c","endpointUrl":"http://s3"}}`, 200)
	if st := e.Q.Stats(ep); st.InQueue != 1 || st.LowPriority != 1 {
		t.Fatalf("lowPriority not exposed to the scaler: %+v", st)
	}
	wenv := e.WorkerEnv(ep)
	take := e.Do("GET", "/v2/"+ep+"/job-take/"+wenv["RUNPOD_POD_ID"]+"?gpu=&job_in_progress=0", wenv["RUNPOD_AI_API_KEY"], nil)
	job := take.JSON(t)
	if take.Hdr.Get("Content-Type") != "application/json" || job["s3Config"] == nil || job["policy"] == nil || job["input"] == nil {
		t.Fatalf("taken job %d %v", take.Code, job)
	}
}

func TestE2ENotFound(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	for _, p := range []string{"/v2/nosuchendpoint/run", "/v2/nosuchendpoint/health"} {
		method := "GET"
		if strings.HasSuffix(p, "run") {
			method = "POST"
		}
		if r := e.Do(method, p, apitest.Key, `{"input":{}}`); r.Code != 404 || !strings.Contains(string(r.Body), "endpoint") {
			t.Errorf("%s: %d %s", p, r.Code, r.Body)
		}
	}
	for _, op := range []string{"status", "status-sync", "stream", "cancel", "retry"} {
		method := "POST"
		if r := e.Do(method, "/v2/"+ep+"/"+op+"/nosuchjob", apitest.Key, nil); r.Code != 404 || r.JSON(t)["error"] == nil {
			t.Errorf("%s: %d %s", op, r.Code, r.Body)
		}
	}
	if r := e.Do("GET", "/v1/endpoints/nosuch", apitest.Key, nil); r.Code != 404 || r.JSON(t)["message"] == nil {
		t.Errorf("management 404: %d %s", r.Code, r.Body)
	}
}

func TestE2EPayloadLimits(t *testing.T) {
	// Without the validating wrapper: it would decode each body of many
	// megabytes again, which under -race takes minutes on a busy machine,
	// and a size limit is not a question of the document.
	e := newEnv(t, apitest.RawHTTP(func(*httpapi.Settings) {}))
	ep := e.Endpoint(nil)
	big := func(n int) string { return `{"input":{"b":"` + strings.Repeat("x", n) + `"}}` }
	if r := e.Do("POST", "/v2/"+ep+"/run", apitest.Key, big(10<<20)); r.Code != 413 || r.JSON(t)["error"] == nil {
		t.Fatalf("11 MB /run: %d", r.Code)
	}
	e.Admin("POST", "/v2/"+ep+"/run", big(9<<20), 200)
	if r := e.Do("POST", "/v2/"+ep+"/runsync?wait=1000", apitest.Key, big(20<<20)); r.Code != 413 {
		t.Fatalf("21 MB /runsync: %d", r.Code)
	}
}

func TestE2ERateLimits(t *testing.T) {
	e := newEnv(t, apitest.WithRateLimits(3))
	ep := e.Endpoint(nil)
	purge := func() resp { return e.Do("POST", "/v2/"+ep+"/purge-queue", apitest.Key, nil) }
	for i := 0; i < 2; i++ {
		if r := purge(); r.Code != 200 {
			t.Fatalf("purge %d: %d", i, r.Code)
		}
	}
	r := purge()
	if r.Code != 429 || r.Hdr.Get("Retry-After") == "" || r.JSON(t)["error"] == nil {
		t.Fatalf("third purge: %d %v", r.Code, r.Hdr)
	}
	// Dynamic limit: 2 live workers × 3 per worker = 6 > base 2.
	other := e.Endpoint(nil)
	for i := 0; i < 2; i++ {
		wenv := e.WorkerEnv(other)
		e.Do("GET", "/v2/"+other+"/ping/"+wenv["RUNPOD_POD_ID"], wenv["RUNPOD_AI_API_KEY"], nil)
	}
	n := 0
	for i := 0; i < 10; i++ {
		if e.Do("POST", "/v2/"+other+"/purge-queue", apitest.Key, nil).Code == 200 {
			n++
		}
	}
	if n != 6 {
		t.Fatalf("%d purges allowed with 2 workers, want 6", n)
	}
	// Limits are per endpoint and operation: health is not limited.
	if r := e.Do("GET", "/v2/"+ep+"/health", apitest.Key, nil); r.Code != 200 {
		t.Fatal(r.Code)
	}
}

func TestE2EWorkerEnvTemplates(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	wenv := e.WorkerEnv(ep)
	for _, k := range []string{"RUNPOD_WEBHOOK_GET_JOB", "RUNPOD_WEBHOOK_POST_OUTPUT", "RUNPOD_WEBHOOK_POST_STREAM"} {
		if !strings.Contains(wenv[k], "?") {
			t.Errorf("%s has no '?': %s", k, wenv[k])
		}
	}
	if !strings.Contains(wenv["RUNPOD_WEBHOOK_GET_JOB"], "/job-take/"+wenv["RUNPOD_POD_ID"]+"?") ||
		!strings.Contains(wenv["RUNPOD_WEBHOOK_POST_OUTPUT"], "/$ID?") ||
		wenv["RUNPOD_SKIP_AUTO_SYSTEM_CHECKS"] != "true" || wenv["RUNPOD_ENDPOINT_ID"] != ep || wenv["RUNPOD_PING_INTERVAL"] == "" {
		t.Fatalf("%v", wenv)
	}
	// Each call registers a new worker with its own key.
	if again := e.WorkerEnv(ep); again["RUNPOD_POD_ID"] == wenv["RUNPOD_POD_ID"] || again["RUNPOD_AI_API_KEY"] == wenv["RUNPOD_AI_API_KEY"] {
		t.Fatal("worker-env reused an identity")
	}
	if r := e.Do("GET", "/v1/endpoints/nosuch/worker-env", apitest.Key, nil); r.Code != 404 {
		t.Fatal(r.Code)
	}
}

func TestE2EMetrics(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	e.Run(ep, `{}`)
	r := e.Do("GET", "/metrics", apitest.Key, nil)
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	found := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `berth_queue_jobs{endpoint="`+ep+`",state="in_queue"} 1`) {
			found = true
		}
	}
	if r.Code != 200 || !found {
		t.Fatalf("%d, queue depth not in metrics:\n%s", r.Code, r.Body)
	}
}

func TestE2EConcurrencyCap(t *testing.T) {
	e := newEnv(t, apitest.WithRateLimits(100))
	ep := e.Endpoint(nil)
	id := e.Run(ep, `{}`)
	// 400 concurrent /stream requests hold (the job never runs and the
	// hold is on the fake clock); the 401st is refused.
	ctx, cancel := context.WithCancel(context.Background())
	var held sync.WaitGroup
	started := make(chan struct{}, 400)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 500}}
	for i := 0; i < 400; i++ {
		held.Add(1)
		go func() {
			defer held.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", e.Base+"/v2/"+ep+"/stream/"+id+"?wait=300000", nil)
			req.Header.Set("Authorization", apitest.Key)
			started <- struct{}{}
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
			}
		}()
	}
	for i := 0; i < 400; i++ {
		<-started
	}
	// Every held request is inside the handler once 400 stream holds, the
	// job's ttl and the cleaner's ticker wait on the fake clock.
	// (Other timers wait on the fake clock too — the cleaner's, one a
	// task — so the count only says most holds are in; the last few may
	// still be on their way: ask until the cap answers, within a deadline.)
	e.Clock.BlockUntilContext(context.Background(), 402)
	r := e.Do("GET", "/v2/"+ep+"/stream/"+id+"?wait=0", apitest.Key, nil)
	for deadline := time.Now().Add(30 * time.Second); r.Code == 200 && time.Now().Before(deadline); {
		r = e.Do("GET", "/v2/"+ep+"/stream/"+id+"?wait=0", apitest.Key, nil)
	}
	if r.Code != 429 || r.Hdr.Get("Retry-After") != "1" || !strings.Contains(string(r.Body), "concurrent") {
		t.Fatalf("401st stream: %d %v %s", r.Code, r.Hdr, r.Body)
	}
	// Other operations have their own caps.
	if r := e.Do("GET", "/v2/"+ep+"/status/"+id, apitest.Key, nil); r.Code != 200 {
		t.Fatalf("status while streams are held: %d", r.Code)
	}
	cancel()
	held.Wait()
	if r := e.Do("GET", "/v2/"+ep+"/stream/"+id+"?wait=0", apitest.Key, nil); r.Code != 200 {
		t.Fatalf("stream after release: %d %s", r.Code, r.Body)
	}
}
