package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"berth/gpu"
	"berth/queue"
	"berth/store"
	"berth/worker"
)

// LabelSpec holds a hash of what a worker container was made from (image,
// command, env, GPUs, volume). A worker whose hash or version differs from
// its endpoint's is rolled.
const LabelSpec = "berth.spec"

// probeHolder is the allocator holder used to test for capacity before a
// worker identity exists; it never holds GPUs outside Supervisor.mu.
const probeHolder = "berth-capacity-probe"

// workerState is one worker container the Supervisor manages. Its
// lifecycle is state (lifecycle.go); the other fields are what it is made
// of and facts observed about it. Guarded by Supervisor.mu.
type workerState struct {
	id, endpointID string
	instanceID     string
	version        int
	specKey        string
	gpus           []string     // device ids
	devices        []gpu.Device // the devices, when Berth allocated them (not adopted)
	gpuType        string
	image          string // what the container runs (the template's image at its start)
	vcpus          int    // its CPU request (the endpoint's vcpuCount at its start)

	state wstate
	drain drain // why and how it is stopped, once state.stopping()

	contacted bool // has contacted Berth (the queue saw it)
	oomKilled bool // the backend reported an OOM kill (EventOOM)
	running   int  // jobs in progress, from the queue
	// launchedAt: its instance was created and started (or accepted);
	// startedAt: it runs since (usage is open from then), zero while it
	// starts or waits for a node.
	launchedAt time.Time
	startedAt  time.Time
	// waiting and waitReason: why its pending instance cannot run for now
	// (Instance.Waiting, from EventUpdate).
	waiting, waitReason string
	adoptSighting       time.Time // see workerSnap.adoptSighting
	idleSince           time.Time
	stopsSeen           map[string]time.Time // pending job-stop ids -> first noticed
	frozenAt            time.Time            // FlashBoot: when the freeze was decided
	gone                chan struct{}        // closed when forgotten (goneChanLocked)
}

// snap is the worker as planPass sees it, with the queue's view.
func (ws *workerState) snap(ep store.Endpoint, key string, load queue.WorkerLoad, known bool, stops []string) workerSnap {
	return workerSnap{
		id: ws.id, state: ws.state, current: ws.version == ep.Version && ws.specKey == key,
		contacted: ws.contacted, running: ws.running, idleSince: ws.idleSince, startedAt: ws.startedAt,
		frozenAt: ws.frozenAt, stopsSeen: ws.stopsSeen, drainKind: ws.drain.kind,
		launchedAt: ws.launchedAt, waiting: ws.waiting, waitReason: ws.waitReason, adoptSighting: ws.adoptSighting,
		load: load, known: known, stops: stops,
	}
}

// endpointState is what the Supervisor remembers about one endpoint.
type endpointState struct {
	id      string
	ep      store.Endpoint
	specKey string

	failures  int // failed starts in a row (reset when a worker contacts Berth)
	crashes   int // crashes, reset after CrashReset without one
	lastCrash time.Time
	nextStart time.Time // no start before this (back-off)
	lastError string
	unhealthy bool
	attempts  int // containers launched since Start

	configErr string // blocks every start until the config changes
	models    string // the endpoint's models are not complete: their progress
	throttled int    // starts held back by GPU capacity in the last pass
	throttle  string
	maxReason string
	warning   string
	pull      string
	diskWarn  string // containerDiskInGb not enforced
	want      int
	kept      string // last failed container, kept for its logs
}

func (s *Supervisor) endpointLocked(id string) *endpointState {
	es := s.eps[id]
	if es == nil {
		es = &endpointState{id: id}
		s.eps[id] = es
	}
	return es
}

// scaleEndpoint is one autoscaler pass over an endpoint, and the executor
// of its plan: it reads the snapshot planPass decides on, applies the plan
// to the Supervisor's records under s.mu (so a pass is atomic), then does
// what the plan asks of the backend — thaws, freezes, stops, starts and
// FlashBoot evictions.
func (s *Supervisor) scaleEndpoint(ep store.Endpoint) {
	tmpl, terr := s.cfg.Template(ep.TemplateID)
	in := passInput{
		now: s.clock.Now(), ep: ep, specKey: specKey(ep, tmpl), configErr: templateError(ep, tmpl, terr),
		models: s.modelsWait(ep), modelsOK: s.cfg.Models != nil && s.caps.Models, noVolumeDir: !s.caps.NetworkVolumes, canPause: s.caps.Pause, runtime: s.b.Name(), place: s.caps.Place, stats: s.q.Stats(ep.ID), drainGrace: s.drainGrace(ep),
		lim: observeLimits{initTimeout: s.cfg.InitTimeout, stopIgnoredAfter: s.cfg.StopIgnoredAfter, workerBaseURL: s.cfg.WorkerBaseURL},
	}
	qv := s.queueView(ep.ID)
	s.mu.Lock()
	x := s.planLocked(&in, qv)
	s.mu.Unlock()
	s.execute(ep, tmpl, in, x)
}

