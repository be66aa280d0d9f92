package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/gpu"
	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/internal/proctest"
	"berth/runtime"
	"berth/runtime/fake"
	"berth/worker"
)

// Berth's whole composition on the fake backend, driven by a seeded random
// sequence of operations through the HTTP API — endpoints created, updated
// (GPUs, scale, new versions) and deleted, jobs that finish, fail or are
// held, workers that crash (also while Berth is down), backend calls that
// fail, restarts of Berth — holds its invariants at every quiet moment: no
// GPU held twice, the GPU holders exactly the live instances' labels,
// never more GPUs held than the host has, every live instance a worker
// Berth knows (once), no worker ended by Berth while it runs a job (unless
// its endpoint was deleted), and no accepted job lost. A failure prints the operations that led to
// it; more seeds (and steps) hunt further.
func TestInvariantsUnderRandomOperations(t *testing.T) {
	// Docker's behaviour, and a cluster's: no pause, a stop removes the
	// instance, a start is only accepted.
	cluster := fake.Config{NoPause: true, NoRestart: true, PendingStart: true}
	for _, c := range []struct {
		name string
		seed int64
		fc   fake.Config
	}{{"seed1", 1, fake.Config{}}, {"seed2", 2, fake.Config{}}, {"cluster3", 3, cluster}} {
		t.Run(c.name, func(t *testing.T) { runInvariants(t, c.seed, 20, c.fc) })
	}
}

// invDevs are the host's four GPUs.
var invDevs = func() []gpu.Device {
	var devs []gpu.Device
	for i := range 4 {
		devs = append(devs, gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-inv-%d", i), Name: "NVIDIA GeForce RTX 4090",
			TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564})
	}
	return devs
}()

// invHarness is one seeded run: the Berth, what the test did, and what the
// workers' programs saw.
type invHarness struct {
	t   *testing.T
	e   *apitest.Env
	rng *rand.Rand
	log []string // the operations so far, for the failure message

	mu         sync.Mutex
	procs      map[string]*invProc // by instance id
	eps        map[string]string   // live endpoint id -> its template id
	deleted    map[string]bool     // endpoints deleted
	release    map[string]chan struct{}
	releaseAll bool              // held jobs finish at once (the end)
	jobs       map[string]string // job id -> endpoint id
	cancelled  map[string]bool   // jobs the test cancelled
	violations []string          // invariant 3's, found by the event follower
}

// invProc is one run of a worker instance.
type invProc struct {
	id, worker, endpoint string
	crash                chan struct{} // closed: the program exits 3 at once
	dead                 chan struct{} // closed: it speaks no more (crashed or killed)
	crashed              bool
	inflight             map[string]bool // jobs in its handler
	deadOnce             sync.Once
}

