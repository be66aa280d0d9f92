package runtime_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/jonboulle/clockwork"

	"berth/app"
	"berth/gpu"
	"berth/queue"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/store"
	"berth/worker"
)

// flashEnv is an env whose Berth runs on a fake clock (idle timeouts and
// frozen times pass on Advance) and whose Supervisor reads a settable
// MemAvailable.
func flashEnv(t testing.TB, opts ...envOpt) (*env, *clockwork.FakeClock, *memSource) {
	clock := clockwork.NewFakeClock()
	mem := new(memSource)
	mem.set(func() int64 { return 64 << 30 })
	e := newEnv(t, append([]envOpt{func(c *app.Config) {
		c.Clock = clock
		c.Runtime.MemAvailable = func() (int64, error) { return (*mem.fn.Load())(), nil }
		c.Runtime.FlashMinMemAvailable = 1 << 30
		c.Runtime.FlashMaxFrozen = 10 * time.Minute
		c.Runtime.IdleStopGrace = 2 * time.Second
	}}, opts...)...)
	return e, clock, mem
}

// memSource is the host's available memory as the test wants it.
type memSource struct{ fn atomic.Pointer[func() int64] }

func (m *memSource) set(f func() int64) { m.fn.Store(&f) }

// workerIn waits until the endpoint has exactly one worker in state (the
// autoscaler is nudged, as its ticker only moves with the fake clock).
func (e *env) workerIn(epID, state string) runtime.WorkerInfo {
	e.t.Helper()
	var w runtime.WorkerInfo
	e.eventually("a worker of "+epID+" "+state, func() bool {
		e.sv().Notify(epID)
		ws := e.sv().Workers(epID)
		if len(ws) == 1 && ws[0].State == state {
			w = ws[0]
			return true
		}
		return false
	})
	return w
}

// idleUntilFrozen moves the fake clock past the idle timeout (5 s) until
// the endpoint's one worker is frozen. One step is not always enough: a
// pass that sees the worker's last job still counted as running (a late
// heartbeat under load) starts its idle time again after the step, and the
// fake clock would not move again. Steps stop once it is frozen, so its
// frozen time (FlashMaxFrozen) is not advanced.
func (e *env) idleUntilFrozen(epID string, clock *clockwork.FakeClock) runtime.WorkerInfo {
	e.t.Helper()
	var w runtime.WorkerInfo
	e.eventually("a worker of "+epID+" frozen after its idle timeout", func() bool {
		ws := e.sv().Workers(epID)
		if len(ws) == 1 && ws[0].State == runtime.StateFrozen {
			w = ws[0]
			return true
		}
		if len(ws) == 1 && ws[0].State == runtime.StateIdle {
			clock.Advance(6 * time.Second)
		}
		e.sv().Notify(epID)
		return false
	})
	return w
}

func (e *env) paused(cid string) bool {
	e.t.Helper()
	info, err := e.d.Inspect(context.Background(), cid)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.Paused && info.Running
}

