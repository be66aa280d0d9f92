package v1api_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/store"
)

// Berth's runtime extensions: GET /v1/gpus, the log routes, and the
// runtime's status on endpoints and /health. apitest.FakeRuntime stands in for the
// supervisor.

func TestGPUs(t *testing.T) {
	f := apitest.NewFakeRuntime()
	e := apitest.NewValidating(t, apitest.WithFakeRuntime(f))
	var got []map[string]any
	e.Must(200, "GET", "/v1/gpus", nil, &got)
	want := []map[string]any{
		{"index": 0.0, "uuid": "GPU-0000", "name": "NVIDIA GeForce RTX 4090", "gpuTypeId": "NVIDIA GeForce RTX 4090", "memoryInMiB": 24564.0, "pciBusId": "00000000:01:00.0", "holder": "wkr1"},
		{"index": 1.0, "uuid": "GPU-0001", "name": "NVIDIA GeForce RTX 4090", "gpuTypeId": "NVIDIA GeForce RTX 4090", "memoryInMiB": 24564.0, "pciBusId": "00000000:02:00.0", "holder": ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /v1/gpus:\n got %v\nwant %v", got, want)
	}
	if code, _ := e.CallWith("GET", "/v1/gpus", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/gpus without a key: %d, want 401", code)
	}

	// No GPUs, or no GPU source at all: a bare empty array.
	e.App.GPUs().SetDevices(nil)
	if out := e.Must(200, "GET", "/v1/gpus", nil, nil); string(out) != "[]" {
		t.Errorf("GET /v1/gpus without GPUs: %s, want []", out)
	}
	bare := apitest.NewValidating(t)
	if out := bare.Must(200, "GET", "/v1/gpus", nil, nil); string(out) != "[]" {
		t.Errorf("GET /v1/gpus without Config.GPUs: %s, want []", out)
	}
}

// logsEnv is a server with the fake runtime and pods, an endpoint whose
// worker "wkr1" has a log, and a pod with a log.
func logsEnv(t *testing.T) (e *apitest.Env, f *apitest.FakeRuntime, ep, pod string) {
	f = apitest.NewFakeRuntime()
	e = apitest.NewValidating(t, apitest.WithFakeRuntime(f), apitest.WithFakePods(apitest.NewFakePods()))
	tpl := e.NewTemplate("t", "alpine:3", nil)
	ep = e.NewEndpoint(tpl.ID, nil).ID
	pod = e.NewPod(J{"imageName": "alpine:3", "computeType": "CPU"}).ID
	f.Set(func(f *apitest.FakeRuntime) {
		f.Logs[ep+"/wkr1"] = apitest.WorkerLog
		f.Logs[pod] = "pod line 1\npod line 2\npod line 3\n"
	})
	f.TakeCalls()
	return e, f, ep, pod
}

// getText answers a text route: status, Content-Type and body.
func getText(e *apitest.Env, path string) (int, string, string) {
	e.T.Helper()
	req, _ := http.NewRequest("GET", e.Base+path, nil)
	req.Header.Set("Authorization", "Bearer "+apitest.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.T.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("Content-Type"), string(b)
}

func TestContainerLogs(t *testing.T) {
	e, f, ep, pod := logsEnv(t)
	wlogs := "/v1/endpoints/" + ep + "/workers/wkr1/logs"
	plogs := "/v1/pods/" + pod + "/logs"
	lines := strings.SplitAfter(apitest.WorkerLog, "\n")

	cases := []struct {
		path, want, call string
	}{
		{wlogs, apitest.WorkerLog, "worker " + ep + "/wkr1 follow=false tail=0 job="},
		{wlogs + "?tail=2", lines[4] + lines[5], "worker " + ep + "/wkr1 follow=false tail=2 job="},
		{wlogs + "?tail=0&follow=false", apitest.WorkerLog, "worker " + ep + "/wkr1 follow=false tail=0 job="},
		{wlogs + "?jobId=job-a", lines[2] + lines[5], "worker " + ep + "/wkr1 follow=false tail=0 job=job-a"},
		{wlogs + "?jobId=job-b&tail=3", lines[3], "worker " + ep + "/wkr1 follow=false tail=3 job=job-b"},
		{wlogs + "?jobId=job-z", "", "worker " + ep + "/wkr1 follow=false tail=0 job=job-z"},
		{plogs, "pod line 1\npod line 2\npod line 3\n", "pod " + pod + " follow=false tail=0"},
		{plogs + "?tail=1", "pod line 3\n", "pod " + pod + " follow=false tail=1"},
	}
	for _, c := range cases {
		code, ct, body := getText(e, c.path)
		if code != 200 || ct != "text/plain; charset=utf-8" || body != c.want {
			t.Errorf("GET %s: %d %q\n%q\nwant 200 text/plain; charset=utf-8\n%q", c.path, code, ct, body, c.want)
		}
		if calls := f.TakeCalls(); !reflect.DeepEqual(calls, []string{c.call}) {
			t.Errorf("GET %s: runtime calls %q, want %q", c.path, calls, c.call)
		}
	}

	// Bad parameters are refused before the runtime is asked.
	for _, p := range []string{wlogs + "?tail=-1", wlogs + "?tail=ten", plogs + "?tail=1.5", plogs + "?tail=-3"} {
		e.MustErr(400, "GET", p, nil, "tail", "non-negative integer")
	}
	e.MustErr(400, "GET", wlogs+"?follow=maybe", nil, "follow")
	e.MustErr(400, "GET", wlogs+"?jobId=", nil, "jobId")
	e.MustErr(400, "GET", plogs+"?jobId=job-a", nil, "jobId", "worker logs only")
	if calls := f.TakeCalls(); len(calls) != 0 {
		t.Errorf("bad requests reached the runtime: %q", calls)
	}

	// Unknown endpoint, worker, pod; a pod whose container is gone.
	e.MustErr(404, "GET", "/v1/endpoints/nosuchendpoint/workers/wkr1/logs", nil, "endpoint nosuchendpoint not found")
	e.MustErr(404, "GET", "/v1/endpoints/"+ep+"/workers/nosuchworker/logs", nil, "worker nosuchworker", "not found")
	e.MustErr(404, "GET", "/v1/pods/nosuchpod/logs", nil, "pod nosuchpod not found")
	f.Set(func(f *apitest.FakeRuntime) { delete(f.Logs, pod) })
	e.MustErr(404, "GET", plogs, nil, "pod "+pod, "no container")

	// A runtime failure is 503 and says what failed.
	f.Set(func(f *apitest.FakeRuntime) { f.Fail = errors.New("Cannot connect to the Docker daemon") })
	e.MustErr(503, "GET", wlogs, nil, "Cannot connect to the Docker daemon")

	// Every log route needs the key.
	for _, p := range []string{wlogs, plogs, wlogs + "?follow=true"} {
		for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong"}} {
			if code, out := e.CallWith("GET", p, nil, hdr); code != http.StatusUnauthorized || !strings.Contains(string(out), `"message"`) {
				t.Errorf("GET %s with %v: %d %s, want 401 {message}", p, hdr, code, out)
			}
		}
	}
}

func TestContainerLogsWithoutRuntime(t *testing.T) {
	e := apitest.NewValidating(t)
	tpl := e.NewTemplate("t", "alpine:3", nil)
	ep := e.NewEndpoint(tpl.ID, nil).ID
	// A pod made while a runtime was reachable.
	pod := "podwithoutrt01"
	rec := store.Pod{ID: pod, Name: "old", DesiredStatus: store.PodExited, Version: 1, ImageName: "alpine:3", ComputeType: "CPU", CloudType: "SECURE", VCPUCount: 2}
	if err := e.DB.Update(func(tx *store.Tx) error { return tx.Apply(store.Put(store.Pods, rec.ID, rec)) }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/endpoints/" + ep + "/workers/wkr1/logs?follow=true", "/v1/pods/" + pod + "/logs?tail=5"} {
		code, out := e.Call("GET", p, nil)
		if code != 503 || string(out) != `{"message":"no container runtime: Docker is not reachable"}` {
			t.Errorf("GET %s without a runtime: %d %s", p, code, out)
		}
	}
	// An unknown endpoint or pod is still 404.
	e.MustErr(404, "GET", "/v1/endpoints/nosuchendpoint/workers/wkr1/logs", nil, "not found")
	e.MustErr(404, "GET", "/v1/pods/nosuchpod/logs", nil, "not found")
}

// openFollow starts a follow request; the answer's headers are in.
func openFollow(t *testing.T, ctx context.Context, e *apitest.Env, path string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.Base+path, nil)
	req.Header.Set("Authorization", "Bearer "+apitest.Key)
	// The headers must come before the first line does.
	c := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 30 * time.Second}}
	t.Cleanup(c.CloseIdleConnections)
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v (the answer is not flushed before the log goes on?)", path, err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, res.Header.Get("Content-Type"))
	}
	return res, bufio.NewReader(res.Body)
}

