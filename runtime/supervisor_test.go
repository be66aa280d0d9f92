package runtime_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"berth/app"
	"berth/internal/dockertest"
	"berth/queue"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/runtime/voldirs"
	"berth/store"
)

// TestWorkersEndToEnd: jobs submitted over HTTP make the autoscaler start
// containers, results come back, and the idle timeout scales to zero.
func TestWorkersEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The network volume's directory where Berth keeps them (app: the
	// data folder's volumes/).
	vols := voldirs.New(filepath.Join(e.cfg.DataDir, "volumes"), nil)
	if _, err := vols.CreateVolume(context.Background(), "vol1", 10); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vols.Path("vol1"), "hello.txt"), []byte("from the volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	tm := e.putTemplate(func(t *store.Template) {
		t.Env = map[string]string{"FROM_TEMPLATE": "t", "OVERRIDDEN": "template"}
		t.ContainerDiskInGb = 5
	})
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) {
		ep.NetworkVolumeID = "vol1"
		ep.ComputeType = "GPU" // no GPUs found: runs on CPU with a warning
		ep.IdleTimeout = 1
		ep.WorkersMax = 1
		ep.Env = map[string]string{"OVERRIDDEN": "endpoint"}
	})
	s := e.start()
	if got := len(e.running(ep.ID)); got != 0 {
		t.Fatalf("%d workers before any job", got)
	}

	ids := []string{
		e.run(ep.ID, `{"echo": "hello"}`),
		e.run(ep.ID, `{"env": "OVERRIDDEN"}`),
		e.run(ep.ID, `{"env": "FROM_TEMPLATE"}`),
		e.run(ep.ID, `{"env": "RUNPOD_SKIP_GPU_CHECK"}`),
		e.run(ep.ID, `{"env": "RUNPOD_GPU_COUNT"}`),
		e.run(ep.ID, `{"env": "RUNPOD_POD_HOSTNAME"}`),
		e.run(ep.ID, `{"read_file": "/runpod-volume/hello.txt"}`),
		e.run(ep.ID, `{"sleep_ms": 1500}`), // keeps the worker busy while we look
	}
	want := map[int]string{0: "hello", 1: "endpoint", 2: "t", 3: "true", 4: "0", 6: "from the volume"}
	var workerIDs []string
	for i, id := range ids[:7] {
		out := jsonString(e.waitCompleted(ep.ID, id))
		r, _ := e.q().Status(ep.ID, id, 0)
		workerIDs = append(workerIDs, r.WorkerID)
		if w, ok := want[i]; ok && out != w {
			t.Fatalf("job %d output %q, want %q", i, out, want[i])
		}
		if i == 5 && out != r.WorkerID {
			t.Fatalf("RUNPOD_POD_HOSTNAME %q, want the worker id %q", out, r.WorkerID)
		}
	}
	st := s.Status(ep.ID)
	if !strings.Contains(st.Warning, "no GPUs") {
		t.Fatalf("status warning %q: want the CPU fallback warning", st.Warning)
	}
	if drv := e.d.Info().StorageDriver; (drv == "fuse-overlayfs" || drv == "vfs") && !strings.Contains(st.Warning, "containerDiskInGb (5) is not enforced") {
		t.Fatalf("status warning %q: want the container disk warning on %s", st.Warning, drv)
	}
	// The worker's container carries the labels and Berth's env.
	cs := e.running(ep.ID)
	if len(cs) != 1 {
		t.Fatalf("%d running worker containers, want 1 (workersMax)", len(cs))
	}
	c := cs[0]
	for k, v := range map[string]string{runtime.LabelKind: runtime.KindWorker, runtime.LabelEndpoint: ep.ID, runtime.LabelVersion: "1", runtime.LabelDataDir: e.inst, runtime.LabelWorker: workerIDs[0]} {
		if c.Labels[k] != v {
			t.Fatalf("label %s=%q, want %q", k, c.Labels[k], v)
		}
	}

	// Logs of one job, through the JSON log lines' requestId. The job has
	// ended, but Docker's log driver may not have delivered its lines yet:
	// read until they are there.
	var lines []string
	e.eventually("the job's log lines", func() bool {
		rc, err := s.WorkerLogs(context.Background(), ep.ID, workerIDs[0], false, 0, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		lines = readLines(t, rc)
		return len(lines) >= 2
	})
	if len(lines) < 2 || !strings.Contains(lines[0], `"message": "Started"`) {
		t.Fatalf("job logs: %q", lines)
	}
	for _, l := range lines {
		if !strings.Contains(l, ids[0]) {
			t.Fatalf("job logs hold another line: %q", l)
		}
	}
	if _, err := s.WorkerLogs(context.Background(), ep.ID, "nope", false, 0, ""); !errors.Is(err, runtime.ErrUnknownWorker) {
		t.Fatalf("logs of an unknown worker: %v", err)
	}
	e.waitCompleted(ep.ID, ids[7])

	// Idle timeout 1 s: back to zero, containers removed.
	e.eventually("scale to zero", func() bool { return len(e.containers("")) == 0 && len(s.Workers(ep.ID)) == 0 })
	if n := len(e.q().Workers(ep.ID)); n != 0 {
		t.Fatalf("%d worker identities left in the queue", n)
	}
	// Billing's records: the workers' runs, all closed.
	e.eventually("usage closed", func() bool { open, closed := e.usage(store.UsageWorker); return len(open) == 0 && len(closed) > 0 })
	var h queue.Health
	e.call("GET", "/v2/"+ep.ID+"/health", "", &h)
	if h.Jobs.Completed != len(ids) || h.Workers != (queue.WorkerCounts{}) {
		t.Fatalf("health %+v", h)
	}
}