func runInvariants(t *testing.T, seed int64, steps int, fc fake.Config) {
	h := &invHarness{t: t, rng: rand.New(rand.NewSource(seed)), procs: map[string]*invProc{}, eps: map[string]string{},
		deleted: map[string]bool{}, release: map[string]chan struct{}{}, jobs: map[string]string{}, cancelled: map[string]bool{}}
	fc.Devices = invDevs
	h.e = apitest.NewValidating(t, func(e *apitest.Env) {
		e.Fake = apptest.OnFakeAs(t, &e.Cfg, fc)
		for _, im := range []string{"inv-a", "inv-b"} {
			e.Fake.Image(im, h.program)
		}
		// A fixed port: workers keep reaching Berth across its restarts.
		e.Cfg.Addr = proctest.FreeAddr(t)
		e.Cfg.Runtime.TickInterval = 50 * time.Millisecond
		e.Cfg.Runtime.BackoffBase = 50 * time.Millisecond
		e.Cfg.Runtime.BackoffMax = 500 * time.Millisecond
		e.Cfg.Runtime.IdleStopGrace = 2 * time.Second
		// A worker that dies unseen (while Berth is down) gives its jobs
		// back within the end's wait.
		e.Cfg.HTTP.PingInterval, e.Cfg.Queue.WorkerTimeout = time.Second, 8*time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.follow(ctx)

	for i := range steps {
		h.step(i)
		// Now and then the next operation lands mid-change (a restart
		// while workers start, a deletion while one drains).
		if h.rng.Intn(3) > 0 {
			h.quiesceAndCheck(fmt.Sprintf("after step %d", i))
		}
	}
	h.finish()
}

func (h *invHarness) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s\noperations:\n  %s", fmt.Sprintf(format, args...), strings.Join(h.log, "\n  "))
}

func (h *invHarness) note(format string, args ...any) {
	h.log = append(h.log, fmt.Sprintf(format, args...))
}

// program is the workers' image: a real worker (package worker) whose
// platform calls fail once the instance is dead, so a crashed or killed
// run never reports as if alive.
func (h *invHarness) program(ctx context.Context, p fake.Process) int {
	pr := &invProc{id: p.ID, worker: p.Labels[runtime.LabelWorker], endpoint: p.Labels[runtime.LabelEndpoint],
		crash: make(chan struct{}), dead: make(chan struct{}), inflight: map[string]bool{}}
	h.mu.Lock()
	h.procs[p.ID] = pr
	h.mu.Unlock()
	client := &http.Client{Transport: deadTransport{dead: pr.dead, rt: http.DefaultTransport}}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- worker.Start(wctx, worker.Config{Env: p.Getenv, Logger: worker.NewLogger(p.Getenv, p.Out),
			HTTPClient: client, RetryBaseDelay: 50 * time.Millisecond, StopPollMinDelay: 100 * time.Millisecond,
			Handler: func(jctx context.Context, j *worker.Job) (any, error) { return h.handle(jctx, pr, j) }})
	}()
	select {
	case err := <-done:
		if err != nil {
			return 1
		}
		return 0
	case <-pr.crash:
		pr.deadOnce.Do(func() { close(pr.dead) })
		return 3
	}
}

type deadTransport struct {
	dead <-chan struct{}
	rt   http.RoundTripper
}

func (d deadTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case <-d.dead:
		return nil, errors.New("the process is dead")
	default:
	}
	return d.rt.RoundTrip(r)
}

// handle runs a job: "ok" finishes, "fail" fails, "hold" waits until the
// test releases its endpoint's held jobs (or cancels it, or the process
// dies).
func (h *invHarness) handle(ctx context.Context, pr *invProc, j *worker.Job) (any, error) {
	var in struct{ Kind string }
	_ = json.Unmarshal(j.Input, &in)
	h.mu.Lock()
	pr.inflight[j.ID] = true
	rel := h.releaseLocked(pr.endpoint)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(pr.inflight, j.ID)
		h.mu.Unlock()
	}()
	switch in.Kind {
	case "fail":
		return nil, errors.New("asked to fail")
	case "hold":
		select {
		case <-rel:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-pr.dead:
			return nil, errors.New("dead")
		}
	}
	return map[string]any{"ok": true}, nil
}