// queueFacts is the queue's view of an endpoint's workers.
type queueFacts struct {
	loads map[string]queue.WorkerLoad
	stops map[string][]string // pending job-stops of the live workers
}

// queueView reads the queue's view of an endpoint's workers, without s.mu
// (the balancer's view of a load-balancing endpoint reads the store).
func (s *Supervisor) queueView(endpointID string) queueFacts {
	qf := queueFacts{loads: map[string]queue.WorkerLoad{}, stops: map[string][]string{}}
	for _, l := range s.q.Workers(endpointID) {
		qf.loads[l.WorkerID] = l
	}
	s.mu.Lock()
	var ids []string
	for _, ws := range s.workers {
		if ws.endpointID == endpointID && ws.state.live() && ws.state != wsStarting {
			ids = append(ids, ws.id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		if p := s.q.PendingStops(id); len(p) > 0 {
			qf.stops[id] = p
		}
	}
	return qf
}

// passExec is what a pass leaves to do after s.mu is released.
type passExec struct {
	es                 *endpointState
	plan               passPlan
	thaw, freeze, stop []*workerState
	gone               []<-chan struct{} // evicted for this endpoint's GPUs
}

// planLocked completes in with the Supervisor's records, plans the pass
// and applies the plan to the records.
func (s *Supervisor) planLocked(in *passInput, qv queueFacts) passExec {
	ep := in.ep
	exiting := false
	for _, ws := range s.workers {
		switch {
		case ws.endpointID != ep.ID:
		case ws.state == wsExited:
			exiting = true // containerExited has not forgotten it yet
		default:
			l, known := qv.loads[ws.id]
			in.workers = append(in.workers, ws.snap(ep, in.specKey, l, known, qv.stops[ws.id]))
		}
	}
	es := s.endpointLocked(ep.ID)
	es.ep = ep
	in.diskWarn = es.diskWarn
	in.health = healthInput{specKey: es.specKey, nextStart: es.nextStart, unhealthy: es.unhealthy, exiting: exiting}
	var victims, pending []*workerState
	in.gpu, victims, pending = s.gpuInputLocked(ep)

	plan := planPass(*in)

	if plan.resetHealth {
		es.failures, es.crashes, es.unhealthy = 0, 0, false
		es.nextStart, es.lastError = time.Time{}, ""
	}
	es.specKey = in.specKey
	es.configErr, es.warning, es.models = plan.configErr, plan.warning, plan.models
	es.want, es.maxReason = plan.want, plan.maxReason
	for _, o := range plan.observed {
		ws := s.workers[o.id]
		ws.contacted, ws.running, ws.idleSince, ws.stopsSeen = o.contacted, o.running, o.idleSince, o.stopsSeen
		if o.state != ws.state {
			s.setStateLocked(ws, o.state, "the queue's view of the worker")
		}
	}
	if plan.contacted {
		es.failures, es.unhealthy = 0, false
	}
	for _, d := range plan.drains {
		s.drainLocked(s.workers[d.id], d.drain)
	}
	x := passExec{es: es, plan: plan}
	if plan.evict {
		for _, ws := range victims {
			s.evictLocked(ws, "a worker of endpoint "+ep.ID+" needs its GPUs")
			x.stop = append(x.stop, ws)
		}
		for _, ws := range append(victims, pending...) {
			x.gone = append(x.gone, s.goneChanLocked(ws))
		}
	}
	for _, id := range plan.thaw {
		x.thaw = append(x.thaw, s.workers[id])
	}
	for _, id := range plan.freeze {
		x.freeze = append(x.freeze, s.workers[id])
	}
	for _, ws := range s.workers {
		// New drains and kills, and drains whose earlier stop failed.
		if ws.endpointID == ep.ID && ws.state == wsDraining {
			x.stop = append(x.stop, ws)
		}
	}
	return x
}

// execute does what a pass's plan asks of the backend.
func (s *Supervisor) execute(ep store.Endpoint, tmpl store.Template, in passInput, x passExec) {
	for _, ws := range x.thaw {
		s.thawAsync(ws)
	}
	for _, ws := range x.freeze {
		s.freezeAsync(ws)
	}
	for _, ws := range x.stop {
		s.stopAsync(ws)
	}
	if x.plan.evict {
		s.notifyWhenGone(ep.ID, x.gone)
	}
	throttled, throttle := x.plan.throttled, x.plan.throttle
	for i := 0; i < x.plan.start; i++ {
		err := s.startOne(ep, tmpl, in.specKey, in.gpu.need)
		if err == nil {
			continue
		}
		switch {
		case errors.Is(err, gpu.ErrNoCapacity):
			// GPUs taken since the plan (a pod): the next pass plans again.
			throttled, throttle = throttled+x.plan.start-i, "waiting for free GPUs: "+err.Error()
		case errors.Is(err, gpu.ErrUnknownType):
			s.mu.Lock()
			x.es.configErr = err.Error()
			s.mu.Unlock()
		default:
			s.log.Error("start worker", "endpoint", ep.ID, "err", err)
		}
		break
	}
	s.mu.Lock()
	x.es.throttled, x.es.throttle = throttled, throttle
	s.mu.Unlock()
}

// templateError is why an endpoint's template cannot make workers, "" when
// it can.
func templateError(ep store.Endpoint, tmpl store.Template, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("template %q: %v", ep.TemplateID, err)
	case tmpl.ImageName == "":
		return fmt.Sprintf("template %q has no imageName", ep.TemplateID)
	}
	return ""
}

// gpuInputLocked is what the GPUs allow ep's new workers now, and, when
// they fall short, the frozen workers whose eviction would make room
// (victims) and the evictions already under way that will (pending).
func (s *Supervisor) gpuInputLocked(ep store.Endpoint) (in gpuInput, victims, pending []*workerState) {
	in.need, in.warning = s.gpuChoice(ep)
	if !in.need {
		return in, nil, nil
	}
	in.typeErr = s.gpuTypeError(ep)
	fit, desc := s.cfg.GPUs.Fit(ep.GPUTypeIDs, max(ep.GPUCount, 1))
	in.fit, in.short = fit, "each worker wants "+desc
	if fit < max(ep.WorkersMax, 0) {
		victims, pending, in.evictable = s.gpuEvictionLocked(ep.GPUTypeIDs, max(ep.GPUCount, 1))
	}
	return in, victims, pending
}

// notifyWhenGone looks at an endpoint again once the workers evicted for
// its GPUs are gone.
func (s *Supervisor) notifyWhenGone(endpointID string, gone []<-chan struct{}) {
	go func() {
		for _, g := range gone {
			select {
			case <-g:
			case <-s.ctx.Done():
				return
			}
		}
		s.Notify(endpointID)
	}()
}

// drainGrace is how long a drained worker may finish its jobs.
func (s *Supervisor) drainGrace(ep store.Endpoint) time.Duration {
	if s.cfg.DrainGrace > 0 {
		return s.cfg.DrainGrace
	}
	g := time.Duration(ep.ExecutionTimeoutMs) * time.Millisecond
	if g <= 0 {
		g = queue.DefaultExecTimeout
	}
	return min(max(g, 10*time.Second), s.cfg.MaxDrainGrace)
}

// drainFor is an ordinary drain of a worker of ep: the endpoint's drain
// grace, shortened when the worker has no job to finish (a container that
// ignores SIGTERM should not hold its GPUs for the whole execution
// timeout).
func (s *Supervisor) drainFor(ep store.Endpoint, kind drainKind, reason string) drain {
	return drain{kind: kind, reason: reason, grace: s.drainGrace(ep), shortIdle: true}
}

// gpuChoice says whether ep's workers get GPUs, and the warning when a GPU
// endpoint runs without.
func (s *Supervisor) gpuChoice(ep store.Endpoint) (bool, string) {
	if strings.EqualFold(ep.ComputeType, "CPU") {
		return false, ""
	}
	if s.cfg.GPUs == nil || len(s.cfg.GPUs.Types()) == 0 {
		return false, "no GPUs on this machine: the GPU endpoint's workers run without a GPU"
	}
	return true, ""
}

// gpuTypeError reports an endpoint whose GPUs this machine can never give:
// none of its types, or fewer GPUs of every type than gpuCount.
func (s *Supervisor) gpuTypeError(ep store.Endpoint) string {
	types := s.cfg.GPUs.Types()
	want := s.cfg.GPUs.Resolve(ep.GPUTypeIDs)
	if len(want) == 0 {
		return fmt.Sprintf("%v: asked for %q; this machine has %q", gpu.ErrUnknownType, ep.GPUTypeIDs, types)
	}
	count := max(ep.GPUCount, 1)
	for _, t := range want {
		n := 0
		for _, d := range s.cfg.GPUs.Snapshot() {
			if d.TypeID == t {
				n++
			}
		}
		if n >= count {
			return ""
		}
	}
	return fmt.Sprintf("gpuCount %d: this machine has fewer GPUs of each requested type (%q)", count, want)
}

// startOne registers a worker, gives it GPUs and launches its container
// in the background. It fails with gpu.ErrNoCapacity or gpu.ErrUnknownType
// when the GPUs do not allow it.
func (s *Supervisor) startOne(ep store.Endpoint, tmpl store.Template, key string, needGPU bool) error {
	count := max(ep.GPUCount, 1)
	if needGPU {
		// Test first, so a throttled endpoint does not register and forget
		// a worker identity on every pass.
		s.mu.Lock()
		_, err := s.cfg.GPUs.Allocate(probeHolder, ep.GPUTypeIDs, count)
		s.cfg.GPUs.Release(probeHolder)
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	reg, err := s.q.RegisterWorker(ep.ID, false)
	if err != nil {
		return fmt.Errorf("register worker: %w", err)
	}
	ws := &workerState{id: reg.WorkerID, endpointID: ep.ID, version: ep.Version, specKey: key, state: wsStarting,
		image: tmpl.ImageName, vcpus: ep.VCPUCount}
	s.mu.Lock()
	if needGPU {
		devs, err := s.cfg.GPUs.Allocate(reg.WorkerID, ep.GPUTypeIDs, count)
		if err != nil {
			s.mu.Unlock()
			s.q.ForgetWorker(reg.WorkerID)
			return err
		}
		for _, d := range devs {
			ws.gpus = append(ws.gpus, d.UUID)
		}
		ws.devices, ws.gpuType = devs, devs[0].TypeID
	}
	if s.ctx.Err() != nil {
		s.releaseGPUsLocked(ws)
		s.mu.Unlock()
		s.q.ForgetWorker(reg.WorkerID)
		return s.ctx.Err()
	}
	s.workers[ws.id] = ws
	es := s.endpointLocked(ep.ID)
	es.attempts++
	s.wg.Add(1)
	s.mu.Unlock()
	s.scaled(ws.endpointID, "start")
	s.wlog(ws).Info("starting worker", "version", ep.Version, "image", tmpl.ImageName, "gpus", ws.gpus)
	go s.launch(ws, ep, tmpl, reg.Key)
	return nil
}

func (s *Supervisor) releaseGPUsLocked(ws *workerState) {
	if s.cfg.GPUs != nil && len(ws.gpus) > 0 {
		s.cfg.GPUs.Release(ws.id)
	}
}

// launch creates the worker's instance (pulling its image where the
// backend pulls) and starts it.
func (s *Supervisor) launch(ws *workerState, ep store.Endpoint, tmpl store.Template, apiKey string) {
	defer s.wg.Done()
	ctx := s.ctx
	var auth *RegistryAuth
	if id := tmpl.ContainerRegistryAuthID; id != "" && s.cfg.Credentials != nil {
		a, err := s.cfg.Credentials(id)
		if err != nil {
			s.launchFailed(ws, fmt.Errorf("registry credentials %q: %w", id, err), "")
			return
		}
		auth = a
	}
	res, err := s.b.Create(ctx, s.workerSpec(ws, ep, tmpl, apiKey, auth), func(msg string) {
		s.mu.Lock()
		if es := s.eps[ep.ID]; es != nil {
			es.pull = pullMessage(tmpl.ImageName, msg)
		}
		s.mu.Unlock()
	})
	s.mu.Lock()
	if es := s.eps[ep.ID]; es != nil {
		es.pull = ""
	}
	s.mu.Unlock()
	if err != nil {
		s.launchFailed(ws, err, "")
		return
	}
	s.mu.Lock()
	ws.instanceID = res.ID
	s.byInstance[res.ID] = ws
	cancelled := ws.state == wsCancelled
	if es := s.eps[ep.ID]; es != nil {
		es.diskWarn = res.Warning
	}
	s.mu.Unlock()
	if cancelled {
		s.launchFailed(ws, nil, res.ID)
		return
	}
	runs, err := s.b.Start(ctx, res.ID)
	if err != nil {
		// Keep the instance (not started) so its config can be inspected.
		s.launchFailed(ws, err, res.ID)
		return
	}
	now := s.clock.Now()
	s.mu.Lock()
	cancelled = false
	switch ws.state {
	case wsStarting:
		s.setStateLocked(ws, wsInitializing, "container started")
	case wsCancelled:
		// Drained while starting: it runs now, so it is stopped like any
		// drained worker (and its usage recorded).
		s.setStateLocked(ws, wsDraining, "container started after it was drained")
		cancelled = true
	default: // its exit was handled meanwhile
		s.mu.Unlock()
		return
	}
	ws.launchedAt = now
	s.mu.Unlock()
	if runs {
		s.workerRuns(ws, now)
	} else if in, err := s.b.Inspect(ctx, res.ID); err == nil && in.Running {
		s.workerRuns(ws, now) // it ran before its start event could find it launched
	} else if err == nil && in.Waiting != "" {
		// Why it waits (a Pod unschedulable, its claim unbound) may have
		// been told before byInstance knew it, and is told only when it
		// changes: taken from the instance.
		s.mu.Lock()
		if ws.waiting == "" && ws.state == wsInitializing {
			ws.waiting, ws.waitReason = in.Waiting, in.Error
		}
		s.mu.Unlock()
		s.Notify(ep.ID)
	}
	if cancelled {
		s.stopAsync(ws)
	}
	s.Notify(ep.ID)
}

// workerRuns opens a worker's usage: its instance runs since t. Once per
// worker (the start event and launch may both report it), and only once
// launch is done with it.
func (s *Supervisor) workerRuns(ws *workerState, t time.Time) {
	s.mu.Lock()
	open := ws.startedAt.IsZero() && !ws.launchedAt.IsZero() && ws.state != wsExited
	if open {
		ws.startedAt = t
	}
	s.mu.Unlock()
	if open && s.cfg.OnRun != nil {
		s.cfg.OnRun(KindWorker, ws.id, ws.endpointID, ws.gpuType, len(ws.gpus), t, time.Time{})
	}
}

// launchFailed cleans up after a worker that could not start. err nil
// means the start was called off (the worker was drained while starting).
func (s *Supervisor) launchFailed(ws *workerState, err error, instanceID string) {
	cancelled := err == nil || s.ctx.Err() != nil
	if !cancelled {
		s.wlog(ws).Warn("worker failed to start", "err", err)
	}
	s.q.ForgetWorker(ws.id)
	now := s.clock.Now()
	s.mu.Lock()
	if ws.state == wsExited {
		// An exit report handled it (its container was removed by hand
		// between create and start).
		cancelled = true
	} else {
		why := "launch called off"
		if err != nil {
			why = "launch failed"
		}
		s.setStateLocked(ws, wsExited, why)
	}
	s.releaseGPUsLocked(ws)
	s.forgetLocked(ws)
	if instanceID != "" {
		delete(s.byInstance, instanceID)
	}
	var drop string
	if es := s.eps[ws.endpointID]; es != nil && !cancelled {
		s.noteFailureLocked(es, err.Error(), errors.Is(err, ErrNoGPURuntime), now)
		if instanceID != "" {
			drop, es.kept = es.kept, instanceID
			s.kept[instanceID] = es.id
			delete(s.kept, drop)
			instanceID = ""
		}
	}
	s.mu.Unlock()
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 30*time.Second)
	defer cancel()
	for _, id := range []string{drop, instanceID} {
		if id != "" {
			if err := s.b.Remove(rmCtx, id); err != nil {
				s.log.Warn("remove container", "container", shortID(id), "err", err)
			}
		}
	}
	s.Notify(ws.endpointID)
}

func (s *Supervisor) noteFailureLocked(es *endpointState, reason string, noGPURuntime bool, now time.Time) {
	es.failures++
	es.lastError = reason
	delay := s.backoff(es.failures)
	if noGPURuntime {
		// Retrying soon cannot help: the backend's error (reason) says what
		// the operator must install.
		delay = s.cfg.BackoffMax
		es.unhealthy = true
	}
	if es.failures >= s.cfg.MaxStartFailures {
		es.unhealthy = true
	}
	es.nextStart = now.Add(delay)
	s.log.Warn("worker start failed", "endpoint", es.id, "failures", es.failures, "retryIn", delay, "reason", es.lastError)
}

func (s *Supervisor) noteCrashLocked(es *endpointState, reason string, now time.Time) {
	if now.Sub(es.lastCrash) > s.cfg.CrashReset {
		es.crashes = 0
	}
	es.crashes++
	es.lastCrash = now
	es.lastError = reason
	if next := now.Add(s.backoff(es.crashes)); next.After(es.nextStart) {
		es.nextStart = next
	}
}

// stopAsync stops a Draining worker's container on a goroutine: SIGTERM,
// then SIGKILL after its drain's grace. Workers in any other state are
// left alone (one still starting is stopped by its launch; one Stopping
// already has its stop).
func (s *Supervisor) stopAsync(ws *workerState) {
	s.mu.Lock()
	cid := ws.instanceID
	if ws.state != wsDraining || cid == "" {
		s.mu.Unlock()
		return
	}
	grace := ws.drain.grace
	if ws.drain.shortIdle && ws.running == 0 {
		grace = min(grace, s.cfg.IdleStopGrace)
	}
	ws.drain.grace, ws.drain.shortIdle = grace, false // a retry keeps this grace
	s.setStateLocked(ws, wsStopping, "stop with a grace of "+grace.String())
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		err := s.b.Stop(s.ctx, cid, grace)
		if err != nil && s.ctx.Err() != nil {
			return // shutting down: the next Start sees how it ended
		}
		if err != nil && !IsNotFound(err) {
			s.wlog(ws).Warn("stop worker container", "err", err)
		}
		s.containerExited(ws)
		s.mu.Lock()
		if ws.state == wsStopping {
			s.setStateLocked(ws, wsDraining, "still running after the stop: the next pass tries again")
		}
		s.mu.Unlock()
	}()
}

