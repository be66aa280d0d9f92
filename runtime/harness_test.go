package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth/gpu"
	"berth/httpapi"
	"berth/internal/dockertest"
	"berth/internal/logtest"
	"berth/metrics"
	"berth/mgmt"
	"berth/queue"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/store"
	"berth/worker"
)

const (
	echoWorker = "berth/testdata/echoworker"
	testProg   = "berth/runtime/testdata/testprog"
	apiKey     = "test-key"
	// waitLong bounds every wait for a container-level event.
	waitLong = 45 * time.Second
)

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// usage records OnRun calls.
type usage struct {
	mu     sync.Mutex
	starts map[string]int
	ends   map[string]int
}

func (u *usage) record(kind, id, endpointID, gpuType string, gpus int, start, end time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if end.IsZero() {
		u.starts[id]++
	} else {
		u.ends[id]++
	}
}

func (u *usage) counts() (starts, ends int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, n := range u.starts {
		starts += n
	}
	for _, n := range u.ends {
		ends += n
	}
	return
}

// env is one Berth in miniature: store, queue, HTTP API (worker protocol)
// and Supervisor, on its own Docker instance id.
type env struct {
	t   testing.TB
	log *slog.Logger
	db  *store.DB
	q   *queue.Service
	d   *docker.Docker
	// dcfg configures the Docker backend start makes.
	dcfg  docker.Config
	base  string // http://127.0.0.1:PORT for the test's own calls
	cfg   runtime.Config
	sup   atomic.Pointer[runtime.Supervisor]
	use   *usage
	inst  string
	image string // echoworker
	// metrics are fed by the Supervisor (OnScale) and Docker (OnPull)
	// and served on /metrics, as in app/runtime.go.
	prom *metrics.Metrics
	seen seen
}

// seen records what the Supervisor did when, for tests that assert what
// did not happen: each worker start decision (OnScale "start") per
// endpoint, and each listing of the endpoints, which begins every
// autoscaler pass and every reconcile (a pass always follows a reconcile).
type seen struct {
	mu       sync.Mutex
	starts   map[string][]time.Time
	listings []time.Time
}

func (s *seen) start(endpointID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.starts == nil {
		s.starts = map[string][]time.Time{}
	}
	s.starts[endpointID] = append(s.starts[endpointID], time.Now())
}

func (s *seen) listing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listings = append(s.listings, time.Now())
}

// startTimes returns when the Supervisor decided each start of a worker
// of the endpoint.
func (e *env) startTimes(epID string) []time.Time {
	e.seen.mu.Lock()
	defer e.seen.mu.Unlock()
	return slices.Clone(e.seen.starts[epID])
}

// passAfter waits until an autoscaler pass that began after t has ended:
// the event proving that the Supervisor has looked at its endpoints (on its
// own clock, the real one in these tests) later than t. Three listings
// after t do: one of the first two begins a pass (a reconcile's listing is
// followed by its pass's), which ends before the next listing begins. (A
// pass a notification asked for covers the notified endpoints only: with
// more than one endpoint, mind which the test notifies.)
func (e *env) passAfter(t time.Time) {
	e.t.Helper()
	e.eventually("an autoscaler pass after "+t.Format("15:04:05.000"), func() bool {
		e.seen.mu.Lock()
		defer e.seen.mu.Unlock()
		n := 0
		for _, at := range e.seen.listings {
			if at.After(t) {
				n++
			}
		}
		return n >= 3
	})
}

type envOpt func(*runtime.Config)

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	return newEnvAt(t, "0.0.0.0", opts...)
}