// readLine reads one line within 30 s: a streamed line must arrive while
// the container still runs (a line left in a buffer would arrive only when
// the log ends, which these tests do after reading).
func readLine(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() { s, err := br.ReadString('\n'); ch <- result{s, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("read a streamed line: %q %v", r.s, r.err)
		}
		return r.s
	case <-time.After(30 * time.Second):
		t.Fatal("a streamed line did not arrive: not flushed?")
		return ""
	}
}

func TestContainerLogsFollow(t *testing.T) {
	e, f, ep, pod := logsEnv(t)

	t.Run("until the log ends", func(t *testing.T) {
		pw := f.Follow(ep + "/wkr1")
		res, br := openFollow(t, context.Background(), e, "/v1/endpoints/"+ep+"/workers/wkr1/logs?follow=true&tail=1")
		defer res.Body.Close()
		if got := readLine(t, br); got != strings.SplitAfter(apitest.WorkerLog, "\n")[5] {
			t.Errorf("first line %q, want the tail", got)
		}
		for _, line := range []string{"live line 1\n", "live line 2\n"} {
			if _, err := io.WriteString(pw, line); err != nil {
				t.Fatal(err)
			}
			if got := readLine(t, br); got != line {
				t.Errorf("streamed %q, want %q", got, line)
			}
		}
		pw.Close() // the container stops: the answer ends
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Errorf("after the log ended: %q %v", rest, err)
		}
		if calls := f.TakeCalls(); len(calls) != 1 || !strings.HasSuffix(calls[0], "follow=true tail=1 job=") {
			t.Errorf("runtime calls %q", calls)
		}
	})

	t.Run("a new container's empty log", func(t *testing.T) {
		f.Set(func(f *apitest.FakeRuntime) { f.Logs[ep+"/wkr2"] = "" })
		pw := f.Follow(ep + "/wkr2")
		defer pw.Close()
		res, br := openFollow(t, context.Background(), e, "/v1/endpoints/"+ep+"/workers/wkr2/logs?follow=true")
		defer res.Body.Close()
		io.WriteString(pw, "first\n")
		if got := readLine(t, br); got != "first\n" {
			t.Errorf("streamed %q", got)
		}
	})

	t.Run("until the client goes away", func(t *testing.T) {
		pw := f.Follow(pod)
		ctx, cancel := context.WithCancel(context.Background())
		res, br := openFollow(t, ctx, e, "/v1/pods/"+pod+"/logs?follow=true")
		defer res.Body.Close()
		for range 3 {
			readLine(t, br) // the log so far
		}
		io.WriteString(pw, "live\n")
		if got := readLine(t, br); got != "live\n" {
			t.Errorf("streamed %q", got)
		}
		cancel()
		// The server closes the container's log: the writer sees it.
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := io.WriteString(pw, "more\n"); errors.Is(err, io.ErrClosedPipe) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the log reader was not closed after the client went away")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func TestEndpointStatus(t *testing.T) {
	f := apitest.NewFakeRuntime()
	e := apitest.NewValidating(t, apitest.WithFakeRuntime(f))
	tpl := e.NewTemplate("t", "alpine:3", nil)
	held := e.NewEndpoint(tpl.ID, J{"workersMax": 1}).ID
	fine := e.NewEndpoint(tpl.ID, nil).ID
	status := func(reason string) J {
		st := J{"workers": J{"initializing": 0, "idle": 0, "running": 1, "throttled": 0, "unhealthy": 0, "draining": 0},
			"desired": 1, "unhealthy": false, "failures": 0, "crashes": 0, "attempts": 1}
		if reason != "" {
			st["reason"] = reason
		}
		return st
	}
	const reason = "workersMax (1) reached: 3 jobs wait"
	f.Set(func(f *apitest.FakeRuntime) { f.Status[held], f.Status[fine] = status(reason), status("") })

	var got struct {
		ID     string         `json:"id"`
		Status map[string]any `json:"status"`
	}
	e.Must(200, "GET", "/v1/endpoints/"+held, nil, &got)
	if got.Status["reason"] != reason || got.Status["desired"] != 1.0 || got.Status["workers"].(map[string]any)["running"] != 1.0 {
		t.Errorf("endpoint status: %v", got.Status)
	}
	e.Must(200, "GET", "/v1/endpoints/"+fine+"?includeWorkers=true", nil, &got)
	if got.Status == nil || got.Status["reason"] != nil {
		t.Errorf("status of an endpoint nothing holds back: %v", got.Status)
	}
	var list []struct {
		ID     string         `json:"id"`
		Status map[string]any `json:"status"`
	}
	e.Must(200, "GET", "/v1/endpoints", nil, &list)
	if len(list) != 2 || list[0].Status["reason"] != reason || list[1].Status == nil {
		t.Errorf("list: %+v", list)
	}

	// /health: RunPod's shape, plus the reason when there is one.
	var h map[string]any
	e.Must(200, "GET", "/v2/"+held+"/health", nil, &h)
	if h["reason"] != reason || h["jobs"] == nil || h["workers"] == nil {
		t.Errorf("health of a held-back endpoint: %v", h)
	}
	e.Must(200, "GET", "/v2/"+fine+"/health", nil, &h)
	if _, ok := h["reason"]; ok || len(h) != 2 {
		t.Errorf("health of an endpoint nothing holds back: %v", h)
	}

	// Without a runtime neither appears.
	bare := apitest.NewValidating(t)
	tpl2 := bare.NewTemplate("t", "alpine:3", nil)
	id := bare.NewEndpoint(tpl2.ID, nil).ID
	var raw map[string]any
	bare.Must(200, "GET", "/v1/endpoints/"+id, nil, &raw)
	if _, ok := raw["status"]; ok {
		t.Errorf("status without a runtime: %v", raw["status"])
	}
	bare.Must(200, "GET", "/v2/"+id+"/health", nil, &raw)
	if _, ok := raw["reason"]; ok || len(raw) != 2 {
		t.Errorf("health without a runtime: %v", raw)
	}
}