// TestWorkersMinAndMax: workersMin stays warm past the idle timeout, and
// workersMax holds demand back with the reason reported.
func TestWorkersMinAndMax(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) {
		ep.WorkersMin, ep.WorkersMax, ep.IdleTimeout = 1, 1, 1
		ep.ScalerType, ep.ScalerValue = runtime.ScalerRequestCount, 1
	})
	s := e.start()
	e.eventually("a warm worker", func() bool { return len(e.readyWorkers(ep.ID)) == 1 })
	warm := e.readyWorkers(ep.ID)[0].WorkerID

	var ids []string
	for range 3 {
		ids = append(ids, e.submit(ep.ID, `{"sleep_ms": 700}`))
	}
	e.eventually("workersMax reason", func() bool {
		st := s.Status(ep.ID)
		return strings.Contains(st.Reason, "workersMax (1) reached") && st.Desired == 1
	})
	var h queue.Health
	e.call("GET", "/v2/"+ep.ID+"/health", "", &h)
	if h.Jobs.InQueue == 0 {
		t.Fatalf("health %+v: want jobs IN_QUEUE behind workersMax", h)
	}
	for _, id := range ids {
		e.waitCompleted(ep.ID, id)
		if n := len(e.running(ep.ID)); n > 1 {
			t.Fatalf("%d workers running, workersMax 1", n)
		}
	}
	// Idle for several idle timeouts: the warm worker stays. It is idle
	// once the Supervisor says so; a pass that began 2.5 idle timeouts
	// later has not drained it.
	e.eventually("the warm worker idle", func() bool {
		ws := s.Workers(ep.ID)
		return len(ws) == 1 && ws[0].State == runtime.StateIdle
	})
	e.passAfter(time.Now().Add(2500 * time.Millisecond))
	if ws := s.Workers(ep.ID); len(ws) != 1 || ws[0].WorkerID != warm || ws[0].State != runtime.StateIdle {
		t.Fatalf("workers %+v: want the warm worker %s only, idle", ws, warm)
	}
	if n := e.metric("berth_scaling_decisions_total", "endpoint", ep.ID, "action", "drain"); n > 0 {
		t.Fatalf("%v drains: the warm worker (workersMin 1) must stay", n)
	}
	if st := s.Status(ep.ID); st.Reason != "" {
		t.Fatalf("reason %q after the queue drained", st.Reason)
	}
}

