package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/httpapi"
	"berth/internal/apitest"
	"berth/queue"
)

// echoworkerBin is the test worker program, built once per test binary.
var echoworkerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-e2e")
	if err != nil {
		panic(err)
	}
	echoworkerBin = filepath.Join(dir, "echoworker")
	cmd := exec.Command("go", "build", "-o", echoworkerBin, "berth/testdata/echoworker")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build echoworker: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func (e *testEnv) run(ep string, input string) string {
	e.T.Helper()
	m := e.Admin("POST", "/v2/"+ep+"/run", `{"input":`+input+`}`, 200)
	if m["status"] != "IN_QUEUE" {
		e.T.Fatalf("run: %v", m)
	}
	return m["id"].(string)
}

// workerProc is a running echoworker process.
type workerProc struct {
	id   string
	env  map[string]string
	cmd  *exec.Cmd
	logs *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (e *testEnv) workerEnv(ep string) map[string]string {
	e.T.Helper()
	m := e.Admin("GET", "/v1/endpoints/"+ep+"/worker-env", nil, 200)
	out := map[string]string{}
	for k, v := range m {
		out[k] = v.(string)
	}
	return out
}

func (e *testEnv) startWorker(ep string, extraEnv ...string) *workerProc {
	e.T.Helper()
	wenv := e.workerEnv(ep)
	w := &workerProc{id: wenv["RUNPOD_POD_ID"], env: wenv, logs: &lockedBuffer{}}
	w.cmd = exec.Command(echoworkerBin)
	for k, v := range wenv {
		w.cmd.Env = append(w.cmd.Env, k+"="+v)
	}
	w.cmd.Env = append(w.cmd.Env, extraEnv...)
	w.cmd.Stdout, w.cmd.Stderr = w.logs, w.logs
	if err := w.cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		if e.T.Failed() {
			e.T.Logf("worker %s output:\n%s", w.id, w.logs.String())
		}
	})
	return w
}

// waitStatus waits for the job to reach want, reading /status after each
// change the queue signals.
func (e *testEnv) waitStatus(ep, id, want string) map[string]any {
	e.T.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ch, _ := e.Q.Watch(ep, id)
		m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200)
		if m["status"] == want {
			return m
		}
		if s, _ := m["status"].(string); s != "IN_QUEUE" && s != "IN_PROGRESS" {
			e.T.Fatalf("job %s is %v, want %s: %v", id, s, want, m)
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		}
	}
	e.T.Fatalf("job %s never reached %s", id, want)
	return nil
}

func TestE2EEveryJobOperation(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	e.startWorker(ep)

	t.Run("run and status GET and POST", func(t *testing.T) {
		id := e.run(ep, `{"echo":{"a":1}}`)
		m := e.waitStatus(ep, id, "COMPLETED")
		if fmt.Sprint(m["output"]) != "map[a:1]" || m["workerId"] == "" {
			t.Fatalf("%v", m)
		}
		for _, k := range []string{"delayTime", "executionTime"} {
			if _, ok := m[k].(float64); !ok {
				t.Fatalf("%s missing or not a number: %v", k, m)
			}
		}
		if _, ok := m["input"]; ok {
			t.Fatalf("input echoed on a finished job: %v", m)
		}
		p := e.Admin("POST", "/v2/"+ep+"/status/"+id, nil, 200)
		if p["status"] != "COMPLETED" {
			t.Fatal(p)
		}
	})
	t.Run("runsync", func(t *testing.T) {
		m := e.Admin("POST", "/v2/"+ep+"/runsync", `{"input":{"echo":"hi"}}`, 200)
		if m["status"] != "COMPLETED" || m["output"] != "hi" || !strings.HasPrefix(m["id"].(string), "sync-") {
			t.Fatal(m)
		}
	})
	t.Run("failed job carries a string error and can be retried", func(t *testing.T) {
		id := e.run(ep, `{"fail":"boom"}`)
		m := e.waitStatus(ep, id, "FAILED")
		errStr, ok := m["error"].(string)
		if !ok || !strings.Contains(errStr, "boom") {
			t.Fatalf("error not a string holding the message: %v", m)
		}
		r := e.Admin("POST", "/v2/"+ep+"/retry/"+id, nil, 200)
		if r["id"] != id || r["status"] != "IN_QUEUE" {
			t.Fatal(r)
		}
		// The same input runs again and fails again.
		e.waitStatus(ep, id, "FAILED")
		done := e.run(ep, `{"echo":1}`)
		e.waitStatus(ep, done, "COMPLETED")
		bad := e.Do("POST", "/v2/"+ep+"/retry/"+done, apitest.Key, nil)
		if bad.Code != 400 || !strings.Contains(string(bad.Body), "only FAILED or TIMED_OUT") {
			t.Fatalf("retry of a completed job: %d %s", bad.Code, bad.Body)
		}
	})
	t.Run("error key in the result", func(t *testing.T) {
		id := e.run(ep, `{"error_key":"custom failure"}`)
		m := e.waitStatus(ep, id, "FAILED")
		if m["error"] != "custom failure" || fmt.Sprint(m["output"]) != "map[detail:1]" {
			t.Fatal(m)
		}
	})
	t.Run("stream drains chunks and always has stream", func(t *testing.T) {
		id := e.run(ep, `{"stream":["a","b","c"]}`)
		var got []string
		for i := 0; i < 50; i++ {
			changed := e.watch(ep, id)
			m := e.Admin("GET", "/v2/"+ep+"/stream/"+id+"?wait=0", nil, 200)
			s, ok := m["stream"].([]any)
			if !ok {
				t.Fatalf("no stream array: %v", m)
			}
			for _, c := range s {
				got = append(got, c.(map[string]any)["output"].(string))
			}
			if m["status"] == "COMPLETED" && len(s) == 0 {
				break
			}
			changed()
		}
		if strings.Join(got, "") != "abc" {
			t.Fatalf("chunks %v", got)
		}
		m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200)
		if fmt.Sprint(m["output"]) != "[a b c]" {
			t.Fatalf("aggregate output %v", m["output"])
		}
	})
	t.Run("progress updates show while running", func(t *testing.T) {
		id := e.run(ep, `{"progress":["1/2"],"sleep_ms":60000}`)
		deadline := time.Now().Add(30 * time.Second)
		for {
			changed := e.watch(ep, id)
			m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200)
			if m["status"] == "IN_PROGRESS" && m["output"] == "1/2" {
				if fmt.Sprint(m["input"]) != "map[progress:[1/2] sleep_ms:60000]" {
					t.Fatalf("input not echoed while running: %v", m)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no progress: %v", m)
			}
			changed()
		}
		c := e.Admin("POST", "/v2/"+ep+"/cancel/"+id, nil, 200)
		if c["status"] != "CANCELLED" {
			t.Fatal(c)
		}
	})
	t.Run("health", func(t *testing.T) {
		h := e.Admin("GET", "/v2/"+ep+"/health", nil, 200)
		jobs := h["jobs"].(map[string]any)
		workers := h["workers"].(map[string]any)
		if jobs["completed"].(float64) < 3 || jobs["failed"].(float64) < 2 || jobs["retried"].(float64) < 1 {
			t.Fatalf("%v", h)
		}
		if workers["idle"].(float64)+workers["running"].(float64) != 1 {
			t.Fatalf("workers %v", workers)
		}
	})
}

