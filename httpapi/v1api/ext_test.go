package v1api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth/gpu"
	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/runtime"
	"berth/runtime/fake"
	"berth/store"
	"berth/worker"
)

// Berth's runtime extensions: GET /v1/gpus, the log routes, and the
// runtime's status on endpoints and /health, read off Berth's supervisor
// running containers on the fake backend (runtime/fake).

// TestGPUs: /v1/gpus is the host's GPUs (the backend's devices) and which
// worker holds each, as Berth's allocator has them.
func TestGPUs(t *testing.T) {
	devs := slices.Clone(apitest.PodGPUs)
	devs[0].PCIBusID, devs[1].PCIBusID = "00000000:01:00.0", "00000000:02:00.0"
	e := apitest.NewValidating(t, apitest.WithFake(devs))
	started := make(chan string, 1)
	e.Fake.Image("gpu-worker", func(ctx context.Context, p fake.Process) int {
		started <- p.Labels[runtime.LabelWorker]
		<-ctx.Done()
		return 0
	})
	tpl := e.NewTemplate("t", "gpu-worker", J{"isServerless": true})
	e.NewEndpoint(tpl.ID, J{"workersMin": 1, "workersMax": 1, "gpuCount": 1})
	var holder string
	select {
	case holder = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no worker started")
	}
	var got []map[string]any
	e.Must(200, "GET", "/v1/gpus", nil, &got)
	row := func(d gpu.Device, holder string) map[string]any {
		return map[string]any{"index": float64(d.Index), "uuid": d.UUID, "name": d.Name, "gpuTypeId": d.TypeID,
			"memoryInMiB": float64(d.MemoryMiB), "pciBusId": d.PCIBusID, "holder": holder}
	}
	want0 := []map[string]any{row(devs[0], holder), row(devs[1], "")}
	want1 := []map[string]any{row(devs[0], ""), row(devs[1], holder)}
	if !reflect.DeepEqual(got, want0) && !reflect.DeepEqual(got, want1) {
		t.Errorf("GET /v1/gpus:\n got %v\nwant one of the two held by %s: %v", got, holder, want0)
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

// logs are the containers of logsEnv: their programs on the fake backend
// print what a test sees through the log routes.
type logs struct {
	worker string      // the endpoint's worker, its log apitest.WorkerLog
	wlive  chan string // lines the first worker prints next; closed: it exits
	wlive2 chan string // lines later workers print next
	plive  chan string // lines the pod prints next
	next   chan string // each later worker's id, its log empty at start
}

// logsEnv is a server on the fake backend with an endpoint whose one worker
// has printed apitest.WorkerLog and a pod that has printed three lines.
func logsEnv(t *testing.T) (e *apitest.Env, l *logs, ep, pod string) {
	l = &logs{wlive: make(chan string), wlive2: make(chan string), plive: make(chan string), next: make(chan string, 4)}
	e = apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs))
	printed := make(chan string, 2)
	var runs atomic.Int32
	prog := func(first string, live chan string) fake.Program {
		return func(ctx context.Context, p fake.Process) int {
			id := p.Labels[runtime.LabelWorker] + p.Labels[runtime.LabelPod]
			live := live
			if p.Labels[runtime.LabelWorker] != "" && runs.Add(1) > 1 {
				live = l.wlive2 // a later worker: its log empty at start
				l.next <- id
			} else {
				io.WriteString(p.Out, first)
				printed <- id
			}
			for {
				select {
				case line, ok := <-live:
					if !ok {
						return 0
					}
					io.WriteString(p.Out, line)
				case <-ctx.Done():
					return 0
				}
			}
		}
	}
	e.Fake.Image("logs-worker", prog(apitest.WorkerLog, l.wlive))
	e.Fake.Image("logs-pod", prog("pod line 1\npod line 2\npod line 3\n", l.plive))
	tpl := e.NewTemplate("t", "logs-worker", J{"isServerless": true})
	ep = e.NewEndpoint(tpl.ID, J{"workersMin": 1, "workersMax": 1}).ID
	pod = e.NewPod(J{"imageName": "logs-pod", "computeType": "CPU"}).ID
	for range 2 {
		select {
		case id := <-printed:
			if id != pod {
				l.worker = id
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the worker and the pod did not print their logs")
		}
	}
	return e, l, ep, pod
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
	e, l, ep, pod := logsEnv(t)
	wlogs := "/v1/endpoints/" + ep + "/workers/" + l.worker + "/logs"
	plogs := "/v1/pods/" + pod + "/logs"
	lines := strings.SplitAfter(apitest.WorkerLog, "\n")

	// The worker's and the pod's logs as the backend keeps them: tail and
	// jobId are applied to what the container printed.
	cases := []struct {
		path, want string
	}{
		{wlogs, apitest.WorkerLog},
		{wlogs + "?tail=2", lines[4] + lines[5]},
		{wlogs + "?tail=0&follow=false", apitest.WorkerLog},
		{wlogs + "?jobId=job-a", lines[2] + lines[5]},
		{wlogs + "?jobId=job-b&tail=3", lines[3]},
		{wlogs + "?jobId=job-z", ""},
		{plogs, "pod line 1\npod line 2\npod line 3\n"},
		{plogs + "?tail=1", "pod line 3\n"},
	}
	for _, c := range cases {
		code, ct, body := getText(e, c.path)
		if code != 200 || ct != "text/plain; charset=utf-8" || body != c.want {
			t.Errorf("GET %s: %d %q\n%q\nwant 200 text/plain; charset=utf-8\n%q", c.path, code, ct, body, c.want)
		}
	}

	// Bad parameters are refused.
	for _, p := range []string{wlogs + "?tail=-1", wlogs + "?tail=ten", plogs + "?tail=1.5", plogs + "?tail=-3"} {
		e.MustErr(400, "GET", p, nil, "tail", "non-negative integer")
	}
	e.MustErr(400, "GET", wlogs+"?follow=maybe", nil, "follow")
	e.MustErr(400, "GET", wlogs+"?jobId=", nil, "jobId")
	e.MustErr(400, "GET", plogs+"?jobId=job-a", nil, "jobId", "worker logs only")

	// Unknown endpoint, worker, pod; a pod whose container is gone (its
	// record kept, no instance on the backend).
	e.MustErr(404, "GET", "/v1/endpoints/nosuchendpoint/workers/wkr1/logs", nil, "endpoint nosuchendpoint not found")
	e.MustErr(404, "GET", "/v1/endpoints/"+ep+"/workers/nosuchworker/logs", nil, "worker nosuchworker", "not found")
	e.MustErr(404, "GET", "/v1/pods/nosuchpod/logs", nil, "pod nosuchpod not found")
	gone := store.Pod{ID: "podwithoutctr1", Name: "gone", DesiredStatus: store.PodExited, Version: 1, ImageName: "logs-pod", ComputeType: "CPU", CloudType: "SECURE", VCPUCount: 2}
	if err := e.DB.Update(func(tx *store.Tx) error { return tx.Apply(store.Put(store.Pods, gone.ID, gone)) }); err != nil {
		t.Fatal(err)
	}
	e.MustErr(404, "GET", "/v1/pods/"+gone.ID+"/logs", nil, "pod "+gone.ID, "no container")

	// A runtime failure is 503 and says what failed.
	e.Fake.FailNext(fake.OpLogs, errors.New("Cannot connect to the Docker daemon"))
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
	e, l, ep, pod := logsEnv(t)

	t.Run("until the log ends", func(t *testing.T) {
		res, br := openFollow(t, context.Background(), e, "/v1/endpoints/"+ep+"/workers/"+l.worker+"/logs?follow=true&tail=1")
		defer res.Body.Close()
		if got := readLine(t, br); got != strings.SplitAfter(apitest.WorkerLog, "\n")[5] {
			t.Errorf("first line %q, want the tail", got)
		}
		for _, line := range []string{"live line 1\n", "live line 2\n"} {
			l.wlive <- line
			if got := readLine(t, br); got != line {
				t.Errorf("streamed %q, want %q", got, line)
			}
		}
		close(l.wlive) // the container exits: the answer ends
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Errorf("after the log ended: %q %v", rest, err)
		}
	})

	t.Run("a new container's empty log", func(t *testing.T) {
		// The endpoint's minimum makes a new worker for the one that
		// exited; it has printed nothing yet.
		var w string
		select {
		case w = <-l.next:
		case <-time.After(30 * time.Second):
			t.Fatal("no new worker after the first exited")
		}
		res, br := openFollow(t, context.Background(), e, "/v1/endpoints/"+ep+"/workers/"+w+"/logs?follow=true")
		defer res.Body.Close()
		l.wlive2 <- "first\n"
		if got := readLine(t, br); got != "first\n" {
			t.Errorf("streamed %q", got)
		}
	})

	t.Run("until the client goes away", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		res, br := openFollow(t, ctx, e, "/v1/pods/"+pod+"/logs?follow=true")
		defer res.Body.Close()
		for range 3 {
			readLine(t, br) // the log so far
		}
		l.plive <- "live\n"
		if got := readLine(t, br); got != "live\n" {
			t.Errorf("streamed %q", got)
		}
		in := e.PodInstance(pod).ID
		if n := e.Fake.Readers(in); n != 1 {
			t.Errorf("%d readers of the pod's log while streaming, want 1", n)
		}
		cancel()
		// The server closes the container's log.
		deadline := time.Now().Add(30 * time.Second)
		for e.Fake.Readers(in) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the log reader was not closed after the client went away")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func TestEndpointStatus(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs))
	// The worker takes a job and holds it until the test ends.
	took := make(chan string, 1)
	e.Fake.Image("holding-worker", apptest.WorkerProgram(func(ctx context.Context, j *worker.Job) (any, error) {
		took <- j.ID
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	tpl := e.NewTemplate("t", "holding-worker", J{"isServerless": true})
	held := e.NewEndpoint(tpl.ID, J{"workersMax": 1, "scalerType": "REQUEST_COUNT", "scalerValue": 1}).ID
	fine := e.NewEndpoint(tpl.ID, nil).ID
	first := e.Run(held, `{"n": 0}`)
	select {
	case id := <-took:
		if id != first {
			t.Fatalf("the worker took %s, want %s", id, first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no worker took the job")
	}
	for i := 1; i <= 3; i++ {
		e.Run(held, fmt.Sprintf(`{"n": %d}`, i))
	}
	// The reason appears on the supervisor's next pass.
	const reason = "workersMax (1) reached: 3 job(s) waiting"
	var got struct {
		ID     string         `json:"id"`
		Status map[string]any `json:"status"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e.Must(200, "GET", "/v1/endpoints/"+held, nil, &got)
		if got.Status["reason"] == reason {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoint status never gave %q: %v", reason, got.Status)
		}
	}
	if got.Status["desired"] != 1.0 || got.Status["workers"].(map[string]any)["running"] != 1.0 {
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