// releaseLocked is what ep's held jobs wait for now.
func (h *invHarness) releaseLocked(ep string) <-chan struct{} {
	if h.releaseAll || h.deleted[ep] {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	ch := h.release[ep]
	if ch == nil {
		ch = make(chan struct{})
		h.release[ep] = ch
	}
	return ch
}

// releaseHeld lets every job held on ep ("" every endpoint) finish.
func (h *invHarness) releaseHeld(ep string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, ch := range h.release {
		if ep == "" || id == ep {
			close(ch)
			delete(h.release, id)
		}
	}
}

// follow watches the backend's events: an instance that ends while its
// program runs a job the test neither cancelled nor lost by a crash or an
// endpoint's deletion breaks invariant 3.
func (h *invHarness) follow(ctx context.Context) {
	evs, _ := h.e.Fake.Events(ctx)
	go func() {
		for ev := range evs {
			if ev.Action != runtime.EventDie {
				continue
			}
			h.mu.Lock()
			pr := h.procs[ev.ID]
			if pr != nil && !pr.crashed && !h.deleted[pr.endpoint] {
				for j := range pr.inflight {
					if !h.cancelled[j] {
						h.violations = append(h.violations, fmt.Sprintf("worker %s (endpoint %s) ended with exit code %d while running job %s",
							pr.worker, pr.endpoint, ev.ExitCode, j))
					}
				}
			}
			h.mu.Unlock()
			if pr != nil {
				pr.deadOnce.Do(func() { close(pr.dead) })
			}
		}
	}()
}

// step applies one random operation.
func (h *invHarness) step(i int) {
	h.t.Helper()
	e := h.e
	eps := slices.Sorted(maps.Keys(h.eps))
	pick := func() string { return eps[h.rng.Intn(len(eps))] }
	op := h.rng.Intn(100)
	switch {
	case len(eps) == 0 || (op < 10 && len(eps) < 3):
		image := []string{"inv-a", "inv-b"}[h.rng.Intn(2)]
		tpl := e.NewTemplate(fmt.Sprintf("inv-%d", i), image, apitest.J{"isServerless": true})
		body := apitest.J{"gpuCount": 1 + h.rng.Intn(2), "workersMin": h.rng.Intn(2), "workersMax": 1 + h.rng.Intn(3),
			"idleTimeout": 1 + h.rng.Intn(3)}
		ep := e.NewEndpoint(tpl.ID, body)
		h.eps[ep.ID] = tpl.ID
		h.note("create endpoint %s %v image %s", ep.ID, body, image)
	case op < 20:
		ep := pick()
		body := apitest.J{}
		if h.rng.Intn(3) == 0 {
			body["gpuCount"] = 1 + h.rng.Intn(2)
		} else {
			lo := h.rng.Intn(2)
			body["workersMin"], body["workersMax"] = lo, lo+h.rng.Intn(4-lo)
		}
		h.updateEndpoint(ep, body)
	case op < 30:
		ep := pick()
		body := apitest.J{"env": map[string]string{"SEED_STEP": fmt.Sprint(i)}}
		if h.rng.Intn(2) == 0 {
			body = apitest.J{"imageName": []string{"inv-a", "inv-b"}[h.rng.Intn(2)]}
		}
		e.Must(200, "PATCH", "/v1/templates/"+h.eps[ep], body, nil)
		h.note("update template of %s %v", ep, body)
	case op < 35 && len(eps) > 1:
		ep := pick()
		h.mu.Lock()
		h.deleted[ep] = true
		h.mu.Unlock()
		h.releaseHeld(ep)
		e.Must(204, "DELETE", "/v1/endpoints/"+ep, nil, nil)
		delete(h.eps, ep)
		h.note("delete endpoint %s", ep)
	case op < 57:
		ep := pick()
		var kinds []string
		for range 1 + h.rng.Intn(4) {
			kind := []string{"ok", "ok", "fail", "hold", "hold"}[h.rng.Intn(5)]
			id := e.Run(ep, `{"kind":"`+kind+`"}`)
			h.mu.Lock()
			h.jobs[id] = ep
			h.mu.Unlock()
			kinds = append(kinds, kind+":"+id)
		}
		h.note("run on %s: %v", ep, kinds)
	case op < 64:
		h.releaseHeld("")
		h.note("release held jobs")
	case op < 76:
		h.crashOne()
	case op < 84:
		o := []fake.Op{fake.OpCreate, fake.OpStart, fake.OpStop, fake.OpRemove}[h.rng.Intn(4)]
		e.Fake.FailNext(o, errors.New("injected failure"))
		h.note("fail the next %s", o)
	case op < 92:
		h.mu.Lock()
		var open []string
		for id, ep := range h.jobs {
			if !h.deleted[ep] && !h.cancelled[id] {
				open = append(open, id)
			}
		}
		slices.Sort(open)
		var id string
		if len(open) > 0 {
			id = open[h.rng.Intn(len(open))]
			h.cancelled[id] = true
		}
		ep := h.jobs[id]
		h.mu.Unlock()
		if id != "" {
			code, out := e.Call("POST", "/v2/"+ep+"/cancel/"+id, nil)
			if code != 200 {
				h.fail("cancel %s: %d %s", id, code, out)
			}
			h.note("cancel job %s", id)
		}
	case op < 96:
		h.note("restart Berth")
		e.Restart()
		h.checkJobs("after the restart")
	default:
		// What happens while Berth is down is found by its next start.
		h.note("stop Berth")
		cfg := e.Berth.Config()
		e.Berth.Stop()
		h.crashOne()
		b := apptest.Start(h.t, cfg)
		e.Berth, e.App, e.API, e.DB, e.Q, e.Base = b, b.App, b.API(), b.Store(), b.Queue(), b.URL()
		h.note("start Berth")
		h.checkJobs("after the restart")
	}
}

// crashOne makes a random live worker's program exit 3 at once.
func (h *invHarness) crashOne() {
	h.mu.Lock()
	var live []*invProc
	for _, pr := range h.procs {
		select {
		case <-pr.dead:
		default:
			if !pr.crashed && !h.deleted[pr.endpoint] {
				live = append(live, pr)
			}
		}
	}
	sort.Slice(live, func(a, b int) bool { return live[a].worker < live[b].worker })
	var pr *invProc
	if len(live) > 0 {
		pr = live[h.rng.Intn(len(live))]
		pr.crashed = true
	}
	h.mu.Unlock()
	if pr != nil {
		close(pr.crash)
		h.note("crash worker %s of %s", pr.worker, pr.endpoint)
	}
}

func (h *invHarness) updateEndpoint(ep string, body apitest.J) {
	h.e.Must(200, "PATCH", "/v1/endpoints/"+ep, body, nil)
	h.note("update endpoint %s %v", ep, body)
}

// invSnap is one look at the system: the GPUs' holders (/v1/gpus), the
// backend's live instances, and the workers Berth lists.
type invSnap struct {
	holders map[string]string      // GPU uuid -> holder
	live    map[string]invInstance // instance id ->
	workers map[string]string      // worker id -> endpoint id
}

type invInstance struct {
	worker, endpoint string
	gpus             []string
}

func (h *invHarness) look() invSnap {
	h.t.Helper()
	s := invSnap{holders: map[string]string{}, live: map[string]invInstance{}, workers: map[string]string{}}
	var gpus []gpu.Status
	h.e.Must(200, "GET", "/v1/gpus", nil, &gpus)
	for _, g := range gpus {
		if g.Holder != "" {
			s.holders[g.UUID] = g.Holder
		}
	}
	list, err := h.e.Fake.List(context.Background())
	if err != nil {
		h.fail("list: %v", err)
	}
	for _, in := range list {
		if in.Running || in.Paused || in.Pending {
			s.live[in.ID] = invInstance{worker: in.Labels[runtime.LabelWorker], endpoint: in.Labels[runtime.LabelEndpoint], gpus: in.GPUs}
		}
	}
	var eps []struct {
		ID      string `json:"id"`
		Workers []struct {
			ID string `json:"id"`
		} `json:"workers"`
	}
	h.e.Must(200, "GET", "/v1/endpoints?includeWorkers=true", nil, &eps)
	for _, ep := range eps {
		for _, w := range ep.Workers {
			s.workers[w.ID] = ep.ID
		}
	}
	return s
}

// quiesceAndCheck waits until three looks a few supervisor passes apart
// agree, then holds that state to the invariants.
func (h *invHarness) quiesceAndCheck(when string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	prev, same := h.look(), 0
	for same < 3 {
		if time.Now().After(deadline) {
			h.fail("%s: no quiet state within 20 s; last: %+v", when, prev)
		}
		time.Sleep(120 * time.Millisecond) // polling an observable: about two passes
		cur := h.look()
		if reflect.DeepEqual(cur, prev) {
			same++
		} else {
			same = 0
		}
		prev = cur
	}
	h.check(when, prev)
}

func (h *invHarness) check(when string, s invSnap) {
	h.t.Helper()
	h.mu.Lock()
	v := slices.Clone(h.violations)
	h.mu.Unlock()
	if len(v) > 0 {
		h.fail("%s: invariant 3 (a busy worker is not ended by Berth): %s", when, strings.Join(v, "; "))
	}
	// (1) and (2): each GPU held by one live instance, exactly as /v1/gpus says.
	fromLabels := map[string]string{}
	byWorker := map[string]string{}
	held := 0
	for id, in := range s.live {
		for _, u := range in.gpus {
			if other, ok := fromLabels[u]; ok {
				h.fail("%s: invariant 1: GPU %s is given to workers %s and %s", when, u, other, in.worker)
			}
			fromLabels[u] = in.worker
			held++
		}
		// (4) every live instance a worker Berth lists, once.
		if other, ok := byWorker[in.worker]; ok {
			h.fail("%s: invariant 4: worker %s has two live instances, %s and %s", when, in.worker, other, id)
		}
		byWorker[in.worker] = id
		if ep, ok := s.workers[in.worker]; !ok || ep != in.endpoint {
			h.fail("%s: invariant 4: live instance %s of worker %s (endpoint %s) is not a worker Berth lists: %v",
				when, id, in.worker, in.endpoint, s.workers)
		}
	}
	if !reflect.DeepEqual(fromLabels, s.holders) {
		h.fail("%s: invariant 1: /v1/gpus holders %v, the live instances' GPUs %v", when, s.holders, fromLabels)
	}
	if held > len(invDevs) {
		h.fail("%s: invariant 2: %d GPUs held on a host of %d", when, held, len(invDevs))
	}
}

// checkJobs: every job accepted on an endpoint that still exists is known
// (invariant 5), and returns the ones not ended yet.
func (h *invHarness) checkJobs(when string) []string {
	h.t.Helper()
	h.mu.Lock()
	jobs := maps.Clone(h.jobs)
	deleted := maps.Clone(h.deleted)
	h.mu.Unlock()
	var open []string
	for _, id := range slices.Sorted(maps.Keys(jobs)) {
		ep := jobs[id]
		if deleted[ep] {
			continue
		}
		code, out := h.e.Call("GET", "/v2/"+ep+"/status/"+id, nil)
		if code != 200 {
			h.fail("%s: invariant 5: job %s of %s: status %d %s", when, id, ep, code, out)
		}
		var st struct{ Status string }
		_ = json.Unmarshal(out, &st)
		switch st.Status {
		case "COMPLETED", "FAILED", "CANCELLED":
		case "IN_QUEUE", "IN_PROGRESS":
			open = append(open, id+" "+st.Status)
		default:
			h.fail("%s: invariant 5: job %s of %s is %q", when, id, ep, st.Status)
		}
	}
	return open
}

// finish lets everything run: held jobs finish, every endpoint can run a
// worker; every job accepted ends.
func (h *invHarness) finish() {
	h.t.Helper()
	h.mu.Lock()
	h.releaseAll = true
	h.mu.Unlock()
	h.releaseHeld("")
	for _, ep := range slices.Sorted(maps.Keys(h.eps)) {
		h.updateEndpoint(ep, apitest.J{"gpuCount": 1, "workersMin": 0, "workersMax": 1})
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		open := h.checkJobs("at the end")
		if len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.fail("at the end: jobs never ended: %v", open)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.quiesceAndCheck("at the end")
	h.t.Logf("operations:\n  %s", strings.Join(h.log, "\n  "))
}