// watch returns a function that blocks until the job has changed since
// watch was called (or 30 s pass): call watch before looking at the job, so
// a change in between is not missed.
func (e *testEnv) watch(ep, id string) func() {
	ch, err := e.Q.Watch(ep, id)
	return func() {
		if err != nil {
			return
		}
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
		}
	}
}

func TestE2ECancelRunningStopsTheHandler(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	e := newEnv(t)
	ep := e.Endpoint(nil)
	w := e.startWorker(ep)
	id := e.run(ep, `{"sleep_ms":600000}`)
	e.waitStatus(ep, id, "IN_PROGRESS")
	c := e.Admin("POST", "/v2/"+ep+"/cancel/"+id, nil, 200)
	if c["id"] != id || c["status"] != "CANCELLED" {
		t.Fatal(c)
	}
	// The worker gets the id on job-stop, cancels the handler and is free
	// for the next job straight away.
	next := e.run(ep, `{"echo":"next"}`)
	e.waitStatus(ep, next, "COMPLETED")
	if m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200); m["status"] != "CANCELLED" {
		t.Fatalf("cancelled job changed: %v (worker logs %s)", m, w.logs.String())
	}
}

func TestE2ECancelQueuedAndPurge(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	a, b, c := e.run(ep, `{}`), e.run(ep, `{}`), e.run(ep, `{}`)
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

func TestE2ERunsyncWaitElapses(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	got := make(chan map[string]any)
	go func() {
		r := e.Do("POST", "/v2/"+ep+"/runsync?wait=1000", apitest.Key, `{"input":{}}`)
		var m map[string]any
		json.Unmarshal(r.Body, &m)
		got <- m
	}()
	// runsync holds on the fake clock until it moves past the wait. Three
	// waiters (the cleaner's ticker, the job's ttl, the wait) may be there
	// before the wait's own timer is: the clock moves a second at a time
	// until the answer comes, as it would for a client that waits.
	var m map[string]any
	for m == nil {
		e.Clock.BlockUntilContext(context.Background(), 3)
		e.Clock.Advance(time.Second)
		select {
		case m = <-got:
		case <-time.After(100 * time.Millisecond):
		}
	}
	if m["status"] != "IN_QUEUE" || m["id"] == nil || len(m) != 2 {
		t.Fatalf("%v", m)
	}
	// status-sync picks it up once a worker arrives.
	e.startWorker(ep)
	e.waitStatus(ep, m["id"].(string), "COMPLETED")
}

func TestE2EExecutionTimeoutAndTTL(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	e := newEnv(t)
	ep := e.Endpoint(map[string]any{"executionTimeoutMs": 5000})
	e.startWorker(ep)
	id := e.run(ep, `{"sleep_ms":600000}`)
	e.waitStatus(ep, id, "IN_PROGRESS")
	ch, _ := e.Q.Watch(ep, id)
	e.Clock.Advance(5 * time.Second) // the endpoint's default
	<-ch
	m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200)
	if m["status"] != "TIMED_OUT" || !strings.Contains(fmt.Sprint(m["error"]), "timeout") {
		t.Fatal(m)
	}
	// The worker was told to stop and takes the next job.
	next := e.run(ep, `{"echo":2}`)
	e.waitStatus(ep, next, "COMPLETED")
	// TIMED_OUT can be retried.
	e.Admin("POST", "/v2/"+ep+"/retry/"+id, nil, 200)
	e.waitStatus(ep, id, "IN_PROGRESS")

	// ttl removes a running job: status then answers 404.
	short := e.Admin("POST", "/v2/"+ep+"/run", `{"input":{"sleep_ms":600000},"policy":{"ttl":10000,"executionTimeout":600000}}`, 200)["id"].(string)
	e.Admin("POST", "/v2/"+ep+"/cancel/"+id, nil, 200)
	e.waitStatus(ep, short, "IN_PROGRESS")
	ch, _ = e.Q.Watch(ep, short)
	e.Clock.Advance(10 * time.Second)
	<-ch
	if r := e.Do("GET", "/v2/"+ep+"/status/"+short, apitest.Key, nil); r.Code != 404 || r.JSON(t)["error"] == nil {
		t.Fatalf("expired job: %d %s", r.Code, r.Body)
	}
}