// TestCrashRetried: a worker that dies mid-job has its job retried on a
// replacement worker, with back-off, until the attempts are used up; the
// endpoint keeps serving other jobs.
func TestCrashRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.WorkersMax = 1 })
	s := e.start()
	crash := e.submit(ep.ID, `{"exit": 3}`)
	r := e.wait(ep.ID, crash)
	if r.Status != store.Failed || r.Error == nil || !strings.Contains(*r.Error, "exited with code 3") ||
		!strings.Contains(*r.Error, "gave up after 3 attempts") {
		t.Fatalf("crash job: %+v %v", r, *r.Error)
	}
	h := e.q().Health(ep.ID)
	if h.Jobs.Retried != 2 {
		t.Fatalf("retried %d, want 2 (3 attempts on 3 workers)", h.Jobs.Retried)
	}
	e.eventually("three crashes counted", func() bool { return s.Status(ep.ID).Crashes == 3 })
	st := s.Status(ep.ID)
	if st.Attempts < 3 || !strings.Contains(st.LastError, "exited with code 3") {
		t.Fatalf("status %+v", st)
	}
	// A crash-looping endpoint still serves jobs that do not crash.
	ok := e.submit(ep.ID, `{"echo": 1}`)
	if out := jsonString(e.waitCompleted(ep.ID, ok)); out != "1" {
		t.Fatalf("output %s", out)
	}
}

// TestDrainOnScaleDown: lowering workersMax drains a busy worker, which
// finishes its job before it stops.
func TestDrainOnScaleDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) {
		ep.WorkersMax, ep.ScalerType, ep.ScalerValue = 2, runtime.ScalerRequestCount, 1
	})
	s := e.start()
	a := e.submit(ep.ID, `{"sleep_ms": 2500, "echo": "a"}`)
	b := e.submit(ep.ID, `{"sleep_ms": 2500, "echo": "b"}`)
	e.eventually("two running workers", func() bool { return s.Status(ep.ID).Workers.Running == 2 })
	ep.WorkersMax = 1
	e.saveEndpoint(ep)
	e.eventually("one worker draining", func() bool { return s.Status(ep.ID).Workers.Draining == 1 })
	for _, id := range []string{a, b} {
		e.waitCompleted(ep.ID, id)
	}
	if h := e.q().Health(ep.ID); h.Jobs.Retried != 0 || h.Jobs.Completed != 2 {
		t.Fatalf("health %+v: the drained worker's job must complete, not be retried", h.Jobs)
	}
	e.eventually("the drained container gone", func() bool { return len(e.running(ep.ID)) <= 1 })
	// /metrics counted the decisions: two starts, at least one drain.
	if n := e.metric("berth_scaling_decisions_total", "endpoint", ep.ID, "action", "start"); n < 2 {
		t.Errorf("starts counted: %v", n)
	}
	if n := e.metric("berth_scaling_decisions_total", "endpoint", ep.ID, "action", "drain"); n < 1 {
		t.Errorf("drains counted: %v", n)
	}
}

