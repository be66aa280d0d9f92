package runtime

import (
	"slices"
	"strings"
	"testing"
	"time"

	"berth/queue"
	"berth/store"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

var testLimits = observeLimits{initTimeout: 10 * time.Minute, stopIgnoredAfter: 10 * time.Second, workerBaseURL: "http://host.docker.internal:8080"}

func TestObserveWorker(t *testing.T) {
	seen := queue.WorkerLoad{WorkerID: "w", LastSeen: t0.Add(-time.Second)}
	busy := seen
	busy.Running = 2
	lost := seen
	lost.Lost = true
	for _, tc := range []struct {
		name  string
		w     workerSnap
		state wstate
		// running and idleSince after; first: first contact in this pass.
		running   int
		idleSince time.Time
		first     bool
		contacted bool
		fault     string // substring; "" for none
	}{
		{name: "starting is not looked at", w: workerSnap{state: wsStarting, load: busy, known: true}, state: wsStarting},
		{name: "cancelled is not looked at", w: workerSnap{state: wsCancelled, load: busy, known: true}, state: wsCancelled},
		{name: "no contact yet", w: workerSnap{state: wsInitializing, known: true, startedAt: t0.Add(-time.Minute)}, state: wsInitializing},
		{name: "first contact: idle from now", w: workerSnap{state: wsInitializing, load: seen, known: true},
			state: wsIdle, idleSince: t0, first: true, contacted: true},
		{name: "first contact with jobs", w: workerSnap{state: wsInitializing, load: busy, known: true},
			state: wsRunning, running: 2, first: true, contacted: true},
		{name: "adopted, seen before the restart", w: workerSnap{state: wsInitializing, contacted: true, load: seen, known: true},
			state: wsIdle, idleSince: t0, contacted: true},
		{name: "idle stays idle since then", w: workerSnap{state: wsIdle, contacted: true, idleSince: t0.Add(-time.Minute), load: seen, known: true},
			state: wsIdle, idleSince: t0.Add(-time.Minute), contacted: true},
		{name: "takes jobs", w: workerSnap{state: wsIdle, contacted: true, idleSince: t0.Add(-time.Minute), load: busy, known: true},
			state: wsRunning, running: 2, contacted: true},
		{name: "jobs done: idle from now", w: workerSnap{state: wsRunning, contacted: true, running: 1, load: seen, known: true},
			state: wsIdle, idleSince: t0, contacted: true},
		{name: "lost", w: workerSnap{state: wsIdle, contacted: true, idleSince: t0, load: lost, known: true},
			state: wsIdle, idleSince: t0, contacted: true, fault: "stopped contacting Berth"},
		{name: "forgotten by the queue", w: workerSnap{state: wsRunning, contacted: true, running: 1},
			state: wsIdle, idleSince: t0, contacted: true, fault: "stopped contacting Berth"},
		{name: "adopted while waiting for its node: the queue's sighting at the start is no contact",
			w:     workerSnap{state: wsInitializing, known: true, load: lost, launchedAt: t0.Add(-2 * time.Minute), waiting: WaitingUnschedulable},
			state: wsInitializing},
		{name: "adopted before it ran, now running: the start-up sighting, even lost, is no contact",
			w: workerSnap{state: wsInitializing, known: true, load: lost, launchedAt: t0.Add(-2 * time.Minute), startedAt: t0.Add(-time.Second),
				adoptSighting: lost.LastSeen},
			state: wsInitializing},
		{name: "adopted before it ran, then heard from",
			w: workerSnap{state: wsInitializing, known: true, load: seen, launchedAt: t0.Add(-2 * time.Minute), startedAt: t0.Add(-time.Second),
				adoptSighting: seen.LastSeen.Add(-time.Minute)},
			state: wsIdle, idleSince: t0, first: true, contacted: true},
		{name: "never contacted within the init timeout", w: workerSnap{state: wsInitializing, known: true, startedAt: t0.Add(-11 * time.Minute)},
			state: wsInitializing, fault: "did not contact Berth within 10m0s of starting; can the container reach http://host.docker.internal:8080?"},
		{name: "a stop just told", w: workerSnap{state: wsRunning, contacted: true, running: 1, load: busy, known: true, stops: []string{"j1"}},
			state: wsRunning, running: 2, contacted: true},
		{name: "a stop ignored", w: workerSnap{state: wsRunning, contacted: true, running: 1, load: busy, known: true, stops: []string{"j1"},
			stopsSeen: map[string]time.Time{"j1": t0.Add(-10 * time.Second)}},
			state: wsRunning, running: 2, contacted: true, fault: "ignored the stop of job j1 for 10s"},
		{name: "frozen: silent by design, never lost", w: workerSnap{state: wsFrozen, contacted: true, idleSince: t0.Add(-time.Hour)},
			state: wsFrozen, idleSince: t0.Add(-time.Hour), contacted: true},
		{name: "frozen with a job handed to its job-take", w: workerSnap{state: wsFrozen, contacted: true, load: busy, known: true},
			state: wsFrozen, running: 2, contacted: true},
		{name: "draining: its jobs are counted, no fault", w: workerSnap{state: wsDraining, contacted: true, running: 2, load: lost, known: true},
			state: wsDraining, idleSince: t0, contacted: true},
		{name: "draining worker's first contact", w: workerSnap{state: wsStopping, load: seen, known: true},
			state: wsStopping, idleSince: t0, first: true, contacted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.w.id = "w"
			o := observeWorker(tc.w, t0, testLimits)
			if o.state != tc.state || o.running != tc.running || !o.idleSince.Equal(tc.idleSince) || o.firstContact != tc.first || o.contacted != tc.contacted {
				t.Fatalf("got state %s running %d idleSince %v first %v contacted %v; want %s %d %v %v %v",
					o.state, o.running, o.idleSince, o.firstContact, o.contacted, tc.state, tc.running, tc.idleSince, tc.first, tc.contacted)
			}
			if (tc.fault == "") != (o.fault == "") || !strings.Contains(o.fault, tc.fault) {
				t.Fatalf("fault %q, want %q", o.fault, tc.fault)
			}
		})
	}
	// A stop first noticed is remembered from then; one no longer pending
	// is forgotten.
	o := observeWorker(workerSnap{id: "w", state: wsRunning, contacted: true, running: 1, load: busy, known: true,
		stops: []string{"j2"}, stopsSeen: map[string]time.Time{"j1": t0.Add(-time.Second)}}, t0, testLimits)
	if len(o.stopsSeen) != 1 || !o.stopsSeen["j2"].Equal(t0) {
		t.Fatalf("stopsSeen %v", o.stopsSeen)
	}
}