// newEnvAt serves the HTTP API on host (an IP) at a free port.
func newEnvAt(t testing.TB, host string, opts ...envOpt) *env {
	t.Helper()
	dockertest.Require(t)
	e := &env{t: t, inst: dockertest.Unique("inst-"), use: &usage{starts: map[string]int{}, ends: map[string]int{}}}
	// Every line is checked against the log attribute rules
	// (internal/logtest); printed only with -v.
	var out slog.Handler = slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})
	if !testing.Verbose() {
		out = nil
	}
	var lines *logtest.Lines
	e.log, lines = logtest.Check(t, out)
	// The worker lifecycle refuses a state change it does not allow and
	// logs it: in these tests that is a bug (runtime/lifecycle.go).
	t.Cleanup(func() {
		if l := lines.Find("worker state change refused"); l != nil {
			t.Errorf("the worker lifecycle refused a state change: %v", l)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := docker.Connect(ctx, e.log)
	if err != nil {
		t.Fatalf("docker.Connect: %v", err)
	}
	e.d = d
	e.prom = metrics.New()
	d.OnPull = e.prom.Pull
	t.Cleanup(func() { _ = d.Close() })
	e.image = dockertest.BuildGoImage(t, echoWorker)

	db, err := store.Open(filepath.Join(t.TempDir(), "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e.db = db
	e.q = queue.New(db, queue.Config{
		Logger: e.log,
		OnQueueChange: func(id string) {
			if s := e.sup.Load(); s != nil {
				s.Notify(id)
			}
		},
		OnStopPod: func(ep, w string) {
			if s := e.sup.Load(); s != nil {
				s.Recycle(ep, w)
			}
		},
	})
	if err := e.q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.q.Stop)

	// httpapi needs the management rules; their endpoint hooks reach the
	// API made just below.
	var api *httpapi.Server
	mg := mgmt.New(mgmt.Config{Store: db, Logger: e.log, DataDir: filepath.Dir(db.Path()), Jobs: e.q,
		EndpointChanged: func(id string) { api.EndpointChanged(id) },
		EndpointDeleted: func(id string) { api.EndpointDeleted(id) }})
	api, err = httpapi.New(httpapi.Config{Store: db, Queue: e.q, Mgmt: mg, Logger: e.log, APIKeyHash: httpapi.HashKey(apiKey), Metrics: e.prom,
		Workers: func(id string) queue.WorkerCounts {
			if s := e.sup.Load(); s != nil {
				return s.WorkerCounts(id)
			}
			return queue.WorkerCounts{}
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Containers reach it through the bridge gateway
	// (host.docker.internal:host-gateway): bind on every interface, or on
	// the gateway's address only.
	if host == "gateway" {
		if host, err = d.BridgeGateway(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	e.base = "http://" + ln.Addr().String()

	e.cfg = runtime.Config{
		Queue: e.q, Logger: e.log,
		Endpoints: func() ([]store.Endpoint, error) {
			e.seen.listing()
			return e.endpoints()
		},
		Template:      e.template,
		WorkerBaseURL: fmt.Sprintf("http://host.docker.internal:%d", port),
		WorkerEnv: func(base, ep, w, key string) map[string]string {
			return worker.PlatformEnv(base, ep, w, key, 2000)
		},
		OnRun: e.use.record,
		OnScale: func(endpointID, action string) {
			if action == "start" {
				e.seen.start(endpointID)
			}
			e.prom.Scale(endpointID, action)
		},
		TickInterval:   100 * time.Millisecond,
		ResyncInterval: 2 * time.Second,
		BackoffBase:    200 * time.Millisecond,
		BackoffMax:     3 * time.Second,
	}
	e.dcfg = docker.Config{Instance: e.inst, DataDir: t.TempDir()}
	for _, o := range opts {
		o(&e.cfg)
	}
	// Registered last, so it runs first: no container outlives the test.
	t.Cleanup(e.removeAll)
	return e
}

// start makes and starts a Supervisor from e.cfg, on a Docker backend
// from e.dcfg.
func (e *env) start() *runtime.Supervisor {
	e.t.Helper()
	b, err := docker.NewBackend(e.d, e.dcfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.cfg.Backend = b
	s, err := runtime.New(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.sup.Store(s)
	e.t.Cleanup(s.Stop)
	return s
}

func (e *env) removeAll() {
	if s := e.sup.Load(); s != nil {
		s.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	infos, err := e.d.List(ctx, e.inst)
	if err != nil {
		e.t.Errorf("list containers: %v", err)
		return
	}
	for _, in := range infos {
		if err := e.d.Remove(ctx, in.ID, true); err != nil {
			e.t.Errorf("remove %s: %v", in.ID, err)
		}
	}
}

func (e *env) endpoints() ([]store.Endpoint, error) {
	var out []store.Endpoint
	err := e.db.View(func(tx *store.Tx) error {
		return tx.ForEach(store.Endpoints, func(_ string, raw []byte) error {
			var ep store.Endpoint
			if err := json.Unmarshal(raw, &ep); err != nil {
				return err
			}
			out = append(out, ep)
			return nil
		})
	})
	return out, err
}

func (e *env) template(id string) (store.Template, error) {
	var t store.Template
	err := e.db.View(func(tx *store.Tx) error { return tx.Get(store.Templates, id, &t) })
	return t, err
}

func (e *env) putTemplate(mod func(*store.Template)) store.Template {
	e.t.Helper()
	t := store.Template{ID: queue.NewID(10), Name: dockertest.Unique("tmpl-"), ImageName: e.image, IsServerless: true,
		Env: map[string]string{}}
	if mod != nil {
		mod(&t)
	}
	if err := e.db.Write(store.Put(store.Templates, t.ID, t)); err != nil {
		e.t.Fatal(err)
	}
	return t
}

func (e *env) putEndpoint(templateID string, mod func(*store.Endpoint)) store.Endpoint {
	e.t.Helper()
	ep := store.Endpoint{ID: queue.NewID(14), TemplateID: templateID, Version: 1, ComputeType: "CPU", GPUCount: 1,
		IdleTimeout: 5, ScalerType: runtime.ScalerQueueDelay, ScalerValue: 4, WorkersMin: 0, WorkersMax: 3,
		ExecutionTimeoutMs: 20_000, Env: map[string]string{}}
	if mod != nil {
		mod(&ep)
	}
	e.saveEndpoint(ep)
	return ep
}

func (e *env) saveEndpoint(ep store.Endpoint) {
	e.t.Helper()
	if err := e.db.Write(store.Put(store.Endpoints, ep.ID, ep)); err != nil {
		e.t.Fatal(err)
	}
	if s := e.sup.Load(); s != nil {
		s.Notify(ep.ID)
	}
}

func (e *env) deleteEndpoint(id string) {
	e.t.Helper()
	if err := e.db.Write(store.Delete(store.Endpoints, id)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) submit(epID, input string) string {
	e.t.Helper()
	r, err := e.q.Submit(queue.SubmitRequest{EndpointID: epID, Input: json.RawMessage(input), ExecutionTimeout: 20 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.ID
}

// run submits through the HTTP API, like a client.
func (e *env) run(epID, input string) string {
	e.t.Helper()
	var out struct{ ID string }
	e.call(http.MethodPost, "/v2/"+epID+"/run", `{"input":`+input+`}`, &out)
	return out.ID
}

func (e *env) call(method, path, body string, out any) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		e.t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// metric scrapes /metrics and returns the value of name{labels} (pairs),
// -1 when there is no such series.
func (e *env) metric(name string, labels ...string) float64 {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			ok = ok && strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`)
		}
		if ok {
			f, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			return f
		}
	}
	return -1
}

// wait returns the job's status once it is terminal.
func (e *env) wait(epID, jobID string) queue.StatusResponse {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for {
		r, err := e.q.Wait(ctx, epID, jobID, waitLong)
		if err != nil {
			e.t.Fatalf("job %s: %v", jobID, err)
		}
		if r.Status.Terminal() {
			return r
		}
		if ctx.Err() != nil {
			e.t.Fatalf("job %s still %s", jobID, r.Status)
		}
	}
}

func (e *env) waitCompleted(epID, jobID string) json.RawMessage {
	e.t.Helper()
	r := e.wait(epID, jobID)
	if r.Status != store.Completed {
		msg := ""
		if r.Error != nil {
			msg = *r.Error
		}
		e.t.Fatalf("job %s: %s %s", jobID, r.Status, msg)
	}
	return r.Output
}

// eventually polls cond until it holds or waitLong passes.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) sv() *runtime.Supervisor { return e.sup.Load() }

// containers lists this env's containers of one kind.
func (e *env) containers(kind string) []docker.ContainerInfo {
	e.t.Helper()
	infos, err := e.d.List(context.Background(), e.inst)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []docker.ContainerInfo
	for _, in := range infos {
		if kind == "" || in.Labels[runtime.LabelKind] == kind {
			out = append(out, in)
		}
	}
	return out
}

func (e *env) running(epID string) []docker.ContainerInfo {
	var out []docker.ContainerInfo
	for _, c := range e.containers(runtime.KindWorker) {
		if c.Running && c.Labels[runtime.LabelEndpoint] == epID {
			out = append(out, c)
		}
	}
	return out
}

// readyWorkers lists the endpoint's workers in contact with Berth.
func (e *env) readyWorkers(epID string) []runtime.WorkerInfo {
	var out []runtime.WorkerInfo
	for _, w := range e.sv().Workers(epID) {
		if w.State == runtime.StateIdle || w.State == runtime.StateRunning {
			out = append(out, w)
		}
	}
	return out
}

func jsonString(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(bytes.TrimSpace(raw))
	}
	return s
}

func fakeGPUs(uuids ...string) *gpu.Allocator {
	var devs []gpu.Device
	for i, u := range uuids {
		devs = append(devs, gpu.Device{Index: i, UUID: u, Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564})
	}
	return gpu.NewAllocator(devs)
}
