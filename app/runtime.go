package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"berth/gpu"
	"berth/httpapi"
	"berth/mgmt"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/runtime/voldirs"
	"berth/store"
	"berth/worker"
)

// startRuntime finds the GPUs and, when Docker is reachable (and wanted),
// makes the worker supervisor on them. Without a daemon Berth still serves
// (external workers run jobs) and says so; the allocator (never nil) still
// lists the GPUs found. When the API listens on one address (loopback, say)
// containers cannot reach it: a second listener on the Docker bridge's
// gateway, same port, serves them the worker protocol only.
func (a *App) startRuntime(log *slog.Logger) error {
	cfg := a.cfg
	a.inst = instance(cfg.DataDir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch cfg.Backend.kind {
	case kubernetes:
		return a.startKubernetes(log, cfg.Backend.kube) // kube.go
	case givenBackend:
		return a.startGiven(ctx, log, cfg.Backend.given)
	}
	// Network volumes are host directories, Docker's bind mounts; Berth
	// with no daemon (or DockerOff) still keeps them.
	dirs := voldirs.New(filepath.Join(cfg.DataDir, "volumes"), cfg.Clock)
	a.volumes = dirs
	var backend *docker.Backend
	if !cfg.Backend.off() {
		dock, err := docker.Connect(ctx, log)
		if err == nil {
			a.dock = dock
			a.closers = append(a.closers, func() { dock.Close() })
			dock.OnPull = a.metrics.Pull
			var modelsDir string
			if modelsDir, err = a.newModels(log); err == nil {
				backend, err = docker.NewBackend(dock, docker.Config{
					Instance: a.inst, DataDir: cfg.DataDir, Devices: cfg.DiscoverGPUs, ModelsDir: modelsDir,
					Volumes: dirs,
				})
			}
		}
		if err != nil {
			if cfg.Backend.kind == dockerRequired {
				return err
			}
			log.Warn("no Docker daemon: endpoints get no worker containers; attach workers with `berth worker-env`", "err", err)
			a.noRuntime = err
		}
	}
	// The GPUs are the backend's (NVML's on Docker); without a backend
	// they are still listed for the catalogue.
	var devs []gpu.Device
	var err error
	if backend != nil {
		devs, err = backend.Devices(ctx)
	} else {
		devs, err = cfg.DiscoverGPUs()
	}
	if err != nil {
		log.Warn("no GPU discovery: workers and pods run without GPUs", "err", err)
	} else {
		log.Info("GPUs found", "count", len(devs))
	}
	a.gpus = gpu.NewAllocator(devs)
	if backend == nil {
		return nil
	}
	a.backend, a.volumes = backend, backend

	addr := a.ln.Addr().(*net.TCPAddr)
	port := fmt.Sprint(addr.Port)
	if !addr.IP.IsUnspecified() {
		gw, err := a.dock.BridgeGateway(ctx)
		if err != nil {
			return err
		}
		if a.workerLn, err = net.Listen("tcp", net.JoinHostPort(gw, port)); err != nil {
			return err
		}
		a.closers = append(a.closers, func() { a.workerLn.Close() })
	}

	return a.newSupervisor(log, "http://host.docker.internal:"+port)
}

// startGiven makes the supervisor on a backend the Config gave
// (OnBackend), whose workers reach Berth at the API's own URL.
func (a *App) startGiven(ctx context.Context, log *slog.Logger, b runtime.Backend) error {
	if b == nil {
		return errors.New("app: OnBackend(nil)")
	}
	if err := b.Ping(ctx); err != nil {
		return fmt.Errorf("the %s runtime: %w", b.Name(), err)
	}
	a.backend, a.volumes = b, b
	discover := a.cfg.DiscoverGPUs // nil: the backend's (New)
	if discover == nil {
		discover = func() ([]gpu.Device, error) { return b.Devices(ctx) }
	}
	devs, err := discover()
	if err != nil {
		log.Warn("no GPU discovery: workers and pods run without GPUs", "err", err)
	}
	a.gpus = gpu.NewAllocator(devs)
	log.Info("runtime given", "runtime", b.Name(), "gpus", len(devs))
	return a.newSupervisor(log, a.URL())
}

// newSupervisor makes the supervisor on a.backend, with workers reaching
// Berth at base.
func (a *App) newSupervisor(log *slog.Logger, base string) error {
	cfg := a.cfg
	rc := cfg.Runtime
	rc.Backend, rc.Queue, rc.GPUs, rc.Logger, rc.Clock = a.backend, a.lb.Queue(a.q), a.gpus, log, cfg.Clock
	rc.OnScale = func(ep, action string) {
		if mgmt.IsTestEndpoint(ep) {
			return // a build's test worker: no endpoint's figure
		}
		a.metrics.Scale(ep, action)
		if action == "start" {
			a.series.ColdStart(ep) // a worker launched: a cold start
		}
	}
	rc.WorkerBaseURL = base
	if a.models != nil {
		rc.Models = a.models.wait
	}
	ping := cfg.HTTP.PingInterval
	if ping <= 0 {
		ping = PingInterval
	}
	rc.WorkerEnv = func(base, ep, w, key string) map[string]string {
		return worker.PlatformEnv(base, ep, w, key, ping.Milliseconds())
	}
	db := a.db
	rc.Endpoints = func() ([]store.Endpoint, error) {
		var out []store.Endpoint
		err := db.Scan(store.Endpoints, func(_ string, raw []byte) error {
			var e store.Endpoint
			if err := json.Unmarshal(raw, &e); err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
		return append(out, a.tests.endpoints()...), err
	}
	rc.Template = func(id string) (store.Template, error) {
		if t, ok := a.tests.template(id); ok {
			return t, nil
		}
		var t store.Template
		return t, db.View(func(tx *store.Tx) error { return tx.Get(store.Templates, id, &t) })
	}
	rc.Credentials = func(id string) (*runtime.RegistryAuth, error) {
		u, p, err := store.RegistryCredentials(db, id)
		if err != nil {
			return nil, err
		}
		return &runtime.RegistryAuth{Username: u, Password: p}, nil
	}
	rc.PodExists = func(id string) (bool, error) {
		err := db.View(func(tx *store.Tx) error { var p store.Pod; return tx.Get(store.Pods, id, &p) })
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	rc.OnRun = func(kind, id, ep, gt string, n int, start, end time.Time) {
		var err error
		if end.IsZero() {
			err = mgmt.RecordRunStart(db, store.UsageInterval{Kind: kind, ID: id, EndpointID: ep, GPUTypeID: gt, GPUCount: n, Start: start})
		} else {
			err = store.RecordUsageEnd(db, kind, id, end)
		}
		if err != nil {
			log.Error("usage record", "err", err)
		}
	}
	// A pod container's own end reaches its record (mgmt, made once the
	// runtime exists; events come only after Start). mgmt waits for any
	// action under way on the pod, and the runtime calls with the pod's
	// lock held: hence a goroutine.
	rc.OnPodExit = func(e runtime.PodExit) {
		if e.Requested {
			return // the action that stopped it records the pod's state
		}
		a.podExits.Add(1)
		go func() {
			defer a.podExits.Done()
			if err := a.mg.PodExited(context.Background(), e.ID, mgmt.PodExit{ExitCode: e.ExitCode, OOMKilled: e.OOMKilled, Reason: e.Reason(), At: e.FinishedAt}); err != nil {
				log.Error("record pod exit", "pod", e.ID, "err", err)
			}
		}()
	}
	// A Pod's node address and ports are known once it runs (Kubernetes):
	// the pod record follows, in a goroutine as above.
	rc.OnPodRun = func(st runtime.PodState) {
		a.podExits.Add(1)
		go func() {
			defer a.podExits.Done()
			if err := a.mg.PodRuns(context.Background(), st.ID, podState(st)); err != nil {
				log.Error("record pod run", "pod", st.ID, "err", err)
			}
		}()
	}
	var err error
	a.sup, err = runtime.New(rc)
	return err
}

// wireRuntime gives the API the supervisor's views and hooks: worker
// counts for /health, the endpoint hooks, every surface's worker list,
// container logs (runtime's "no such container" errors become mgmt's,
// answered 404) and each endpoint's status (workers by state, why jobs
// wait).
func wireRuntime(cfg *httpapi.Config, s *runtime.Supervisor) {
	cfg.Workers, cfg.EndpointChanged, cfg.EndpointDeleted = s.WorkerCounts, s.Notify, s.Notify
	cfg.WorkerInfo = workerInfo(s)
	cfg.WorkerLogs = func(ctx context.Context, ep, w string, follow bool, tail int, job string) (io.ReadCloser, error) {
		rc, err := s.WorkerLogs(ctx, ep, w, follow, tail, job)
		return rc, translate(err, runtime.ErrUnknownWorker, mgmt.ErrNoSuchWorker)
	}
	cfg.PodLogs = func(ctx context.Context, id string, follow bool, tail int) (io.ReadCloser, error) {
		rc, err := s.PodLogs(ctx, id, follow, tail)
		return rc, translate(err, runtime.ErrUnknownPod, mgmt.ErrNoSuchPod)
	}
	cfg.EndpointStatus = func(ep string) any { return s.Status(ep) }
}

// wireNoRuntime makes the daemon Berth could not reach at start (why) every
// endpoint's status reason, so the surfaces that show one — v1's status,
// /v2/ID/health, `berth endpoint get`, `berth health`, the dashboard — say
// why no worker container starts, not only the start-up log. Berth does
// not connect later: it needs a restart once Docker runs.
func wireNoRuntime(cfg *httpapi.Config, why error) {
	reason := fmt.Sprintf("no container runtime: %v; Berth starts no worker containers until it is restarted with Docker running — until then only workers attached with `berth worker-env` run jobs", why)
	cfg.EndpointStatus = func(string) any { return runtime.EndpointStatus{Reason: reason} }
}

// translate wraps err with to as well when it is from.
func translate(err, from, to error) error {
	if err != nil && errors.Is(err, from) {
		return fmt.Errorf("%w: %w", to, err)
	}
	return err
}

// workerInfo maps the supervisor's containers to mgmt's worker view: every
// field a surface shows of a worker container comes from here.
func workerInfo(s *runtime.Supervisor) func(string) []mgmt.WorkerInfo {
	return func(ep string) []mgmt.WorkerInfo {
		var out []mgmt.WorkerInfo
		for _, w := range s.Workers(ep) {
			state := w.State
			if state == runtime.StateDraining {
				state = "running" // finishing its jobs: still a worker
			}
			out = append(out, mgmt.WorkerInfo{ID: w.WorkerID, State: state, ImageName: w.Image, Version: w.Version,
				GPUTypeID: w.GPUTypeID, GPUCount: len(w.GPUs), GPUUUIDs: w.GPUs, VCPUCount: w.VCPUs,
				LastStartedAt: w.StartedAt, Message: w.DrainReason})
		}
		return out
	}
}

// podRuntime adapts the supervisor to mgmt's pod interface.
type podRuntime struct{ s *runtime.Supervisor }

func podErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gpu.ErrNoCapacity), errors.Is(err, gpu.ErrAlreadyHeld), errors.Is(err, gpu.ErrUnknownType):
		return errors.Join(mgmt.ErrPodCapacity, err)
	case errors.Is(err, runtime.ErrImage):
		return errors.Join(mgmt.ErrPodInvalid, err)
	}
	return err
}

// podState is what mgmt records of a started pod container. A pod has no
// memory limit on Berth: it can use the host's memory, which is what its
// memoryInGb shows (RunPod's is the pod's RAM).
func podState(st runtime.PodState) mgmt.PodState {
	out := mgmt.PodState{PortMappings: st.PortMappings, PublicIP: st.PublicIP, StartedAt: st.StartedAt, MemoryInGb: hostMemoryGB(), Warnings: st.Warnings}
	if st.GPUCount > 0 {
		out.GPU = &store.PodGPU{ID: st.GPUTypeID, Count: st.GPUCount, DisplayName: gpu.DisplayName(st.GPUTypeID), UUIDs: st.GPUs}
	}
	return out
}

func (p podRuntime) StartPod(ctx context.Context, pod store.Pod) (mgmt.PodState, error) {
	st, err := p.s.EnsurePod(ctx, runtime.PodSpecFromRecord(pod))
	return podState(st), podErr(err)
}

func (p podRuntime) ResetPod(ctx context.Context, pod store.Pod) (mgmt.PodState, error) {
	st, err := p.s.ResetPod(ctx, runtime.PodSpecFromRecord(pod))
	return podState(st), podErr(err)
}

func (p podRuntime) StopPod(ctx context.Context, id string) error {
	_, err := p.s.StopPod(ctx, id)
	if errors.Is(err, runtime.ErrUnknownPod) {
		return nil
	}
	return err
}

func (p podRuntime) RemovePod(ctx context.Context, id string) error { return p.s.RemovePod(ctx, id) }

func (p podRuntime) PodProgress(id string) string { return p.s.PodPullProgress(id) }

// hostMemoryGB is the host's memory (MemTotal of /proc/meminfo) in whole
// GB, rounded down; 0 when it cannot be read. Whole: runpodctl decodes a
// pod's memoryInGb as an integer, and one fraction fails its every pod
// command.
var hostMemoryGB = sync.OnceValue(func() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return math.Floor(float64(kb) / (1 << 20))
		}
	}
	return 0
})

// PodRunning implements mgmt.PodChecker.
func (p podRuntime) PodRunning(ctx context.Context, id string) (bool, error) {
	st, err := p.s.PodState(ctx, id)
	if errors.Is(err, runtime.ErrUnknownPod) {
		return false, nil
	}
	return st.DesiredStatus == runtime.PodRunning, err
}
