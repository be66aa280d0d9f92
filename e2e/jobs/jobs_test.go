package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
)

func TestE2EEveryJobOperation(t *testing.T) {
	e := newEnv(t)
	ep := e.Endpoint(nil)
	e.startWorker(ep)

	t.Run("run and status GET and POST", func(t *testing.T) {
		id := e.Run(ep, `{"echo":{"a":1}}`)
		m := e.WaitStatus(ep, id, "COMPLETED")
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
		id := e.Run(ep, `{"fail":"boom"}`)
		m := e.WaitStatus(ep, id, "FAILED")
		errStr, ok := m["error"].(string)
		if !ok || !strings.Contains(errStr, "boom") {
			t.Fatalf("error not a string holding the message: %v", m)
		}
		r := e.Admin("POST", "/v2/"+ep+"/retry/"+id, nil, 200)
		if r["id"] != id || r["status"] != "IN_QUEUE" {
			t.Fatal(r)
		}
		// The same input runs again and fails again.
		e.WaitStatus(ep, id, "FAILED")
		done := e.Run(ep, `{"echo":1}`)
		e.WaitStatus(ep, done, "COMPLETED")
		bad := e.Do("POST", "/v2/"+ep+"/retry/"+done, apitest.Key, nil)
		if bad.Code != 400 || !strings.Contains(string(bad.Body), "only FAILED or TIMED_OUT") {
			t.Fatalf("retry of a completed job: %d %s", bad.Code, bad.Body)
		}
	})
	t.Run("error key in the result", func(t *testing.T) {
		id := e.Run(ep, `{"error_key":"custom failure"}`)
		m := e.WaitStatus(ep, id, "FAILED")
		if m["error"] != "custom failure" || fmt.Sprint(m["output"]) != "map[detail:1]" {
			t.Fatal(m)
		}
	})
	t.Run("stream drains chunks and always has stream", func(t *testing.T) {
		id := e.Run(ep, `{"stream":["a","b","c"]}`)
		var got []string
		for i := 0; i < 50; i++ {
			changed := e.Watch(ep, id)
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
			// Chunks taken: ask again at once (a completed job's last
			// chunks change nothing more to wait for); none: wait.
			if len(s) == 0 {
				changed()
			}
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
		id := e.Run(ep, `{"progress":["1/2"],"sleep_ms":60000}`)
		deadline := time.Now().Add(30 * time.Second)
		for {
			changed := e.Watch(ep, id)
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

func TestE2ECancelRunningStopsTheHandler(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	e := newEnv(t)
	ep := e.Endpoint(nil)
	w := e.startWorker(ep)
	id := e.Run(ep, `{"sleep_ms":600000}`)
	e.WaitStatus(ep, id, "IN_PROGRESS")
	c := e.Admin("POST", "/v2/"+ep+"/cancel/"+id, nil, 200)
	if c["id"] != id || c["status"] != "CANCELLED" {
		t.Fatal(c)
	}
	// The worker gets the id on job-stop, cancels the handler and is free
	// for the next job straight away.
	next := e.Run(ep, `{"echo":"next"}`)
	e.WaitStatus(ep, next, "COMPLETED")
	if m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200); m["status"] != "CANCELLED" {
		t.Fatalf("cancelled job changed: %v (worker logs %s)", m, w.logs.String())
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
	e.WaitStatus(ep, m["id"].(string), "COMPLETED")
}

func TestE2EExecutionTimeoutAndTTL(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	e := newEnv(t)
	ep := e.Endpoint(map[string]any{"executionTimeoutMs": 5000})
	e.startWorker(ep)
	id := e.Run(ep, `{"sleep_ms":600000}`)
	e.WaitStatus(ep, id, "IN_PROGRESS")
	ch, _ := e.Q.Watch(ep, id)
	e.Clock.Advance(5 * time.Second) // the endpoint's default
	<-ch
	m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200)
	if m["status"] != "TIMED_OUT" || !strings.Contains(fmt.Sprint(m["error"]), "timeout") {
		t.Fatal(m)
	}
	// The worker was told to stop and takes the next job.
	next := e.Run(ep, `{"echo":2}`)
	e.WaitStatus(ep, next, "COMPLETED")
	// TIMED_OUT can be retried.
	e.Admin("POST", "/v2/"+ep+"/retry/"+id, nil, 200)
	e.WaitStatus(ep, id, "IN_PROGRESS")

	// ttl removes a running job: status then answers 404.
	short := e.Admin("POST", "/v2/"+ep+"/run", `{"input":{"sleep_ms":600000},"policy":{"ttl":10000,"executionTimeout":600000}}`, 200)["id"].(string)
	e.Admin("POST", "/v2/"+ep+"/cancel/"+id, nil, 200)
	e.WaitStatus(ep, short, "IN_PROGRESS")
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
		ids = append(ids, e.Run(ep, fmt.Sprintf(`{"echo":%d,"sleep_ms":50}`, i)))
	}
	for i, id := range ids {
		m := e.WaitStatus(ep, id, "COMPLETED")
		if m["output"] != float64(i) {
			t.Fatal(m)
		}
	}
	id := e.Run(ep, `{"stop_pod":true,"echo":{"x":1}}`)
	e.WaitStatus(ep, id, "COMPLETED")
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
	id := e.Run(ep, `{"sleep_ms":600000}`)
	e.WaitStatus(ep, id, "IN_PROGRESS")
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
	e.WaitStatus(ep, id, "IN_PROGRESS")
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
	ids := []string{e.Run(ep, `{"echo":1}`), e.Run(ep, `{"echo":2}`)}
	e.Restart()
	e.startWorker(ep)
	for i, id := range ids {
		if m := e.WaitStatus(ep, id, "COMPLETED"); m["output"] != float64(i+1) {
			t.Fatal(m)
		}
	}
}