// pass is a planPass input for endpoint ep(mod) with the given workers.
func pass(mod func(*store.Endpoint), workers ...workerSnap) passInput {
	e := ep(mod)
	return passInput{now: t0, ep: e, specKey: "k", health: healthInput{specKey: "k"}, workers: workers,
		lim: testLimits, drainGrace: 20 * time.Second, canPause: true, runtime: "docker"}
}

// idleW is a current worker, idle for idle; busyW one running n jobs; both
// as the queue reports them.
func idleW(id string, idle time.Duration) workerSnap {
	return workerSnap{id: id, state: wsIdle, current: true, contacted: true, idleSince: t0.Add(-idle), known: true,
		load: queue.WorkerLoad{WorkerID: id, LastSeen: t0}}
}

func busyW(id string, n int) workerSnap {
	return workerSnap{id: id, state: wsRunning, current: true, contacted: true, running: n, known: true,
		load: queue.WorkerLoad{WorkerID: id, LastSeen: t0, Running: n}}
}

func startingW(id string) workerSnap {
	return workerSnap{id: id, state: wsStarting, current: true}
}

func oldW(w workerSnap) workerSnap { w.current = false; return w }

func TestPlanPass(t *testing.T) {
	queued := func(in passInput) passInput { in.stats = queue.QueueStats{InQueue: 1}; return in }
	gpus := func(fit int, evictable bool) func(passInput) passInput {
		return func(in passInput) passInput {
			in.gpu = gpuInput{need: true, fit: fit, short: `each worker wants 1 × "NVIDIA L4"; free: "NVIDIA L4" 0 of 1`, evictable: evictable}
			return in
		}
	}
	type drainWant struct {
		id        string
		kind      drainKind
		grace     time.Duration
		shortIdle bool
	}
	for _, tc := range []struct {
		name   string
		in     passInput
		mods   []func(passInput) passInput
		start  int
		drains []drainWant
		// throttled and a substring of throttle; evict; configErr and
		// warning substrings.
		throttled   int
		throttle    string
		evict       bool
		configErr   string
		warning     string
		resetHealth bool
		contacted   bool
	}{
		{name: "scale from zero", in: pass(nil), mods: []func(passInput) passInput{queued}, start: 1},
		{name: "template error: nothing starts", in: func() passInput { in := pass(nil); in.configErr = `template "t" has no imageName`; return in }(),
			mods: []func(passInput) passInput{queued}, configErr: "has no imageName"},
		{name: "unknown GPU type: nothing starts", in: pass(nil),
			mods: []func(passInput) passInput{queued, func(in passInput) passInput {
				in.gpu = gpuInput{need: true, fit: 0, typeErr: "gpu: no GPU of the requested types on this machine"}
				return in
			}}, configErr: "no GPU of the requested types"},
		{name: "no GPUs here: runs on CPU with a warning", in: pass(nil),
			mods: []func(passInput) passInput{queued, func(in passInput) passInput {
				in.gpu = gpuInput{warning: "no GPUs on this machine"}
				return in
			}}, start: 1, warning: "no GPUs on this machine"},
		{name: "volume not mounted, disk not enforced", in: func() passInput {
			in := pass(func(e *store.Endpoint) { e.NetworkVolumeID = "vol1" })
			in.noVolumeDir, in.diskWarn = true, "containerDiskInGb (5) is not enforced"
			return in
		}(), warning: "network volume vol1 is not mounted: Berth has no volume directory configured; containerDiskInGb (5) is not enforced"},
		{name: "back-off holds starts", in: func() passInput { in := pass(nil); in.health.nextStart = t0.Add(time.Second); return in }(),
			mods: []func(passInput) passInput{queued}},
		{name: "an exit being handled holds starts (its back-off is not known yet)", in: func() passInput {
			in := pass(nil)
			in.health.exiting = true
			return in
		}(), mods: []func(passInput) passInput{queued}},
		{name: "back-off over", in: func() passInput { in := pass(nil); in.health.nextStart = t0; return in }(),
			mods: []func(passInput) passInput{queued}, start: 1},
		{name: "a new spec clears the back-off", in: func() passInput {
			in := pass(nil)
			in.health = healthInput{specKey: "old", nextStart: t0.Add(time.Hour), unhealthy: true}
			return in
		}(), mods: []func(passInput) passInput{queued}, start: 1, resetHealth: true},
		{name: "unhealthy: one probe at a time", in: func() passInput {
			in := pass(func(e *store.Endpoint) { e.WorkersMin = 3 })
			in.health.unhealthy = true
			return in
		}(), start: 1},
		{name: "unhealthy: no probe while one starts", in: func() passInput {
			in := pass(func(e *store.Endpoint) { e.WorkersMin = 3 }, startingW("s"))
			in.health.unhealthy = true
			return in
		}()},
		{name: "a first contact clears unhealthy", in: func() passInput {
			w := workerSnap{id: "a", state: wsInitializing, current: true, known: true, load: queue.WorkerLoad{WorkerID: "a", LastSeen: t0}}
			in := pass(func(e *store.Endpoint) { e.WorkersMin = 3 }, w)
			in.health.unhealthy = true
			return in
		}(), start: 2, contacted: true},
		{name: "a lost worker is killed, a replacement started", in: func() passInput {
			w := busyW("a", 1)
			w.load.Lost = true
			return pass(func(e *store.Endpoint) { e.WorkersMin = 1 }, w)
		}(), start: 1, drains: []drainWant{{id: "a", kind: drainFault}}},
		{name: "idle drain gets the drain grace, shortened when idle", in: pass(nil, idleW("a", 6*time.Second)),
			drains: []drainWant{{id: "a", kind: drainScale, grace: 20 * time.Second, shortIdle: true}}},
		{name: "draining workers are not planned", in: pass(nil, workerSnap{id: "d", state: wsDraining, current: true, contacted: true, known: true}),
			mods: []func(passInput) passInput{queued}, start: 1},
		{name: "GPUs for one of two", in: pass(func(e *store.Endpoint) { e.ScalerType, e.ScalerValue = ScalerRequestCount, 1 }),
			mods:  []func(passInput) passInput{func(in passInput) passInput { in.stats = queue.QueueStats{InQueue: 2}; return in }, gpus(1, false)},
			start: 1, throttled: 1, throttle: `waiting for free GPUs: each worker wants 1 × "NVIDIA L4"`},
		{name: "no GPUs free: evict frozen workers", in: pass(nil), mods: []func(passInput) passInput{queued, gpus(0, true)},
			throttled: 1, throttle: throttledEvicting, evict: true},
		{name: "full machine, rolling update: make room", in: pass(nil, oldW(busyW("o1", 1)), oldW(idleW("o2", time.Second))),
			mods: []func(passInput) passInput{gpus(0, false)}, throttled: 2, throttle: "waiting for free GPUs",
			drains: []drainWant{{id: "o2", kind: drainRoll, grace: 20 * time.Second, shortIdle: true}}},
		{name: "full machine, rolling update under way: wait", in: pass(nil, oldW(busyW("o1", 1)),
			workerSnap{id: "o2", state: wsDraining, drainKind: drainRoll}),
			mods: []func(passInput) passInput{gpus(0, false)}, throttled: 1, throttle: "waiting for free GPUs"},
		{name: "GPUs enough", in: pass(nil), mods: []func(passInput) passInput{queued, gpus(3, false)}, start: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			for _, m := range tc.mods {
				in = m(in)
			}
			p := planPass(in)
			var got []drainWant
			for _, d := range p.drains {
				got = append(got, drainWant{id: d.id, kind: d.kind, grace: d.grace, shortIdle: d.shortIdle})
			}
			if p.start != tc.start || !slices.Equal(got, tc.drains) {
				t.Fatalf("start %d drains %+v; want %d %+v", p.start, got, tc.start, tc.drains)
			}
			if p.throttled != tc.throttled || !strings.Contains(p.throttle, tc.throttle) || (tc.throttle == "") != (p.throttle == "") || p.evict != tc.evict {
				t.Fatalf("throttled %d %q evict %v; want %d %q %v", p.throttled, p.throttle, p.evict, tc.throttled, tc.throttle, tc.evict)
			}
			if (tc.configErr == "") != (p.configErr == "") || !strings.Contains(p.configErr, tc.configErr) {
				t.Fatalf("configErr %q, want %q", p.configErr, tc.configErr)
			}
			if (tc.warning == "") != (p.warning == "") || !strings.Contains(p.warning, tc.warning) {
				t.Fatalf("warning %q, want %q", p.warning, tc.warning)
			}
			if p.resetHealth != tc.resetHealth || p.contacted != tc.contacted {
				t.Fatalf("resetHealth %v contacted %v; want %v %v", p.resetHealth, p.contacted, tc.resetHealth, tc.contacted)
			}
			if len(p.observed) != len(in.workers) {
				t.Fatalf("%d workers observed of %d", len(p.observed), len(in.workers))
			}
		})
	}
}