func (e *env) metrics() string {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.b.URL()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func (e *env) health(epID string) queue.Health {
	e.t.Helper()
	var h queue.Health
	e.call("GET", "/v2/"+epID+"/health", "", &h)
	return h
}

// TestFlashBoot: an idle worker of a flashboot endpoint is frozen (paused)
// after idleTimeout instead of stopped; /health and the endpoint's workers
// show it frozen; /runsync thaws it and the same worker runs the job; it
// is refrozen, survives a restart of Berth frozen, and is stopped after
// FlashMaxFrozen.
func TestFlashBoot(t *testing.T) {
	t.Parallel()
	e, clock, _ := flashEnv(t)
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.Flashboot, ep.IdleTimeout, ep.WorkersMax = true, 5, 1 })
	s := e.start()

	if out := jsonString(e.waitCompleted(ep.ID, e.run(ep.ID, `{"echo": "cold"}`))); out != "cold" {
		t.Fatalf("cold output %q", out)
	}
	w := e.workerIn(ep.ID, runtime.StateIdle)
	w2 := e.idleUntilFrozen(ep.ID, clock)
	if w2.WorkerID != w.WorkerID {
		t.Fatalf("frozen worker %+v, want %s", w2, w.WorkerID)
	}
	// "frozen" covers a pause still in flight; the container follows.
	e.eventually("the frozen worker's container is paused", func() bool { return e.paused(w.ContainerID) })
	e.eventually("/health shows the frozen worker", func() bool {
		h := e.health(ep.ID)
		return h.Workers.Frozen == 1 && h.Workers.Idle == 0 && h.Workers.Ready == 0
	})
	if st := s.Status(ep.ID); st.Workers.Frozen != 1 || st.Workers.Idle != 0 {
		t.Fatalf("status %+v", st)
	}
	if m := e.metrics(); !strings.Contains(m, `berth_workers{endpoint="`+ep.ID+`",state="frozen"} 1`) {
		t.Fatalf("no frozen worker in /metrics:\n%s", m)
	}

	// The next job thaws it; the same worker answers.
	var res struct {
		Status   string
		Output   string
		WorkerID string `json:"workerId"`
	}
	t0 := time.Now()
	e.call("POST", "/v2/"+ep.ID+"/runsync?wait=30000", `{"input": {"echo": "warm"}}`, &res)
	t.Logf("runsync on a frozen worker: %s", time.Since(t0))
	if res.Status != "COMPLETED" || res.Output != "warm" {
		t.Fatalf("runsync %+v", res)
	}
	if e.paused(w.ContainerID) {
		t.Fatal("still paused after the job")
	}
	if st := s.Status(ep.ID); st.Attempts != 1 {
		t.Fatalf("%d containers launched: the frozen one should have served", st.Attempts)
	}

	// Idle again: refrozen. A restart of Berth keeps it frozen.
	e.workerIn(ep.ID, runtime.StateIdle)
	e.idleUntilFrozen(ep.ID, clock)
	e.eventually("the refrozen worker's container is paused", func() bool { return e.paused(w.ContainerID) })
	s2 := e.restart()
	if ws := s2.Workers(ep.ID); len(ws) != 1 || ws[0].State != runtime.StateFrozen || ws[0].ContainerID != w.ContainerID {
		t.Fatalf("after restart %+v, want %s frozen", ws, w.ContainerID)
	}
	if !e.paused(w.ContainerID) {
		t.Fatal("the restart unpaused the worker")
	}
	if out := jsonString(e.waitCompleted(ep.ID, e.run(ep.ID, `{"echo": "after restart"}`))); out != "after restart" {
		t.Fatalf("output %q", out)
	}
	if st := s2.Status(ep.ID); st.Attempts != 0 {
		t.Fatalf("%d containers launched after the restart", st.Attempts)
	}

	// Frozen past FlashMaxFrozen: stopped, and the endpoint is at zero.
	e.workerIn(ep.ID, runtime.StateIdle)
	e.idleUntilFrozen(ep.ID, clock)
	clock.Advance(11 * time.Minute)
	e.eventually("the worker evicted after FlashMaxFrozen", func() bool {
		s2.Notify("")
		return len(e.containers(runtime.KindWorker)) == 0 && len(s2.Workers(ep.ID)) == 0
	})
}