// TestRollingUpdate: a new endpoint version starts new workers first, then
// drains the old ones.
func TestRollingUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) {
		ep.WorkersMin = 1
		ep.Env = map[string]string{"GEN": "one"}
	})
	s := e.start()
	e.eventually("a warm worker", func() bool { return len(e.readyWorkers(ep.ID)) == 1 })
	oldW := e.readyWorkers(ep.ID)[0]
	busy := e.submit(ep.ID, `{"sleep_ms": 1500, "env": "GEN"}`)
	e.eventually("old worker busy", func() bool { return s.Status(ep.ID).Workers.Running == 1 })

	ep.Version = 2
	ep.Env = map[string]string{"GEN": "two"}
	e.saveEndpoint(ep)
	// The successor starts while the old worker still runs its job.
	e.eventually("successor ready", func() bool {
		for _, w := range e.readyWorkers(ep.ID) {
			if w.Version == 2 {
				return true
			}
		}
		return false
	})
	if out := jsonString(e.waitCompleted(ep.ID, busy)); out != "one" {
		t.Fatalf("the old worker's job: %q", out)
	}
	e.eventually("old worker gone", func() bool {
		ws := s.Workers(ep.ID)
		return len(ws) == 1 && ws[0].Version == 2 && ws[0].WorkerID != oldW.WorkerID && len(e.running(ep.ID)) == 1
	})
	if c := e.running(ep.ID)[0]; c.Labels[runtime.LabelVersion] != "2" {
		t.Fatalf("version label %q", c.Labels[runtime.LabelVersion])
	}
	if out := jsonString(e.waitCompleted(ep.ID, e.submit(ep.ID, `{"env": "GEN"}`))); out != "two" {
		t.Fatalf("new worker env GEN=%q", out)
	}
	if h := e.q().Health(ep.ID); h.Jobs.Retried != 0 {
		t.Fatalf("retried %d during the roll", h.Jobs.Retried)
	}
}

// TestStopPodRecycles: a result with stopPod recycles the worker. Berth
// listens on loopback here (the production suggestion): containers reach
// it through its worker-protocol listener on the bridge gateway.
func TestStopPodRecycles(t *testing.T) {
	t.Parallel()
	e := newEnvAt(t, "127.0.0.1")
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.WorkersMin = 1 })
	s := e.start()
	if e.b.WorkerAddr() == "" {
		t.Fatal("no worker-protocol listener for containers")
	}
	t.Logf("worker-protocol listener at %s", e.b.WorkerAddr())
	id := e.submit(ep.ID, `{"stop_pod": true, "echo": {"x": 1}}`)
	e.waitCompleted(ep.ID, id)
	r, _ := e.q().Status(ep.ID, id, 0)
	e.eventually("a fresh worker", func() bool {
		ws := e.readyWorkers(ep.ID)
		return len(ws) == 1 && ws[0].WorkerID != r.WorkerID && len(s.Workers(ep.ID)) == 1
	})
	for _, c := range e.containers(runtime.KindWorker) {
		if c.Labels[runtime.LabelWorker] == r.WorkerID {
			t.Fatalf("recycled worker's container %s still exists (%s)", c.ID, c.State)
		}
	}
}