// containerExited handles the end of a worker's container: its jobs go back
// to the queue (or fail per policy), its GPUs are freed, its identity is
// forgotten, and a crash or failed start counts towards back-off. It is
// safe to call more than once.
func (s *Supervisor) containerExited(ws *workerState) {
	ctx := s.ctx
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	if ws.state == wsExited || ws.instanceID == "" {
		s.mu.Unlock()
		return
	}
	cid := ws.instanceID
	s.mu.Unlock()

	info, err := s.b.Inspect(ctx, cid)
	switch {
	case err == nil && info.Alive():
		return // a stale report: still running (or on its way)
	case err != nil && !IsNotFound(err):
		if ctx.Err() != nil {
			return
		}
		s.wlog(ws).Warn("inspect exited worker", "err", err)
	}
	seen := false
	for _, l := range s.q.Workers(ws.endpointID) {
		if l.WorkerID == ws.id && !l.LastSeen.IsZero() {
			seen = true
		}
	}
	s.mu.Lock()
	if ws.state == wsExited {
		s.mu.Unlock()
		return // another report of the same exit handled it meanwhile
	}
	facts := exitFacts{contacted: seen || ws.contacted, oom: ws.oomKilled || info.OOMKilled, exitCode: info.ExitCode, gone: err != nil}
	if ws.state.stopping() {
		d := ws.drain
		facts.drain = &d
	}
	v := judgeExit(facts)
	s.setStateLocked(ws, wsExited, "container exited")
	s.mu.Unlock()

	reason := v.reason
	if v.logTail {
		if tail := s.logTail(ctx, cid, 5); tail != "" {
			reason += "; last output: " + tail
		}
	}
	if v.expected {
		s.wlog(ws).Info("worker stopped", "reason", facts.drain.reason)
	} else {
		s.wlog(ws).Warn("worker exited", "reason", reason)
	}
	s.q.WorkerGone(ws.id, reason)
	s.q.ForgetWorker(ws.id)

	now := s.clock.Now()
	remove := cid
	s.mu.Lock()
	s.releaseGPUsLocked(ws)
	s.forgetLocked(ws)
	delete(s.byInstance, cid)
	runStarted := !ws.startedAt.IsZero()
	var drop string
	if es := s.eps[ws.endpointID]; es != nil {
		switch {
		case v.failedStart:
			s.noteFailureLocked(es, reason, false, now)
		case v.crashed:
			s.noteCrashLocked(es, reason, now)
		}
		if v.keep {
			drop, es.kept = es.kept, cid
			delete(s.kept, drop)
			s.kept[cid] = es.id
			remove = ""
		}
	}
	s.mu.Unlock()
	for _, id := range []string{drop, remove} {
		if id != "" {
			if err := s.b.Remove(ctx, id); err != nil {
				s.log.Warn("remove worker container", "container", shortID(id), "err", err)
			}
		}
	}
	if runStarted && s.cfg.OnRun != nil {
		end := info.FinishedAt
		if end.IsZero() {
			end = now
		}
		start := info.StartedAt
		if start.IsZero() {
			start = end
		}
		s.cfg.OnRun(KindWorker, ws.id, ws.endpointID, ws.gpuType, len(ws.gpus), start, end)
	}
	s.Notify(ws.endpointID)
}