func TestE2EStopPodAndBatchWorker(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	w := e.startWorker(ep, "ECHOWORKER_CONCURRENCY=3")
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, e.run(ep, fmt.Sprintf(`{"echo":%d,"sleep_ms":50}`, i)))
	}
	for i, id := range ids {
		m := e.waitStatus(ep, id, "COMPLETED")
		if m["output"] != float64(i) {
			t.Fatal(m)
		}
	}
	id := e.run(ep, `{"stop_pod":true,"echo":{"x":1}}`)
	e.waitStatus(ep, id, "COMPLETED")
	select {
	case got := <-e.StopPod:
		if got != w.id {
			t.Fatalf("stopPod for %s, want %s", got, w.id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stopPod not reported")
	}
}

func TestE2ELostWorkerJobIsRequeued(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	w := e.startWorker(ep)
	id := e.run(ep, `{"sleep_ms":600000}`)
	e.waitStatus(ep, id, "IN_PROGRESS")
	w.cmd.Process.Kill()
	w.cmd.Wait()
	ch, _ := e.Q.Watch(ep, id)
	e.Clock.Advance(time.Minute)
	<-ch
	m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200)
	if m["status"] != "IN_QUEUE" {
		t.Fatal(m)
	}
	e.startWorker(ep)
	e.waitStatus(ep, id, "IN_PROGRESS")
}

func TestE2EWebhook(t *testing.T) {
	got := make(chan map[string]any, 2)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		got <- m
	}))
	defer recv.Close()
	e := newEnv(t, apitest.WithLoopbackWebhooks)
	ep := e.Endpoint(nil)
	e.startWorker(ep)
	id := e.Admin("POST", "/v2/"+ep+"/run", map[string]any{"input": map[string]any{"echo": "w"}, "webhook": recv.URL}, 200)["id"]
	select {
	case m := <-got:
		if m["id"] != id || m["status"] != "COMPLETED" || m["output"] != "w" {
			t.Fatal(m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no webhook")
	}
}

func TestE2ERestartKeepsQueuedJobs(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	ids := []string{e.run(ep, `{"echo":1}`), e.run(ep, `{"echo":2}`)}
	e.Restart()
	e.startWorker(ep)
	for i, id := range ids {
		if m := e.waitStatus(ep, id, "COMPLETED"); m["output"] != float64(i+1) {
			t.Fatal(m)
		}
	}
}

func TestE2EAuth(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	other := e.Endpoint(nil)
	wenv := e.workerEnv(ep)
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
	wenv := e.workerEnv(ep)
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
	e := newEnv(t, apitest.RawHTTP(func(*httpapi.Config) {}))
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
		wenv := e.workerEnv(other)
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
	wenv := e.workerEnv(ep)
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
	if again := e.workerEnv(ep); again["RUNPOD_POD_ID"] == wenv["RUNPOD_POD_ID"] || again["RUNPOD_AI_API_KEY"] == wenv["RUNPOD_AI_API_KEY"] {
		t.Fatal("worker-env reused an identity")
	}
	if r := e.Do("GET", "/v1/endpoints/nosuch/worker-env", apitest.Key, nil); r.Code != 404 {
		t.Fatal(r.Code)
	}
}

func TestE2EMetrics(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	e.run(ep, `{}`)
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
	id := e.run(ep, `{}`)
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