// TestIgnoredStop: a worker that keeps running a cancelled job — one
// without the job-stop channel (runpod-python < 1.10), or one that fetches
// the stop but whose handler ignores it (its heartbeat still reports the
// job) — has its container stopped and is replaced.
func TestIgnoredStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, input string
		env         map[string]string
	}{
		{"no stop channel", `{"sleep_ms": 60000}`, map[string]string{"ECHOWORKER_NO_STOP_CHANNEL": "1"}},
		{"handler ignores the stop", `{"sleep_ms": 60000, "ignore_stop": true}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *app.Config) { c.Runtime.StopIgnoredAfter = time.Second })
			tm := e.putTemplate(func(t *store.Template) { t.Env = tt.env })
			ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.WorkersMin = 1 })
			s := e.start()
			id := e.submit(ep.ID, tt.input)
			e.eventually("job running", func() bool { r, _ := e.q().Status(ep.ID, id, 0); return r.Status == store.InProgress })
			r, _ := e.q().Status(ep.ID, id, 0)
			if _, err := e.q().Cancel(ep.ID, id); err != nil {
				t.Fatal(err)
			}
			e.eventually("worker replaced", func() bool {
				ws := e.readyWorkers(ep.ID)
				return len(ws) == 1 && ws[0].WorkerID != r.WorkerID
			})
			if st := s.Status(ep.ID); !strings.Contains(st.LastError, "ignored the stop of job "+id) {
				t.Fatalf("status %+v", st)
			}
			if r, _ := e.q().Status(ep.ID, id, 0); r.Status != store.Cancelled {
				t.Fatalf("job %s", r.Status)
			}
		})
	}
}

// TestImageNeverStarts: an image that exits before contacting Berth, and
// one that cannot be pulled, mark their endpoints unhealthy with the reason
// and back off instead of restarting in a loop.
func TestImageNeverStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prog := buildImage(t, testProg)
	crashT := e.putTemplate(func(t *store.Template) { t.ImageName, t.DockerStartCmd = prog, []string{"crash"} })
	crashEP := e.putEndpoint(crashT.ID, func(ep *store.Endpoint) { ep.WorkersMin = 1 })
	missT := e.putTemplate(func(t *store.Template) { t.ImageName = "berth-test/does-not-exist:" + crashEP.ID })
	missEP := e.putEndpoint(missT.ID, func(ep *store.Endpoint) { ep.WorkersMin = 1 })
	s := e.start()
	for _, id := range []string{crashEP.ID, missEP.ID} {
		e.eventually("unhealthy "+id, func() bool { return s.Status(id).Unhealthy })
	}
	st := s.Status(crashEP.ID)
	if !strings.Contains(st.Reason, "exited with code 2") || !strings.Contains(st.Reason, "testprog crash") || st.Workers.Unhealthy != 1 {
		t.Fatalf("crash status %+v", st)
	}
	if st := s.Status(missEP.ID); !strings.Contains(st.Reason, "does-not-exist") {
		t.Fatalf("pull status %+v", st)
	}
	var h queue.Health
	e.call("GET", "/v2/"+crashEP.ID+"/health", "", &h)
	if h.Workers.Unhealthy != 1 {
		t.Fatalf("health %+v", h.Workers)
	}
	// The last failed container is kept for its logs.
	e.eventually("the kept container's logs", func() bool {
		for _, c := range e.containers(runtime.KindWorker) {
			if c.Labels[runtime.LabelEndpoint] != crashEP.ID || c.Running {
				continue
			}
			rc, err := s.WorkerLogs(context.Background(), crashEP.ID, c.Labels[runtime.LabelWorker], false, 0, "")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), "panic: testprog crash") {
				return true
			}
		}
		return false
	})
	// No restart storm: each start after a failed one waited out the
	// back-off, 200ms·2^(n-1) after the n-th failure (capped at 3 s), so
	// the start decisions are at least that far apart. Two starts past
	// the three that made the endpoint unhealthy are enough to see it.
	e.eventually("two starts while unhealthy", func() bool { return len(e.startTimes(crashEP.ID)) >= 5 })
	starts := e.startTimes(crashEP.ID)
	for n := 1; n < len(starts); n++ {
		backoff := min(200*time.Millisecond<<(n-1), 3*time.Second)
		if gap := starts[n].Sub(starts[n-1]); gap < backoff {
			t.Fatalf("start %d came %s after the previous one, within the %s back-off (starts %v)", n+1, gap, backoff, starts)
		}
	}
	// A new configuration gets a fresh try.
	crashT.DockerStartCmd = nil
	crashT.ImageName = e.image
	if err := e.db().Write(store.Put(store.Templates, crashT.ID, crashT)); err != nil {
		t.Fatal(err)
	}
	s.Notify(crashEP.ID)
	e.eventually("healthy again", func() bool {
		st := s.Status(crashEP.ID)
		return !st.Unhealthy && st.Workers.Idle == 1
	})
}

// TestGPUs: a GPU endpoint gets exact devices as device requests; on this
// GPU-less daemon the start fails, which marks the endpoint unhealthy once
// (no restart storm). Held GPUs throttle, unknown types are reported.
func TestGPUs(t *testing.T) {
	t.Parallel()
	const uuid = "GPU-8f2c1c1e-0000-4000-8000-000000000001"
	const uuid2 = "GPU-8f2c1c1e-0000-4000-8000-000000000002"
	e := newEnv(t, fakeGPUs(uuid, uuid2))
	s := e.start()
	alloc := e.gpus()
	// The first GPU is taken before the endpoint exists, so the
	// allocation is deterministic.
	if _, err := alloc.Allocate("someone", nil, 1); err != nil {
		t.Fatal(err)
	}
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) {
		ep.ComputeType, ep.WorkersMin, ep.GPUCount = "GPU", 1, 1
		ep.GPUTypeIDs = []string{"NVIDIA A100 80GB PCIe", "NVIDIA GeForce RTX 4090"}
	})
	e.eventually("unhealthy", func() bool { return s.Status(ep.ID).Unhealthy })
	st := s.Status(ep.ID)
	t.Logf("status: %+v", st)
	if !strings.Contains(st.Reason, "NVIDIA Container Toolkit") || !docker.IsNoGPURuntime(errors.New(st.LastError)) {
		t.Fatalf("status %+v", st)
	}
	var c docker.ContainerInfo
	for _, in := range e.containers(runtime.KindWorker) {
		if in.Labels[runtime.LabelEndpoint] == ep.ID {
			c = in
		}
	}
	if !slices.Equal(c.GPUDeviceIDs, []string{uuid2}) || c.Labels[runtime.LabelGPUs] != uuid2 || c.Running {
		t.Fatalf("container %+v: want device request and label %s", c, uuid2)
	}
	for _, g := range alloc.Snapshot() {
		if g.UUID == uuid2 && g.Holder != "" {
			t.Fatalf("GPU still held by %q after the failed start", g.Holder)
		}
	}
	// One attempt, then the long back-off (BackoffMax, 3 s here): no
	// toolkit appears by waiting. The status said when the next try is due
	// (unless that moment has passed already); the next start, when it
	// comes, waited it out.
	if first := e.startTimes(ep.ID)[0]; st.Attempts == 1 && !st.NextAttempt.IsZero() && st.NextAttempt.Sub(first) < 3*time.Second {
		t.Fatalf("status %+v: want the next attempt 3 s after the first (%s)", st, first)
	}
	e.eventually("the start after the back-off", func() bool { return len(e.startTimes(ep.ID)) >= 2 })
	if starts := e.startTimes(ep.ID); starts[1].Sub(starts[0]) < 3*time.Second {
		t.Fatalf("second start %s after the first, within the 3 s back-off", starts[1].Sub(starts[0]))
	}

	// All GPUs held: throttled, with the reason; nothing started.
	full := e.putEndpoint(tm.ID, func(x *store.Endpoint) { x.ComputeType, x.WorkersMin, x.GPUCount = "GPU", 1, 2 })
	e.eventually("throttled", func() bool { return s.Status(full.ID).Workers.Throttled == 1 })
	if st := s.Status(full.ID); !strings.Contains(st.Reason, "waiting for free GPUs") || st.Unhealthy {
		t.Fatalf("throttled status %+v", st)
	}
	// No GPU of the type on this machine: unhealthy, nothing started.
	none := e.putEndpoint(tm.ID, func(x *store.Endpoint) {
		x.ComputeType, x.WorkersMin, x.GPUTypeIDs = "GPU", 1, []string{"NVIDIA H100 80GB HBM3"}
	})
	e.eventually("unknown type", func() bool { return strings.Contains(s.Status(none.ID).Reason, "no GPU of the requested types") })
	for _, id := range []string{full.ID, none.ID} {
		if st := s.Status(id); st.Attempts != 0 {
			t.Fatalf("%s: %d attempts", id, st.Attempts)
		}
	}
}

// TestReconcile: a new Supervisor on the same instance adopts running
// workers (restoring GPU allocations from labels), removes orphans and
// exited containers, and the adopted worker finishes its job.
func TestReconcile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakeGPUs("GPU-aaaaaaaa-0000-4000-8000-000000000001"), func(c *app.Config) { c.Runtime.DrainGrace = time.Second })
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.WorkersMin = 1 })
	e.start()
	e.eventually("a warm worker", func() bool { return len(e.readyWorkers(ep.ID)) == 1 })
	w := e.readyWorkers(ep.ID)[0]
	job := e.submit(ep.ID, `{"sleep_ms": 2000, "echo": "survived"}`)
	e.eventually("job running", func() bool { r, _ := e.q().Status(ep.ID, job, 0); return r.Status == store.InProgress })
	// A worker identity of an endpoint with workersMax 0, whose container
	// (made below) no Supervisor started.
	gpuEP := e.putEndpoint(tm.ID, func(x *store.Endpoint) { x.WorkersMax = 0 })
	reg, err := e.q().RegisterWorker(gpuEP.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	e.stop()

	// Leftovers a crash could leave: a container of a deleted endpoint, an
	// exited worker, and a running worker holding a GPU (by its label).
	prog := buildImage(t, testProg)
	ctx := context.Background()
	mk := func(labels map[string]string, run bool) string {
		labels[runtime.LabelKind] = runtime.KindWorker
		res, err := e.d.Create(ctx, docker.ContainerSpec{Image: prog, Cmd: []string{"ignore"}, Labels: labels, Instance: e.inst})
		if err != nil {
			t.Fatal(err)
		}
		if run {
			if err := e.d.Start(ctx, res.ID); err != nil {
				t.Fatal(err)
			}
		}
		return res.ID
	}
	orphan := mk(map[string]string{runtime.LabelEndpoint: "deletedendpoint", runtime.LabelWorker: "w-orphan"}, true)
	exited := mk(map[string]string{runtime.LabelEndpoint: ep.ID, runtime.LabelWorker: "w-exited"}, false)
	gpuW := mk(map[string]string{runtime.LabelEndpoint: gpuEP.ID, runtime.LabelWorker: reg.WorkerID,
		runtime.LabelVersion: "1", runtime.LabelGPUs: "GPU-aaaaaaaa-0000-4000-8000-000000000001"}, true)
	_ = gpuW

	s2 := e.start()
	alloc := e.gpus()
	// Start reconciles before it returns. (The drain below takes at least
	// DrainGrace: testprog ignores SIGTERM.)
	if g := alloc.Snapshot()[0]; g.Holder != reg.WorkerID {
		t.Fatalf("GPU holder %q after restart, want %s", g.Holder, reg.WorkerID)
	}
	// Adopted: same worker, same container, no new start.
	ws := s2.Workers(ep.ID)
	if len(ws) != 1 || ws[0].WorkerID != w.WorkerID || ws[0].ContainerID != w.ContainerID {
		t.Fatalf("workers after restart %+v, want the adopted %s", ws, w.WorkerID)
	}
	if out := jsonString(e.waitCompleted(ep.ID, job)); out != "survived" {
		t.Fatalf("output %q", out)
	}
	if h := e.q().Health(ep.ID); h.Jobs.Retried != 0 {
		t.Fatalf("retried %d", h.Jobs.Retried)
	}
	if st := s2.Status(ep.ID); st.Attempts != 0 || len(s2.Workers(ep.ID)) != 1 {
		t.Fatalf("status %+v, workers %+v: the adopted worker must be kept, not replaced", st, s2.Workers(ep.ID))
	}
	for _, id := range []string{orphan, exited} {
		if _, err := e.d.Inspect(ctx, id); !docker.IsNotFound(err) {
			t.Fatalf("orphan %s not removed: %v", id, err)
		}
	}
	// workersMax 0 on that endpoint: the adopted worker is drained and
	// its GPU released.
	e.eventually("GPU released", func() bool { return alloc.Snapshot()[0].Holder == "" })
	// Billing's records: the adopted worker still runs, the drained one
	// ran and ended.
	e.eventually("usage: the adopted worker open, the drained one closed", func() bool {
		open, closed := e.usage(store.UsageWorker)
		return open[w.WorkerID] == 1 && open[reg.WorkerID] == 0 && closed[reg.WorkerID] >= 1
	})
}

// buildImage builds a Go program into an image removed at the test's end.
func buildImage(t *testing.T, pkg string) string {
	t.Helper()
	return dockertest.BuildGoImage(t, pkg)
}

func readLines(t *testing.T, rc io.ReadCloser) []string {
	t.Helper()
	defer rc.Close()
	var out []string
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
