package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// workerState is one worker container the Supervisor manages.
type workerState struct {
	id, endpointID string
	containerID    string
	version        int
	specKey        string
	gpus           []string
	gpuType        string

	phase     phase
	seen      bool      // has contacted Berth
	startedAt time.Time // container start (zero while starting)
	idleSince time.Time
	running   int
	stopsSeen map[string]time.Time // pending job-stop ids -> first noticed

	draining    bool
	drainReason string
	fault       string // why Berth killed it, if it was the worker's fault
	recycle     bool
	stopping    bool          // a stop is under way
	grace       time.Duration // of the last stop asked for
	oom         bool
	exited      bool // exit handled or being handled
	runStarted  bool // OnRun start was reported

	// FlashBoot (flashboot.go)
	fz         freezeState
	frozenAt   time.Time
	thawWanted bool          // thaw as soon as the pause completes
	evicted    bool          // drained by a FlashBoot eviction
	gone       chan struct{} // closed when forgotten (goneChanLocked)
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

// scaleEndpoint is one autoscaler pass over an endpoint: observe workers,
// plan, then drain and start.
func (s *Supervisor) scaleEndpoint(ep store.Endpoint) {
	now := s.clock.Now()
	tmpl, terr := s.cfg.Template(ep.TemplateID)
	key := specKey(ep, tmpl)

	// Queue calls happen without s.mu: the queue calls Notify while
	// holding its own lock.
	stats := s.q.Stats(ep.ID)
	loads := map[string]queue.WorkerLoad{}
	for _, l := range s.q.Workers(ep.ID) {
		loads[l.WorkerID] = l
	}
	s.mu.Lock()
	var ids []string
	for _, ws := range s.workers {
		if ws.endpointID == ep.ID && !ws.exited && ws.phase != phaseStarting && !ws.draining {
			ids = append(ids, ws.id)
		}
	}
	s.mu.Unlock()
	stops := map[string][]string{}
	for _, id := range ids {
		if p := s.q.PendingStops(id); len(p) > 0 {
			stops[id] = p
		}
	}

	s.mu.Lock()
	es := s.endpointLocked(ep.ID)
	es.ep = ep
	if es.specKey != key {
		// A new configuration deserves a fresh try.
		es.specKey = key
		es.failures, es.crashes, es.unhealthy = 0, 0, false
		es.nextStart, es.lastError = time.Time{}, ""
	}
	es.configErr = ""
	switch {
	case terr != nil:
		es.configErr = fmt.Sprintf("template %q: %v", ep.TemplateID, terr)
	case tmpl.ImageName == "":
		es.configErr = fmt.Sprintf("template %q has no imageName", ep.TemplateID)
	}
	needGPU, warning := s.gpuChoice(ep)
	es.warning = warning
	if needGPU && es.configErr == "" {
		es.configErr = s.gpuTypeError(ep)
	}
	if ep.NetworkVolumeID != "" && s.cfg.VolumePath == nil {
		es.warning = joinNote(es.warning, "network volume "+ep.NetworkVolumeID+" is not mounted: Berth has no volume directory configured")
	}
	if es.diskWarn != "" {
		es.warning = joinNote(es.warning, es.diskWarn)
	}

	var kill, retry []*workerState
	var retryGrace []time.Duration
	var views []workerView
	var drains []*workerState
	for _, ws := range s.workers {
		if ws.endpointID != ep.ID || ws.exited {
			continue
		}
		s.observeLocked(ws, loads, stops[ws.id], now, &kill)
		if ws.draining {
			if !ws.stopping && ws.phase != phaseStarting && !slices.Contains(kill, ws) {
				retry = append(retry, ws) // an earlier stop failed
				retryGrace = append(retryGrace, ws.grace)
			}
			continue
		}
		if ws.recycle {
			s.markDrainLocked(ws, "stopPod: recycling the worker")
			drains = append(drains, ws)
			continue
		}
		views = append(views, workerView{
			id: ws.id, current: ws.version == ep.Version && ws.specKey == key,
			phase: ws.phase, idleFor: idleFor(ws, now), running: ws.running,
			frozen: ws.frozenLocked(), frozenAt: ws.frozenAt,
		})
	}
	plan := planScale(scaleInput{ep: ep, stats: stats, workers: views})
	for _, d := range plan.drain {
		ws := s.workers[d.id]
		s.markDrainLocked(ws, d.reason)
		drains = append(drains, ws)
	}
	var freeze, thaw []*workerState
	for _, id := range plan.freeze {
		freeze = append(freeze, s.workers[id])
	}
	for _, id := range plan.thaw {
		thaw = append(thaw, s.workers[id])
	}
	es.want, es.maxReason = plan.want, plan.reason

	start := plan.start
	busyStarting := false
	for _, ws := range s.workers {
		if ws.endpointID == ep.ID && !ws.exited && !ws.draining && !ws.phase.ready() {
			busyStarting = true
		}
	}
	switch {
	case es.configErr != "":
		start = 0
	case now.Before(es.nextStart):
		start = 0
	case es.unhealthy && busyStarting:
		start = 0 // one probe at a time
	case es.unhealthy:
		start = min(start, 1)
	}
	hasOld := false
	for _, v := range views {
		if !v.current && !slices.ContainsFunc(plan.drain, func(d drainOrder) bool { return d.id == v.id }) {
			hasOld = true
		}
	}
	rollDraining := false
	for _, ws := range s.workers {
		if ws.endpointID == ep.ID && ws.draining && strings.HasPrefix(ws.drainReason, "rolling update") {
			rollDraining = true
		}
	}
	s.mu.Unlock()

	for _, ws := range thaw {
		s.thawAsync(ws)
	}
	for _, ws := range freeze {
		s.freezeAsync(ws)
	}
	for _, ws := range kill {
		s.stopAsync(ws, 0)
	}
	for i, ws := range retry {
		s.stopAsync(ws, retryGrace[i])
	}
	grace := s.drainGrace(ep)
	for _, ws := range drains {
		s.stopAsync(ws, s.graceFor(ws, grace))
	}

	throttled, throttle := 0, ""
	for i := 0; i < start; i++ {
		err := s.startOne(ep, tmpl, key, needGPU)
		if err == nil {
			continue
		}
		if errors.Is(err, gpu.ErrNoCapacity) {
			throttled, throttle = start-i, "waiting for free GPUs: "+err.Error()
			if done := s.evictForGPUs(ep.GPUTypeIDs, max(ep.GPUCount, 1), "a worker of endpoint "+ep.ID); done != nil {
				throttle = "waiting for free GPUs: evicting frozen (flashboot) workers that hold them"
				go func() {
					select {
					case <-done:
						s.Notify(ep.ID)
					case <-s.ctx.Done():
					}
				}()
			} else if hasOld && !rollDraining {
				// A rolling update on a full machine: make room by
				// draining one old worker first.
				s.drainOneOld(ep, key, grace)
			}
		} else if errors.Is(err, gpu.ErrUnknownType) {
			s.mu.Lock()
			es.configErr = err.Error()
			s.mu.Unlock()
		} else {
			s.log.Error("start worker", "endpoint", ep.ID, "err", err)
		}
		break
	}
	s.mu.Lock()
	es.throttled, es.throttle = throttled, throttle
	s.mu.Unlock()
}

// observeLocked updates a worker from the queue's view and picks workers
// to kill: lost (hung), never contacting Berth, or ignoring job-stop.
func (s *Supervisor) observeLocked(ws *workerState, loads map[string]queue.WorkerLoad, stops []string, now time.Time, kill *[]*workerState) {
	if ws.phase == phaseStarting {
		return
	}
	l, ok := loads[ws.id]
	if ok && !l.LastSeen.IsZero() && !ws.seen {
		ws.seen = true
		if es := s.eps[ws.endpointID]; es != nil {
			es.failures, es.unhealthy = 0, false
		}
	}
	switch {
	case !ws.seen:
		ws.phase = phaseInitializing
	case ok && l.Running > 0:
		ws.phase, ws.running, ws.idleSince = phaseRunning, l.Running, time.Time{}
	default:
		if ws.phase != phaseIdle || ws.idleSince.IsZero() {
			ws.idleSince = now
		}
		ws.phase, ws.running = phaseIdle, 0
	}
	if ws.draining || ws.fz != fzNone {
		return // a frozen worker is silent by design: never lost
	}
	fault := ""
	switch {
	case ws.seen && (!ok || l.Lost):
		fault = "the worker stopped contacting Berth (no heartbeat within the worker timeout)"
	case !ws.seen && !ws.startedAt.IsZero() && now.Sub(ws.startedAt) > s.cfg.InitTimeout:
		fault = fmt.Sprintf("the worker did not contact Berth within %s of starting; can the container reach %s?",
			s.cfg.InitTimeout, s.cfg.WorkerBaseURL)
	}
	// Jobs told to stop but never fetched from job-stop (workers older
	// than runpod-python 1.10 have no stop channel).
	seenNow := map[string]time.Time{}
	for _, id := range stops {
		first, ok := ws.stopsSeen[id]
		if !ok {
			first = now
		}
		seenNow[id] = first
		if fault == "" && now.Sub(first) >= s.cfg.StopIgnoredAfter {
			fault = fmt.Sprintf("the worker ignored the stop of job %s for %s", id, s.cfg.StopIgnoredAfter)
		}
	}
	ws.stopsSeen = seenNow
	if fault != "" {
		s.scaled(ws.endpointID, "kill")
		s.wlog(ws).Warn("stopping worker", "reason", fault)
		ws.draining, ws.drainReason, ws.fault = true, fault, fault
		*kill = append(*kill, ws)
	}
}

func idleFor(ws *workerState, now time.Time) time.Duration {
	if ws.phase != phaseIdle || ws.idleSince.IsZero() {
		return 0
	}
	return now.Sub(ws.idleSince)
}

func (s *Supervisor) markDrainLocked(ws *workerState, reason string) {
	ws.draining, ws.drainReason = true, reason
	s.scaled(ws.endpointID, "drain")
	s.wlog(ws).Info("draining worker", "reason", reason)
}

// drainOneOld drains the cheapest old-version worker of ep.
func (s *Supervisor) drainOneOld(ep store.Endpoint, key string, grace time.Duration) {
	s.mu.Lock()
	var old []workerView
	for _, ws := range s.workers {
		if ws.endpointID == ep.ID && !ws.exited && !ws.draining && (ws.version != ep.Version || ws.specKey != key) {
			old = append(old, workerView{id: ws.id, phase: ws.phase, running: ws.running})
		}
	}
	if len(old) == 0 {
		s.mu.Unlock()
		return
	}
	ws := s.workers[byDrainPreference(old)[0].id]
	s.markDrainLocked(ws, "rolling update to version "+strconv.Itoa(ep.Version)+" (making room on the GPUs)")
	s.mu.Unlock()
	s.stopAsync(ws, s.graceFor(ws, grace))
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

// graceFor shortens the drain grace of a worker that had no job when it was
// drained: there is nothing to finish, and a container that ignores SIGTERM
// should not hold its GPUs for the whole execution timeout.
func (s *Supervisor) graceFor(ws *workerState, grace time.Duration) time.Duration {
	s.mu.Lock()
	busy := ws.running > 0 || ws.phase == phaseRunning
	s.mu.Unlock()
	if busy {
		return grace
	}
	return min(grace, s.cfg.IdleStopGrace)
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
	ws := &workerState{id: reg.WorkerID, endpointID: ep.ID, version: ep.Version, specKey: key, phase: phaseStarting}
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
		ws.gpuType = devs[0].TypeID
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

// launch pulls the image if needed and creates and starts the container.
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
	err := s.d.EnsureImage(ctx, tmpl.ImageName, auth, func(msg string) {
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
	spec, err := s.workerSpec(ws, ep, tmpl, apiKey)
	if err != nil {
		s.launchFailed(ws, err, "")
		return
	}
	res, err := s.d.Create(ctx, spec)
	if err != nil {
		s.launchFailed(ws, err, "")
		return
	}
	s.mu.Lock()
	ws.containerID = res.ID
	s.byContainer[res.ID] = ws
	cancelled := ws.draining
	if es := s.eps[ep.ID]; es != nil {
		es.diskWarn = ""
		if spec.ContainerDiskGB > 0 && !res.DiskLimitApplied {
			es.diskWarn = fmt.Sprintf("containerDiskInGb (%d) is not enforced: the %q storage driver cannot limit a container's size",
				spec.ContainerDiskGB, s.d.Info().StorageDriver)
		}
	}
	s.mu.Unlock()
	if cancelled {
		s.launchFailed(ws, nil, res.ID)
		return
	}
	if err := s.d.Start(ctx, res.ID); err != nil {
		// Keep the container (not started) so its config can be inspected.
		s.launchFailed(ws, err, res.ID)
		return
	}
	now := s.clock.Now()
	s.mu.Lock()
	exited := ws.exited
	if !exited {
		ws.phase, ws.startedAt, ws.runStarted = phaseInitializing, now, true
	}
	draining := ws.draining
	s.mu.Unlock()
	if exited {
		return
	}
	if s.cfg.OnRun != nil {
		s.cfg.OnRun(KindWorker, ws.id, ep.ID, ws.gpuType, len(ws.gpus), now, time.Time{})
	}
	if draining {
		s.stopAsync(ws, s.drainGrace(ep))
	}
	s.Notify(ep.ID)
}

// launchFailed cleans up after a worker that could not start. err nil
// means the start was called off (the worker was drained while starting).
func (s *Supervisor) launchFailed(ws *workerState, err error, containerID string) {
	cancelled := err == nil || s.ctx.Err() != nil
	if !cancelled {
		s.wlog(ws).Warn("worker failed to start", "err", err)
	}
	s.q.ForgetWorker(ws.id)
	now := s.clock.Now()
	s.mu.Lock()
	ws.exited = true
	s.releaseGPUsLocked(ws)
	s.forgetLocked(ws)
	if containerID != "" {
		delete(s.byContainer, containerID)
	}
	var drop string
	if es := s.eps[ws.endpointID]; es != nil && !cancelled {
		s.noteFailureLocked(es, err.Error(), IsNoGPURuntime(err), now)
		if containerID != "" {
			drop, es.kept = es.kept, containerID
			s.kept[containerID] = es.id
			delete(s.kept, drop)
			containerID = ""
		}
	}
	s.mu.Unlock()
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 30*time.Second)
	defer cancel()
	for _, id := range []string{drop, containerID} {
		if id != "" {
			if err := s.d.Remove(rmCtx, id, true); err != nil {
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
		// Only installing the NVIDIA toolkit (and restarting Docker) helps.
		es.lastError = "the Docker daemon cannot give containers GPUs (install the NVIDIA Container Toolkit): " + reason
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

// stopAsync stops a worker's container on a goroutine: SIGTERM, then
// SIGKILL after grace. A worker still starting is stopped by its launch.
func (s *Supervisor) stopAsync(ws *workerState, grace time.Duration) {
	s.mu.Lock()
	cid, starting := ws.containerID, ws.phase == phaseStarting
	if starting || cid == "" || ws.stopping {
		s.mu.Unlock()
		return
	}
	ws.stopping, ws.grace = true, grace
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		err := s.d.Stop(s.ctx, cid, grace)
		if err != nil && s.ctx.Err() != nil {
			return // shutting down: the next Start sees how it ended
		}
		if err != nil && !IsNotFound(err) {
			s.wlog(ws).Warn("stop worker container", "err", err)
		}
		s.containerExited(ws)
		s.mu.Lock()
		ws.stopping = false // still running if the stop failed: the next pass retries
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
	if ws.exited || ws.containerID == "" {
		s.mu.Unlock()
		return
	}
	ws.exited = true
	cid := ws.containerID
	s.mu.Unlock()

	info, err := s.d.Inspect(ctx, cid)
	switch {
	case err == nil && info.Running:
		s.mu.Lock()
		ws.exited = false // a stale report: still running
		s.mu.Unlock()
		return
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
	seen = seen || ws.seen
	expected := ws.draining && ws.fault == ""
	fault, drainReason, oom := ws.fault, ws.drainReason, ws.oom || info.OOMKilled
	s.mu.Unlock()

	var reason string
	switch {
	case fault != "":
		reason = "worker stopped: " + fault
	case expected:
		reason = "worker stopped: " + drainReason
	case oom:
		reason = fmt.Sprintf("worker container was killed for lack of memory (OOM, exit code %d)", info.ExitCode)
	case info.ExitCode != 0:
		reason = fmt.Sprintf("worker container exited with code %d", info.ExitCode)
	case err != nil:
		reason = "worker container disappeared"
	default:
		reason = "worker container exited"
	}
	failedStart := !expected && !seen
	crashed := !expected && seen && (info.ExitCode != 0 || oom || fault != "" || err != nil)
	if failedStart && err == nil {
		if tail := s.logTail(ctx, cid, 5); tail != "" {
			reason += "; last output: " + tail
		}
	}
	if !expected {
		s.wlog(ws).Warn("worker exited", "reason", reason)
	} else {
		s.wlog(ws).Info("worker stopped", "reason", drainReason)
	}
	s.q.WorkerGone(ws.id, reason)
	s.q.ForgetWorker(ws.id)

	now := s.clock.Now()
	keep := (failedStart || crashed) && err == nil
	remove := cid
	s.mu.Lock()
	s.releaseGPUsLocked(ws)
	s.forgetLocked(ws)
	delete(s.byContainer, cid)
	runStarted := ws.runStarted
	var drop string
	if es := s.eps[ws.endpointID]; es != nil {
		switch {
		case failedStart:
			s.noteFailureLocked(es, reason, false, now)
		case crashed:
			s.noteCrashLocked(es, reason, now)
		}
		if keep {
			drop, es.kept = es.kept, cid
			delete(s.kept, drop)
			s.kept[cid] = es.id
			remove = ""
		}
	}
	s.mu.Unlock()
	for _, id := range []string{drop, remove} {
		if id != "" {
			if err := s.d.Remove(ctx, id, true); err != nil {
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
	rc, err := s.d.Logs(ctx, id, false, n, time.Time{})
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

// dropDeleted drains the workers of endpoints that no longer exist.
func (s *Supervisor) dropDeleted(present map[string]bool) {
	var drains []*workerState
	var kept []string
	s.mu.Lock()
	for id, es := range s.eps {
		if present[id] {
			continue
		}
		busy := false
		for _, ws := range s.workers {
			if ws.endpointID != id || ws.exited {
				continue
			}
			busy = true
			if !ws.draining {
				s.markDrainLocked(ws, "the endpoint was deleted")
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
		s.stopAsync(ws, s.graceFor(ws, s.drainGrace(s.endpointRecord(ws.endpointID))))
	}
	for _, id := range kept {
		if err := s.d.Remove(s.ctx, id, true); err != nil {
			s.log.Warn("remove container", "container", shortID(id), "err", err)
		}
	}
}

// endpointRecord is the last endpoint record the autoscaler saw.
func (s *Supervisor) endpointRecord(id string) store.Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	if es := s.eps[id]; es != nil {
		return es.ep
	}
	return store.Endpoint{}
}

// DefaultWorkerEnv is the worker environment with a 10 s heartbeat, used
// when Config.WorkerEnv is nil.
func DefaultWorkerEnv(base, endpointID, workerID, key string) map[string]string {
	return worker.PlatformEnv(base, endpointID, workerID, key, 10000)
}

// workerSpec is the container of one worker: env = template env, then
// endpoint env, then Berth's variables (apiKey is the worker's own key).
func (s *Supervisor) workerSpec(ws *workerState, ep store.Endpoint, tmpl store.Template, apiKey string) (ContainerSpec, error) {
	env := map[string]string{}
	maps.Copy(env, tmpl.Env)
	maps.Copy(env, ep.Env)
	env["RUNPOD_GPU_COUNT"] = strconv.Itoa(len(ws.gpus))
	env["RUNPOD_POD_HOSTNAME"] = ws.id
	if len(ws.gpus) == 0 {
		env["RUNPOD_SKIP_GPU_CHECK"] = "true"
	}
	maps.Copy(env, s.cfg.WorkerEnv(s.cfg.WorkerBaseURL, ep.ID, ws.id, apiKey))

	spec := ContainerSpec{
		Name:  "berth-" + ws.id,
		Image: tmpl.ImageName,
		Env:   envList(env),
		Labels: map[string]string{
			LabelKind:     KindWorker,
			LabelEndpoint: ep.ID,
			LabelWorker:   ws.id,
			LabelVersion:  strconv.Itoa(ep.Version),
			LabelSpec:     ws.specKey,
			LabelGPUs:     strings.Join(ws.gpus, ","),
		},
		ContainerDiskGB: tmpl.ContainerDiskInGb,
		GPUUUIDs:        ws.gpus,
		UseCDI:          len(ws.gpus) > 0 && s.d.CDIEnabled(),
		ExtraHosts:      s.cfg.ExtraHosts,
		NetworkMode:     s.cfg.NetworkMode,
		StopTimeout:     s.drainGrace(ep),
		Init:            true,
		Instance:        s.cfg.Instance,
	}
	if len(tmpl.DockerEntrypoint) > 0 {
		spec.Entrypoint = tmpl.DockerEntrypoint
	}
	if len(tmpl.DockerStartCmd) > 0 {
		spec.Cmd = tmpl.DockerStartCmd
	}
	if ep.NetworkVolumeID != "" && s.cfg.VolumePath != nil {
		dir, err := s.cfg.VolumePath(ep.NetworkVolumeID)
		if err != nil {
			return ContainerSpec{}, fmt.Errorf("network volume %q: %w", ep.NetworkVolumeID, err)
		}
		spec.VolumeMounts = append(spec.VolumeMounts, VolumeMount{Source: dir, Target: "/runpod-volume"})
	}
	return spec, nil
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
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
	b, _ := json.Marshal([]any{
		t.ImageName, norm(t.DockerEntrypoint), norm(t.DockerStartCmd), normMap(t.Env), normMap(ep.Env),
		strings.ToUpper(ep.ComputeType), norm(ep.GPUTypeIDs), max(ep.GPUCount, 1), ep.NetworkVolumeID,
		t.ContainerDiskInGb, t.ContainerRegistryAuthID,
	})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
