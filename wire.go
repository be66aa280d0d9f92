package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"berth/cli"
	"berth/gpu"
	"berth/httpapi"
	"berth/mgmt"
	"berth/queue"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/store"
	"berth/worker"
)

const pingInterval = 10 * time.Second

// serve runs the server until ctx ends (SIGINT/SIGTERM).
func serve(ctx context.Context, o cli.ServeOptions) error {
	log := o.Logger
	hooks, err := queue.NewWebhookGuard(queue.WebhookPolicy{Allow: o.WebhookAllow})
	if err != nil {
		return err
	}
	if os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(store.Procs())
	}

	m := httpapi.NewMetrics()
	db, err := store.Open(filepath.Join(o.Data, "berth.db"), store.Options{OnCommit: m.Commit, Logger: log.With("component", "store")})
	if err != nil {
		return err
	}
	defer db.Close()
	keyHash, err := apiKeyHash(db, log)
	if err != nil {
		return err
	}

	var sup atomic.Pointer[runtime.Supervisor]
	q := queue.New(db, queue.Config{Logger: log.With("component", "queue"), WorkerTimeout: o.WorkerTimeout, ReconcileGrace: o.ReconcileGrace, MaxAttempts: o.MaxAttempts,
		WebhookClient: hooks.Client(10 * time.Second),
		OnJobFinished: m.JobFinished, OnWebhook: m.Webhook,
		OnQueueChange: func(id string) {
			if s := sup.Load(); s != nil {
				s.Notify(id)
			}
		},
		OnStopPod: func(ep, w string) {
			if s := sup.Load(); s != nil {
				s.Recycle(ep, w)
			}
		},
	})
	if err := q.Start(context.Background()); err != nil {
		return err
	}
	var apiPtr atomic.Pointer[httpapi.Server]
	lb := newBalancer(log.With("component", "lbproxy"), db, &sup, &apiPtr) // lbwire.go
	lb.Start()
	defer lb.Stop()
	s, gpus, workerLn, err := startRuntime(context.Background(), log.With("component", "runtime"), db, lb.Queue(q), o, m)
	if err != nil {
		q.Stop()
		return fmt.Errorf("start the container runtime: %w", err)
	}
	cfg := httpapi.Config{
		Store: db, Queue: q, Logger: log.With("component", "http"), APIKeyHash: keyHash, DataDir: o.Data,
		RateLimits: o.RateLimits, Version: version, PingInterval: pingInterval,
		WebhookURL: hooks.CheckURL,
		GPUs:       gpus.Snapshot, Metrics: m,
	}
	if len(gpus.Snapshot()) > 0 {
		cfg.GPUUsage = gpu.SampleSystem // no series without GPUs
	}
	if s != nil {
		sup.Store(s)
		defer s.Stop() // containers keep running and are adopted at the next start
		cfg.Workers, cfg.EndpointChanged, cfg.EndpointDeleted = s.WorkerCounts, s.Notify, s.Notify
		cfg.WorkerInfo = workerInfo(s)
		cfg.Pods = podRuntime{s}
		wireLogsAndStatus(&cfg, s)
	}
	api := httpapi.New(cfg)
	apiPtr.Store(api)
	if workerLn != nil {
		hooks.DenyListener(workerLn.Addr())
		log.Info("worker protocol for containers", "addr", workerLn.Addr().String())
		go newHTTPServer(api.WorkerHandler()).Serve(workerLn)
	}

	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		q.Stop()
		return err
	}
	hooks.DenyListener(ln.Addr())
	srv := newHTTPServer(lb.Handler(api.Handler()))
	log.Info("berth serving", "addr", ln.Addr().String(), "data", o.Data, "version", version, "rateLimits", o.RateLimits)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// systemd Type=notify: ready once the listener accepts (a no-op
	// outside systemd: NOTIFY_SOCKET is unset).
	if ok, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify", "err", err)
	} else if ok {
		log.Info("told systemd we are ready")
	}
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		q.Stop()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	if s != nil {
		s.Stop()
	}
	q.Stop() // wakes every long poll
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// newHTTPServer bounds what net/http bounds: headers must arrive within
// 10 s and an idle keep-alive connection is closed after 2 min. Bodies and
// responses get per-request deadlines in httpapi (limits.go), since one
// ReadTimeout/WriteTimeout would cut long polls and large uploads.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
}