// logTail returns a container's last lines, joined, for error reports.
func (s *Supervisor) logTail(ctx context.Context, id string, n int) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rc, err := s.b.Logs(ctx, id, false, n)
	if err != nil {
		return ""
	}
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for b.Len() < 4096 {
		k, err := rc.Read(buf)
		b.Write(buf[:k])
		if err != nil {
			break
		}
	}
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if ll, ok := ParseLogLine([]byte(l)); ok {
				l = ll.Message
			}
			lines = append(lines, l)
		}
	}
	out := strings.Join(lines, " | ")
	if len(out) > 500 {
		out = out[len(out)-500:]
	}
	return out
}

// dropDeleted drains the workers of endpoints that no longer exist (of
// those in only, when not nil: a deletion's own notification drains its
// workers at once).
func (s *Supervisor) dropDeleted(present, only map[string]bool) {
	var drains []*workerState
	var kept []string
	s.mu.Lock()
	for id, es := range s.eps {
		if present[id] || (only != nil && !only[id]) {
			continue
		}
		busy := false
		for _, ws := range s.workers {
			if ws.endpointID != id || ws.state == wsExited {
				continue
			}
			busy = true
			s.drainLocked(ws, s.drainFor(es.ep, drainScale, "the endpoint was deleted"))
			if ws.state == wsDraining { // new, or an earlier stop failed
				drains = append(drains, ws)
			}
		}
		if es.kept != "" {
			kept = append(kept, es.kept)
			delete(s.kept, es.kept)
			es.kept = ""
		}
		if !busy {
			delete(s.eps, id)
		}
	}
	s.mu.Unlock()
	for _, ws := range drains {
		s.stopAsync(ws)
	}
	for _, id := range kept {
		if err := s.b.Remove(s.ctx, id); err != nil {
			s.log.Warn("remove container", "container", shortID(id), "err", err)
		}
	}
}

