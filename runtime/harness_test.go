package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth/app"
	"berth/gpu"
	"berth/internal/apptest"
	"berth/internal/dockertest"
	"berth/internal/logtest"
	"berth/queue"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/store"
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

// env is one Berth for a test, as berth serve composes it (app.New through
// internal/apptest) on the Docker daemon, with the test's runtime settings
// (short ticks and back-offs) and GPUs, plus the test's own connection to
// the daemon (what docker ps shows). Berth starts at start, so a test can
// change cfg first, and can be stopped and started again (its containers
// kept, as berth serve leaves them) to test what a restart adopts.
type env struct {
	t testing.TB
	// cfg is the settings start starts Berth with.
	cfg app.Config
	b   *apptest.Berth // nil until start, and while stopped
	// pre is the data folder's file while Berth is not running: records a
	// test puts before start are there when Berth opens it.
	pre   *store.DB
	d     *docker.Docker
	inst  string
	image string // echoworker
	lines *logtest.Lines
}

type envOpt func(*app.Config)

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	return newEnvAt(t, "0.0.0.0", opts...)
}

// newEnvAt serves the API on host (an IP) at a free port. On a loopback
// address containers reach the worker protocol through Berth's second
// listener on the Docker bridge's gateway.
func newEnvAt(t testing.TB, host string, opts ...envOpt) *env {
	t.Helper()
	dockertest.Require(t)
	e := &env{t: t}
	// Every line is checked against the log attribute rules
	// (internal/logtest); printed only with -v.
	var out slog.Handler = slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})
	if !testing.Verbose() {
		out = nil
	}
	var log *slog.Logger
	log, e.lines = logtest.Check(t, out)
	// The worker lifecycle refuses a state change it does not allow and
	// logs it: in these tests that is a bug (runtime/lifecycle.go).
	t.Cleanup(func() {
		if l := e.lines.Find("worker state change refused"); l != nil {
			t.Errorf("the worker lifecycle refused a state change: %v", l)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := docker.Connect(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("docker.Connect: %v", err)
	}
	e.d = d
	t.Cleanup(func() { _ = d.Close() })
	e.image = dockertest.BuildGoImage(t, echoWorker)

	e.cfg = apptest.Config(t, apiKey)
	e.cfg.Addr = net.JoinHostPort(host, "0")
	e.cfg.Logger = log
	e.cfg.Backend = app.DockerRequired
	// Workers are told to ping every 2 s.
	e.cfg.HTTP.PingInterval = 2 * time.Second
	e.cfg.Runtime = runtime.Config{
		TickInterval:   100 * time.Millisecond,
		ResyncInterval: 2 * time.Second,
		BackoffBase:    200 * time.Millisecond,
		BackoffMax:     3 * time.Second,
	}
	e.inst = app.Instance(e.cfg.DataDir)
	for _, o := range opts {
		o(&e.cfg)
	}
	// Registered before Berth's stop, so it runs after it: no container
	// outlives the test (Berth leaves them for a next start to adopt).
	t.Cleanup(e.removeAll)
	t.Cleanup(func() {
		if e.pre != nil {
			_ = e.pre.Close()
		}
	})
	return e
}

// start starts Berth with e.cfg (again on the same address after a stop:
// the running containers were told it) and returns its Supervisor.
func (e *env) start() *runtime.Supervisor {
	e.t.Helper()
	if e.pre != nil {
		if err := e.pre.Close(); err != nil {
			e.t.Fatal(err)
		}
		e.pre = nil
	}
	e.b = apptest.Start(e.t, e.cfg)
	e.cfg.Addr = e.b.Addr()
	return e.b.Supervisor()
}

// stop stops Berth (its file checked), leaving its containers running.
func (e *env) stop() {
	e.t.Helper()
	e.b.Stop()
	e.b = nil
}

// restart stops Berth and starts it again: the new Supervisor adopts what
// runs.
func (e *env) restart() *runtime.Supervisor {
	e.t.Helper()
	e.stop()
	return e.start()
}

func (e *env) removeAll() {
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

// db is Berth's store, or the data folder's file while Berth does not run.
func (e *env) db() *store.DB {
	e.t.Helper()
	if e.b != nil {
		return e.b.Store()
	}
	if e.pre == nil {
		db, err := store.Open(filepath.Join(e.cfg.DataDir, "berth.db"), store.Options{})
		if err != nil {
			e.t.Fatal(err)
		}
		e.pre = db
	}
	return e.pre
}

// q is the running Berth's queue.
func (e *env) q() *queue.Service { return e.b.Queue() }

// gpus is the running Berth's GPU allocator (made from cfg.DiscoverGPUs).
func (e *env) gpus() *gpu.Allocator { return e.b.GPUs() }

// workerBaseURL is where containers reach the running Berth.
func (e *env) workerBaseURL() string {
	_, port, _ := net.SplitHostPort(e.b.Addr())
	return "http://host.docker.internal:" + port
}

// startTimes returns when the Supervisor started each worker of the
// endpoint, from its "starting worker" lines.
func (e *env) startTimes(epID string) []time.Time {
	return e.lines.Times("starting worker", "endpoint", epID)
}

// passAfter waits until an autoscaler pass that began after t has ended:
// the event proving that the Supervisor has looked at its endpoints (on
// its own clock, the real one in these tests) later than t. A probe
// endpoint whose template does not exist, written to the store after t
// without a notification, is seen only by a pass over every endpoint (a
// tick's or a resync's), which reports it unhealthy naming the template;
// the probe rewritten once that is seen, and seen again, proves that pass
// ended (passes run one at a time).
func (e *env) passAfter(t time.Time) {
	e.t.Helper()
	e.eventually("the moment "+t.Format("15:04:05.000"), func() bool { return time.Now().After(t) })
	probe := store.Endpoint{ID: queue.NewID(14), Version: 1, ComputeType: "CPU", ScalerType: runtime.ScalerQueueDelay, ScalerValue: 4}
	for range 2 {
		probe.TemplateID = "no-such-template-" + queue.NewID(8)
		if err := e.db().Write(store.Put(store.Endpoints, probe.ID, probe)); err != nil {
			e.t.Fatal(err)
		}
		e.eventually("a pass over the probe endpoint", func() bool {
			return strings.Contains(e.sv().Status(probe.ID).Reason, probe.TemplateID)
		})
	}
	e.deleteEndpoint(probe.ID)
}

// usage counts the usage intervals (billing's records) of kind by id:
// those still open and those closed.
func (e *env) usage(kind string) (open, closed map[string]int) {
	e.t.Helper()
	open, closed = map[string]int{}, map[string]int{}
	err := store.UsageBetween(e.db(), time.Time{}, time.Now().Add(time.Hour), func(iv store.UsageInterval) error {
		switch {
		case iv.Kind != kind:
		case iv.End.IsZero():
			open[iv.ID]++
		default:
			closed[iv.ID]++
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return open, closed
}

func (e *env) putTemplate(mod func(*store.Template)) store.Template {
	e.t.Helper()
	t := store.Template{ID: queue.NewID(10), Name: dockertest.Unique("tmpl-"), ImageName: e.image, IsServerless: true,
		Env: map[string]string{}}
	if mod != nil {
		mod(&t)
	}
	if err := e.db().Write(store.Put(store.Templates, t.ID, t)); err != nil {
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
	if err := e.db().Write(store.Put(store.Endpoints, ep.ID, ep)); err != nil {
		e.t.Fatal(err)
	}
	if e.b != nil {
		e.sv().Notify(ep.ID)
	}
}

func (e *env) deleteEndpoint(id string) {
	e.t.Helper()
	if err := e.db().Write(store.Delete(store.Endpoints, id)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) submit(epID, input string) string {
	e.t.Helper()
	r, err := e.q().Submit(queue.SubmitRequest{EndpointID: epID, Input: json.RawMessage(input), ExecutionTimeout: 20 * time.Second})
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
	req, _ := http.NewRequest(method, e.b.URL()+path, strings.NewReader(body))
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
	req, _ := http.NewRequest(http.MethodGet, e.b.URL()+"/metrics", nil)
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
		r, err := e.q().Wait(ctx, epID, jobID, waitLong)
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

func (e *env) sv() *runtime.Supervisor { return e.b.Supervisor() }

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

// fakeGPUs is Berth's GPU discovery finding RTX 4090s of these UUIDs.
func fakeGPUs(uuids ...string) envOpt {
	var devs []gpu.Device
	for i, u := range uuids {
		devs = append(devs, gpu.Device{Index: i, UUID: u, Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564})
	}
	return withGPUs(devs)
}

// withGPUs is Berth's GPU discovery finding devs.
func withGPUs(devs []gpu.Device) envOpt {
	return func(c *app.Config) { c.DiscoverGPUs = func() ([]gpu.Device, error) { return devs, nil } }
}