// apiKeyHash returns the hash of the operator's key: BERTH_API_KEY when set,
// otherwise a key generated on first start, stored hashed and printed once.
func apiKeyHash(db *store.DB, log *slog.Logger) (string, error) {
	if k := os.Getenv("BERTH_API_KEY"); k != "" {
		return httpapi.HashKey(k), nil
	}
	var stored []byte
	db.View(func(tx *store.Tx) error { stored = tx.GetRaw(store.Meta, "api_key_hash"); return nil })
	if stored != nil {
		log.Info("using the API key generated on first start (set BERTH_API_KEY to use another)")
		return string(stored), nil
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	key := "berth_" + hex.EncodeToString(b)
	h := httpapi.HashKey(key)
	if err := db.Write(store.PutRaw(store.Meta, "api_key_hash", []byte(h))); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "\nYour Berth API key (shown only this once; only its hash is stored):\n\n    %s\n\nexport BERTH_API_KEY=%s\n\n", key, key)
	return h, nil
}

// startRuntime finds the GPUs and, when Docker is reachable, starts the
// worker supervisor on them. Without a daemon Berth still serves (external
// workers run jobs) and says so; the allocator (never nil) still lists the
// GPUs NVML found. workerLn, when not nil, is a listener on the Docker
// bridge gateway that must serve the worker protocol only.
func startRuntime(ctx context.Context, log *slog.Logger, db *store.DB, q runtime.Queue, o cli.ServeOptions, m *httpapi.Metrics) (*runtime.Supervisor, *gpu.Allocator, net.Listener, error) {
	addr, data := o.Addr, o.Data
	// runtime.Config's zero means the default and negative never.
	flashMax, flashMem := o.FlashMaxFrozen, int64(o.FlashMinMemMiB)<<20
	if flashMax <= 0 {
		flashMax = -1
	}
	if flashMem <= 0 {
		flashMem = -1
	}
	abs, _ := filepath.Abs(data)
	sum := sha256.Sum256([]byte(abs))
	instance := hex.EncodeToString(sum[:6])
	var backend *docker.Backend
	dock, err := docker.Connect(ctx, log)
	if err == nil {
		dock.OnPull = m.Pull
		backend, err = docker.NewBackend(dock, docker.Config{
			Instance: instance, DataDir: data,
			VolumePath: func(id string) (string, error) { return mgmt.VolumePath(data, id), nil },
		})
	}
	// The GPUs are the backend's (NVML's on Docker); without a backend
	// NVML still lists this machine's for the catalogue.
	var devs []gpu.Device
	if backend != nil {
		devs, err = backend.Devices(ctx)
	} else {
		log.Warn("no Docker daemon: endpoints get no worker containers; attach workers with `berth worker-env`", "err", err)
		devs, err = gpu.DiscoverSystem()
	}
	if err != nil {
		log.Warn("no GPU discovery: workers and pods run without GPUs", "err", err)
	} else {
		log.Info("GPUs found", "count", len(devs))
	}
	alloc := gpu.NewAllocator(devs)
	if backend == nil {
		return nil, alloc, nil, nil
	}
	host, port, _ := net.SplitHostPort(addr)
	var workerLn net.Listener
	if host != "0.0.0.0" && host != "::" && host != "" {
		// Containers cannot reach 127.0.0.1 on the host: listen on the
		// bridge gateway too, for the worker protocol only.
		gw, err := dock.BridgeGateway(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		if workerLn, err = net.Listen("tcp", net.JoinHostPort(gw, port)); err != nil {
			return nil, nil, nil, err
		}
	}
	s, err := runtime.New(runtime.Config{
		Backend: backend, Queue: q, GPUs: alloc, Logger: log, OnScale: m.Scale,
		FlashMaxFrozen: flashMax, FlashMinMemAvailable: flashMem,
		WorkerBaseURL: "http://host.docker.internal:" + port,
		WorkerEnv: func(base, ep, w, key string) map[string]string {
			return worker.PlatformEnv(base, ep, w, key, pingInterval.Milliseconds())
		},
		Endpoints: func() ([]store.Endpoint, error) {
			var out []store.Endpoint
			err := db.Scan(store.Endpoints, func(_ string, raw []byte) error {
				var e store.Endpoint
				if err := json.Unmarshal(raw, &e); err != nil {
					return err
				}
				out = append(out, e)
				return nil
			})
			return out, err
		},
		Template: func(id string) (store.Template, error) {
			var t store.Template
			return t, db.View(func(tx *store.Tx) error { return tx.Get(store.Templates, id, &t) })
		},
		Credentials: func(id string) (*runtime.RegistryAuth, error) {
			u, p, err := store.RegistryCredentials(db, id)
			if err != nil {
				return nil, err
			}
			return &runtime.RegistryAuth{Username: u, Password: p}, nil
		},
		PodExists: func(id string) (bool, error) {
			err := db.View(func(tx *store.Tx) error { var p store.Pod; return tx.Get(store.Pods, id, &p) })
			if errors.Is(err, store.ErrNotFound) {
				return false, nil
			}
			return err == nil, err
		},
		OnRun: func(kind, id, ep, gt string, n int, start, end time.Time) {
			var err error
			if end.IsZero() {
				err = mgmt.RecordRunStart(db, store.UsageInterval{Kind: kind, ID: id, EndpointID: ep, GPUTypeID: gt, GPUCount: n, Start: start})
			} else {
				err = store.RecordUsageEnd(db, kind, id, end)
			}
			if err != nil {
				log.Error("usage record", "err", err)
			}
		},
	})
	if err != nil {
		closeListener(workerLn)
		return nil, nil, nil, err
	}
	if err := s.Start(ctx); err != nil {
		closeListener(workerLn)
		return nil, nil, nil, err
	}
	return s, alloc, workerLn, nil
}

func closeListener(ln net.Listener) {
	if ln != nil {
		ln.Close()
	}
}

// podRuntime adapts the supervisor to the management API's pod interface.
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

func podState(st runtime.PodState) mgmt.PodState {
	out := mgmt.PodState{PortMappings: st.PortMappings, PublicIP: st.PublicIP, StartedAt: st.StartedAt}
	if st.GPUCount > 0 {
		out.GPU = &store.PodGPU{ID: st.GPUTypeID, Count: st.GPUCount, DisplayName: st.GPUTypeID, UUIDs: st.GPUs}
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

// workerInfo maps the supervisor's containers to includeWorkers entries.
func workerInfo(s *runtime.Supervisor) func(string) []mgmt.WorkerInfo {
	return func(ep string) []mgmt.WorkerInfo {
		var out []mgmt.WorkerInfo
		for _, w := range s.Workers(ep) {
			state := w.State
			if state == runtime.StateDraining {
				state = "running"
			}
			out = append(out, mgmt.WorkerInfo{ID: w.WorkerID, State: state, Version: w.Version,
				GPUTypeID: w.GPUTypeID, GPUCount: len(w.GPUs), GPUUUIDs: w.GPUs})
		}
		return out
	}
}

// wireLogsAndStatus wires the supervisor into the management API: container
// logs (runtime's "no such container" errors become httpapi's, answered
// 404) and each endpoint's status (workers by state, why jobs wait).
func wireLogsAndStatus(cfg *httpapi.Config, s *runtime.Supervisor) {
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

// translate wraps err with to as well when it is from.
func translate(err, from, to error) error {
	if err != nil && errors.Is(err, from) {
		return fmt.Errorf("%w: %w", to, err)
	}
	return err
}