// DefaultWorkerEnv is the worker environment with a 10 s heartbeat, used
// when Config.WorkerEnv is nil.
func DefaultWorkerEnv(base, endpointID, workerID, key string) map[string]string {
	return worker.PlatformEnv(base, endpointID, workerID, key, 10000)
}

// workerSpec is the instance of one worker: env = template env, then
// endpoint env, then Berth's variables (apiKey is the worker's own key).
func (s *Supervisor) workerSpec(ws *workerState, ep store.Endpoint, tmpl store.Template, apiKey string, auth *RegistryAuth) Spec {
	env := map[string]string{}
	maps.Copy(env, tmpl.Env)
	maps.Copy(env, ep.Env)
	env["RUNPOD_GPU_COUNT"] = strconv.Itoa(len(ws.gpus))
	env["RUNPOD_POD_HOSTNAME"] = ws.id
	if len(ws.gpus) == 0 {
		env["RUNPOD_SKIP_GPU_CHECK"] = "true"
	}
	maps.Copy(env, s.cfg.WorkerEnv(s.cfg.WorkerBaseURL, ep.ID, ws.id, apiKey))
	spec := Spec{
		Name:  "berth-" + ws.id,
		Image: tmpl.ImageName,
		Env:   env,
		Labels: map[string]string{
			LabelKind:     KindWorker,
			LabelEndpoint: ep.ID,
			LabelWorker:   ws.id,
			LabelVersion:  strconv.Itoa(ep.Version),
			LabelSpec:     ws.specKey,
			LabelGPUs:     strings.Join(ws.gpus, ","),
		},
		Auth: auth, AuthID: tmpl.ContainerRegistryAuthID,
		Entrypoint: tmpl.DockerEntrypoint, Cmd: tmpl.DockerStartCmd,
		GPUs: ws.devices, ContainerDiskGB: tmpl.ContainerDiskInGb,
		StopGrace: s.drainGrace(ep),
	}
	if ep.NetworkVolumeID != "" {
		spec.Mounts = append(spec.Mounts, Mount{Kind: MountNetwork, ID: ep.NetworkVolumeID, Target: "/runpod-volume"})
	}
	if len(ep.ModelReferences) > 0 {
		// Beside the network volume (a mount inside its mount), read-only.
		spec.Mounts = append(spec.Mounts, Mount{Kind: MountModels, Target: ModelsTarget})
		env["HF_HOME"], env["HF_HUB_CACHE"] = ModelsHome, ModelsTarget
	}
	spec.VCPUs, spec.MemoryMiB = cpuRequest(ep)
	if len(ws.devices) > 0 {
		spec.VCPUs, spec.MemoryMiB = gpuRequest(ws.devices, s.cfg.VCPUsPerGPU, s.cfg.MemoryGiBPerGPU)
	}
	spec.ShmMiB = ShmMiB(spec.MemoryMiB, tmpl.ShmSizeInMb)
	spec.SecretEnv = []string{worker.EnvAPIKey}
	return spec
}