// dgxGPUs is what go-nvml's DGX A100 mock shows: 8 A100-SXM4-40GB.
func dgxGPUs(t *testing.T) []gpu.Device {
	t.Helper()
	s := dgxa100.New()
	s.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	for _, d := range s.Devices {
		md := d.(*dgxa100.Device)
		md.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for i, c := range []byte(md.PciBusID) {
				p.BusId[i] = int8(c)
			}
			return p, nvml.SUCCESS
		}
	}
	devs, err := gpu.Discover(s)
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// gpuWorker makes the container of a GPU worker as a Supervisor would
// have left it, labelled with the GPU but without the device request
// (this daemon has no GPU runtime): the next start of Berth adopts it and
// restores its GPU from the label.
func (e *env) gpuWorker(ep store.Endpoint, tm store.Template, uuid string) string {
	e.t.Helper()
	reg, err := e.q().RegisterWorker(ep.ID, false)
	if err != nil {
		e.t.Fatal(err)
	}
	env := worker.PlatformEnv(e.workerBaseURL(), ep.ID, reg.WorkerID, reg.Key, 2000)
	var list []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		list = append(list, k+"="+env[k])
	}
	ctx := context.Background()
	res, err := e.d.Create(ctx, docker.ContainerSpec{
		Name: "berth-" + reg.WorkerID, Image: e.image, Env: list, Init: true, Instance: e.inst,
		ExtraHosts: []string{"host.docker.internal:host-gateway"},
		Labels: map[string]string{
			runtime.LabelKind: runtime.KindWorker, runtime.LabelEndpoint: ep.ID, runtime.LabelWorker: reg.WorkerID,
			runtime.LabelVersion: "1", runtime.LabelSpec: runtime.SpecKey(ep, tm), runtime.LabelGPUs: uuid,
		},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.d.Start(ctx, res.ID); err != nil {
		e.t.Fatal(err)
	}
	return reg.WorkerID
}

// TestFlashBootEviction: frozen GPU workers are evicted least recently
// frozen first — one while the host is short of memory, the next (and
// only it) for another endpoint's worker, which gets its GPU, the last for
// a pod that needs a GPU.
func TestFlashBootEviction(t *testing.T) {
	t.Parallel()
	devs := dgxGPUs(t)
	e, clock, mem := flashEnv(t, withGPUs(devs))
	const a100 = "NVIDIA A100-SXM4-40GB"
	e.start()
	tm := e.putTemplate(nil)
	// Three flashboot endpoints whose workers freeze one after the other
	// (idle timeouts 5, 20 and 40 s); the other five GPUs are taken.
	var eps []store.Endpoint
	var wids []string
	for i, idle := range []int{5, 20, 40} {
		ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) {
			ep.ComputeType, ep.GPUTypeIDs, ep.Flashboot, ep.IdleTimeout, ep.WorkersMax = "GPU", []string{a100}, true, idle, 1
		})
		eps = append(eps, ep)
		wids = append(wids, e.gpuWorker(ep, tm, devs[i].UUID))
	}
	// The next start adopts them.
	s := e.restart()
	alloc := e.gpus()
	var rest []string
	for _, d := range devs[3:] {
		rest = append(rest, d.UUID)
	}
	if err := alloc.Restore("filler", rest); err != nil {
		t.Fatal(err)
	}
	holder := func(uuid string) string {
		for _, g := range alloc.Snapshot() {
			if g.UUID == uuid {
				return g.Holder
			}
		}
		return ""
	}
	for i, ep := range eps {
		if w := e.workerIn(ep.ID, runtime.StateIdle); w.WorkerID != wids[i] || holder(devs[i].UUID) != wids[i] {
			t.Fatalf("adopted %+v, GPU holder %q", w, holder(devs[i].UUID))
		}
	}
	for i, step := range []time.Duration{6 * time.Second, 15 * time.Second, 20 * time.Second} {
		clock.Advance(step)
		e.workerIn(eps[i].ID, runtime.StateFrozen)
	}
	gone := func(i int) bool {
		s.Notify("")
		return len(s.Workers(eps[i].ID)) == 0 && len(e.running(eps[i].ID)) == 0 && holder(devs[i].UUID) != wids[i]
	}

	// Short of memory: the least recently frozen goes, the others stay.
	// (The memory comes back when the evicted worker has stopped.)
	mem.set(func() int64 {
		if holder(devs[0].UUID) == wids[0] {
			return 100 << 20
		}
		return 64 << 30
	})
	e.eventually("the first frozen worker evicted for memory", func() bool { return gone(0) })
	if holder(devs[0].UUID) != "" {
		t.Fatalf("GPU 0 still held by %q", holder(devs[0].UUID))
	}
	s.Notify("")
	for _, i := range []int{1, 2} {
		if w := e.workerIn(eps[i].ID, runtime.StateFrozen); w.WorkerID != wids[i] {
			t.Fatalf("worker %+v", w)
		}
	}
	if _, err := alloc.Allocate("filler2", nil, 1); err != nil {
		t.Fatal(err)
	}

	// Another endpoint's worker evicts the next one only — the last stays
	// frozen through the passes while the eviction is under way — and is
	// given its GPU (this daemon then cannot start a GPU container).
	other := e.putEndpoint(tm.ID, func(ep *store.Endpoint) {
		ep.ComputeType, ep.GPUTypeIDs, ep.WorkersMin, ep.WorkersMax = "GPU", []string{a100}, 1, 1
	})
	e.eventually("the other endpoint's worker made with the freed GPU", func() bool {
		s.Notify(other.ID)
		for _, c := range e.containers(runtime.KindWorker) {
			if c.Labels[runtime.LabelEndpoint] == other.ID && slices.Equal(c.GPUDeviceIDs, []string{devs[1].UUID}) {
				return true
			}
		}
		return false
	})
	if !gone(1) {
		t.Fatal("the second frozen worker is still there")
	}
	if w := e.workerIn(eps[2].ID, runtime.StateFrozen); w.WorkerID != wids[2] || holder(devs[2].UUID) != wids[2] {
		t.Fatalf("the last frozen worker was evicted too: %+v", w)
	}
	e.deleteEndpoint(other.ID)
	e.eventually("GPU 1 free again", func() bool { s.Notify(""); return holder(devs[1].UUID) == "" })
	if _, err := alloc.Allocate("filler3", nil, 1); err != nil {
		t.Fatal(err)
	}

	// A pod that needs a GPU evicts the last one (and then fails to start
	// on this daemon, but not for want of a GPU).
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	_, err := s.CreatePod(ctx, runtime.PodSpec{ID: queue.NewID(14), TemplateID: tm.ID, ComputeType: "GPU", GPUTypeIDs: []string{a100}})
	t.Logf("pod: %v", err)
	if errors.Is(err, gpu.ErrNoCapacity) {
		t.Fatalf("pod: %v: the frozen worker should have been evicted", err)
	}
	if !gone(2) {
		t.Fatal("the pod did not evict the frozen worker")
	}
}