// TestPlanPassFlashBoot: planScale's freeze and thaw reach the plan, and a
// frozen worker handed a job is thawed rather than a worker started.
func TestPlanPassFlashBoot(t *testing.T) {
	fb := func(e *store.Endpoint) { e.Flashboot = true }
	p := planPass(pass(fb, idleW("a", 6*time.Second)))
	if !slices.Equal(p.freeze, []string{"a"}) || len(p.drains) != 0 {
		t.Fatalf("idle flashboot worker: freeze %v drains %v", p.freeze, p.drains)
	}
	frozen := workerSnap{id: "f", state: wsFrozen, current: true, contacted: true, frozenAt: t0.Add(-time.Minute), known: true,
		load: queue.WorkerLoad{WorkerID: "f", LastSeen: t0, Running: 1}}
	in := pass(fb, frozen)
	in.stats = queue.QueueStats{InProgress: 1}
	p = planPass(in)
	if !slices.Equal(p.thaw, []string{"f"}) || p.start != 0 || len(p.drains) != 0 {
		t.Fatalf("frozen worker with a job: thaw %v start %d drains %v", p.thaw, p.start, p.drains)
	}
}

func TestJudgeExit(t *testing.T) {
	idle := &drain{kind: drainScale, reason: "idle for 5s (idleTimeout 5s)"}
	kill := &drain{kind: drainFault, reason: "the worker ignored the stop of job j for 10s"}
	for _, tc := range []struct {
		name string
		f    exitFacts
		want exitVerdict
	}{
		{name: "drained", f: exitFacts{drain: idle, contacted: true, exitCode: 143},
			want: exitVerdict{reason: "worker stopped: idle for 5s (idleTimeout 5s)", expected: true}},
		{name: "drained before it contacted Berth", f: exitFacts{drain: idle},
			want: exitVerdict{reason: "worker stopped: idle for 5s (idleTimeout 5s)", expected: true}},
		{name: "killed for a fault", f: exitFacts{drain: kill, contacted: true, exitCode: 137},
			want: exitVerdict{reason: "worker stopped: the worker ignored the stop of job j for 10s", crashed: true, keep: true}},
		{name: "killed, never contacted: failed start", f: exitFacts{drain: &drain{kind: drainFault, reason: "did not contact Berth"}},
			want: exitVerdict{reason: "worker stopped: did not contact Berth", failedStart: true, keep: true, logTail: true}},
		{name: "crash", f: exitFacts{contacted: true, exitCode: 3},
			want: exitVerdict{reason: "worker container exited with code 3", crashed: true, keep: true}},
		{name: "OOM", f: exitFacts{contacted: true, oom: true, exitCode: 137},
			want: exitVerdict{reason: "worker container was killed for lack of memory (OOM, exit code 137)", crashed: true, keep: true}},
		{name: "clean exit after serving is no crash", f: exitFacts{contacted: true},
			want: exitVerdict{reason: "worker container exited"}},
		{name: "vanished after serving", f: exitFacts{contacted: true, gone: true},
			want: exitVerdict{reason: "worker container disappeared", crashed: true}},
		{name: "image that does not start", f: exitFacts{exitCode: 1},
			want: exitVerdict{reason: "worker container exited with code 1", failedStart: true, keep: true, logTail: true}},
		{name: "clean exit before any contact is a failed start", f: exitFacts{},
			want: exitVerdict{reason: "worker container exited", failedStart: true, keep: true, logTail: true}},
		{name: "vanished before any contact: nothing to keep or read", f: exitFacts{gone: true},
			want: exitVerdict{reason: "worker container disappeared", failedStart: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeExit(tc.f); got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestPlanPassNoPause: where the backend cannot pause (Kubernetes), an
// idle FlashBoot worker is drained like any other and the status says why.
func TestPlanPassNoPause(t *testing.T) {
	in := pass(func(e *store.Endpoint) { e.Flashboot = true }, idleW("a", 6*time.Second))
	in.canPause, in.runtime = false, "kubernetes"
	p := planPass(in)
	if len(p.freeze) != 0 || len(p.drains) != 1 || p.drains[0].id != "a" {
		t.Fatalf("freeze %v drains %+v; want a drained", p.freeze, p.drains)
	}
	if !strings.Contains(p.warning, "flashboot is not available on the kubernetes runtime") {
		t.Fatalf("warning %q", p.warning)
	}
}

func TestCPURequest(t *testing.T) {
	for _, tc := range []struct {
		ep         store.Endpoint
		vcpus, mem int
	}{
		{ep: store.Endpoint{ComputeType: "GPU", VCPUCount: 4}},
		{ep: store.Endpoint{ComputeType: "CPU", VCPUCount: 4}, vcpus: 4, mem: 8 << 10},
		{ep: store.Endpoint{ComputeType: "CPU", VCPUCount: 2, CPUFlavorIDs: []string{"cpu5m", "cpu3c"}}, vcpus: 2, mem: 16 << 10},
		{ep: store.Endpoint{ComputeType: "cpu", VCPUCount: 1, CPUFlavorIDs: []string{"cpu3g"}}, vcpus: 1, mem: 4 << 10},
		{ep: store.Endpoint{ComputeType: "CPU", VCPUCount: 8, InstanceIDs: []string{"cpu3c-2-4"}}, vcpus: 2, mem: 4 << 10},
		{ep: store.Endpoint{ComputeType: "CPU"}, vcpus: 2, mem: 4 << 10},
	} {
		if v, m := cpuRequest(tc.ep); v != tc.vcpus || m != tc.mem {
			t.Errorf("%+v: %d vCPUs %d MiB, want %d %d", tc.ep, v, m, tc.vcpus, tc.mem)
		}
	}
}

// TestPlanPassModels: an endpoint naming models starts no worker while
// they are not complete (the plan carries their progress for the status),
// starts as usual once they are, and cannot start where Berth has no
// model cache (a configuration error).
func TestPlanPassModels(t *testing.T) {
	models := func(e *store.Endpoint) { e.ModelReferences = []string{"https://huggingface.co/acme/tiny"} }
	for _, tc := range []struct {
		name              string
		wait              string
		ok                bool
		start             int
		models, configErr string
	}{
		{name: "downloading: nothing starts", wait: "downloading acme/tiny: 1 MB of 3 MB", ok: true, models: "downloading acme/tiny: 1 MB of 3 MB"},
		{name: "complete: a worker starts", ok: true, start: 1},
		{name: "no model cache: a configuration error", configErr: "cannot give workers cached models"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := pass(models)
			in.stats = queue.QueueStats{InQueue: 1}
			in.models, in.modelsOK = tc.wait, tc.ok
			p := planPass(in)
			if p.start != tc.start || p.models != tc.models || (tc.configErr == "") != (p.configErr == "") || !strings.Contains(p.configErr, tc.configErr) {
				t.Fatalf("start %d, models %q, configErr %q; want %d, %q, %q", p.start, p.models, p.configErr, tc.start, tc.models, tc.configErr)
			}
		})
	}
	// An endpoint naming no model is not held by a stale progress.
	in := pass(nil)
	in.stats = queue.QueueStats{InQueue: 1}
	in.models, in.modelsOK = "downloading acme/tiny: 1 MB of 3 MB", true
	if p := planPass(in); p.start != 1 || p.models != "" {
		t.Fatalf("no models: start %d, models %q", p.start, p.models)
	}
}