// cpuRequest is what a CPU endpoint's worker asks for: its instanceIds'
// first "cpu3c-2-4" (flavour, vCPUs, GB), else vcpuCount vCPUs of its first
// CPU flavour (cpu3c by default) with the flavour's memory per vCPU. A GPU
// endpoint's worker asks for its GPUs only.
func cpuRequest(ep store.Endpoint) (vcpus, memMiB int) {
	if !strings.EqualFold(ep.ComputeType, "CPU") {
		return 0, 0
	}
	return cpuShape(ep.InstanceIDs, ep.VCPUCount, ep.CPUFlavorIDs)
}

// cpuShape is a CPU worker's or pod's vCPUs and memory: the first of
// instanceIDs shaped "cpu3c-2-4" (flavour, vCPUs, GB), else vcpuCount
// vCPUs [2, RunPod's default] of the first flavour [cpu3c] with the
// flavour's memory per vCPU.
func cpuShape(instanceIDs []string, vcpuCount int, flavors []string) (vcpus, memMiB int) {
	for _, id := range instanceIDs {
		f := strings.Split(id, "-")
		if len(f) != 3 {
			continue
		}
		n, err1 := strconv.Atoi(f[1])
		gb, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil && n > 0 && gb > 0 {
			return n, gb << 10
		}
	}
	vcpus = vcpuCount
	if vcpus <= 0 {
		vcpus = 2 // RunPod's default vcpuCount
	}
	flavor := "cpu3c"
	if len(flavors) > 0 {
		flavor = flavors[0]
	}
	return vcpus, vcpus * gpu.CPUMemoryPerVCPU(flavor) << 10
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// specKey hashes what a worker container is made from, so a change rolls
// the workers even when the endpoint's version was not bumped.
func specKey(ep store.Endpoint, t store.Template) string {
	norm := func(v []string) []string {
		if len(v) == 0 {
			return nil
		}
		return v
	}
	normMap := func(m map[string]string) map[string]string {
		if len(m) == 0 {
			return nil
		}
		return m
	}
	parts := []any{
		t.ImageName, norm(t.DockerEntrypoint), norm(t.DockerStartCmd), normMap(t.Env), normMap(ep.Env),
		strings.ToUpper(ep.ComputeType), norm(ep.GPUTypeIDs), max(ep.GPUCount, 1), ep.NetworkVolumeID,
		t.ContainerDiskInGb, t.ContainerRegistryAuthID,
	}
	if t.ShmSizeInMb != 0 {
		// Only when set, so workers made before the field keep their key.
		parts = append(parts, t.ShmSizeInMb)
	}
	b, _ := json.Marshal(parts)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// modelsWait is why ep's workers wait for their models ("" when they do
// not): their progress, or that this Berth cannot give workers models.
func (s *Supervisor) modelsWait(ep store.Endpoint) string {
	if len(ep.ModelReferences) == 0 {
		return ""
	}
	if s.cfg.Models == nil || !s.caps.Models {
		return "" // planPass refuses it as a configuration error (modelsUnavailable)
	}
	return s.cfg.Models(ep)
}
