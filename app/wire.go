package app

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/gpu"
	"berth/httpapi"
	"berth/metrics"
	"berth/mgmt"
	"berth/queue"
	"berth/runtime"
	"berth/store"
)

// PingInterval is the RUNPOD_PING_INTERVAL workers are given [10s].
const PingInterval = 10 * time.Second

// New assembles a Berth: it opens the database (refusing a damaged one),
// settles the operator's key (a generated one is stored at Start), finds the GPUs, connects to the
// runtime cfg.Backend names, binds the listeners and builds every service. Nothing
// runs until Start; Stop releases what New took.
func New(cfg Config) (_ *App, err error) {
	if cfg.DataDir == "" || cfg.Addr == "" {
		return nil, errors.New("app: DataDir and Addr are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.KeyNotice == nil {
		cfg.KeyNotice = io.Discard
	}
	systemGPUs := cfg.DiscoverGPUs == nil
	if systemGPUs && cfg.Backend.kind != givenBackend { // a given backend's are its Devices
		cfg.DiscoverGPUs = gpu.DiscoverSystem
	}
	log := cfg.Logger
	a := &App{cfg: cfg, log: log, failed: make(chan error, 2)}
	defer func() {
		if err != nil {
			for i := len(a.closers) - 1; i >= 0; i-- {
				a.closers[i]()
			}
			if a.db != nil {
				a.db.Close()
			}
		}
	}()

	if a.hooks, err = queue.NewWebhookGuard(queue.WebhookPolicy{Allow: cfg.WebhookAllow}); err != nil {
		return nil, err
	}
	a.metrics = metrics.New()
	var api atomic.Pointer[httpapi.Server]
	a.series = newSeries(cfg, &a.db, &api)
	if a.db, err = store.Open(filepath.Join(cfg.DataDir, "berth.db"), store.Options{OnCommit: a.metrics.Commit, Logger: log.With("component", "store")}); err != nil {
		return nil, err
	}
	keyHash, operatorHash, keep, err := a.apiKeys(a.db, cfg.APIKey, cfg.KeyNotice, log) // key.go
	a.keepKey = keep
	if err != nil {
		return nil, err
	}

	// The API listener first: its port is the one containers are told.
	if a.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { a.ln.Close() })
	a.hooks.DenyListener(a.ln.Addr())

	// The runtime is made with the balancer's view of the queue, and the
	// balancer, queue and API reach the runtime through sup once it exists.
	var sup atomic.Pointer[runtime.Supervisor]
	qc := cfg.Queue
	qc.Clock, qc.Logger = cfg.Clock, log.With("component", "queue")
	qc.WebhookClient = a.hooks.Client(10 * time.Second)
	qc.OnJobFinished = also4(a.metrics.JobFinished, cfg.Queue.OnJobFinished)
	qc.OnJobEnded = also5(a.series.JobEnded, cfg.Queue.OnJobEnded)
	qc.OnWebhook = also2(a.metrics.Webhook, cfg.Queue.OnWebhook)
	qc.OnQueueChange = also1(func(id string) {
		if s := sup.Load(); s != nil {
			s.Notify(id)
		}
	}, cfg.Queue.OnQueueChange)
	qc.OnStopPod = also2(func(ep, w string) {
		if s := sup.Load(); s != nil {
			s.Recycle(ep, w)
		}
	}, cfg.Queue.OnStopPod)
	a.q = queue.New(a.db, qc)
	a.lb = a.newBalancer(log.With("component", "lbproxy"), &sup, &api) // lb.go

	a.tests = newTestWorkers(a)                                              // buildtests.go
	if err := a.startRuntime(log.With("component", "runtime")); err != nil { // runtime.go
		return nil, err
	}
	sup.Store(a.sup)

	// The management rules, and the API over them. An endpoint changed or
	// deleted through any surface reaches the API (its cache, the
	// endpoint's jobs) and the runtime.
	var pods mgmt.PodRuntime // nil without a runtime: pods answer 503
	if a.sup != nil {
		pods = podRuntime{a.sup}
	}
	a.mg = mgmt.New(mgmt.Config{Store: a.db, Clock: cfg.Clock, Logger: log.With("component", "mgmt"), DataDir: cfg.DataDir, Pods: pods,
		Jobs:                a.q, // a deleted endpoint's jobs are cancelled through the queue
		EndpointChanged:     func(id string) { api.Load().EndpointChanged(id) },
		EndpointDeleted:     func(id string) { api.Load().EndpointDeleted(id); a.forgetSeries(id) },
		Volumes:             mgmtVolumes{a.volumes}, // volumes.go
		RegistryAuthDeleted: a.registryAuthDeleted,  // volumes.go
		HFTokenChanged:      a.hfTokenChanged,       // models.go
	})
	a.builds = a.newBuilder()                                // builds.go
	if err := a.mg.SetupKeys("", operatorHash); err != nil { // key.go
		return nil, err
	}
	hc := httpapi.Config{Settings: cfg.HTTP}
	hc.Builds = a.builds
	hc.Pushes = a.newPushes() // builds.go
	hc.Store, hc.Queue, hc.Mgmt, hc.Clock, hc.Logger = a.db, a.q, a.mg, cfg.Clock, log.With("component", "http")
	hc.APIKeyHash, hc.DataDir, hc.RateLimits, hc.Version = keyHash, cfg.DataDir, cfg.RateLimits, cfg.Version
	hc.WebhookURL, hc.Metrics = a.hooks.CheckURL, a.metrics
	hc.Series = a.series.View
	if hc.PingInterval <= 0 {
		hc.PingInterval = PingInterval
	}
	hc.GPUs = a.gpus.Snapshot
	hc.GPUUsage = cfg.GPUUsage
	if hc.GPUUsage == nil && systemGPUs && cfg.Backend.kind != kubernetes && cfg.Backend.kind != givenBackend && len(a.gpus.Snapshot()) > 0 {
		// No series without GPUs, nor on Kubernetes or a given backend:
		// the GPUs are theirs, which this machine's NVML does not see.
		hc.GPUUsage = gpu.SampleSystem
	}
	if a.sup != nil {
		wireRuntime(&hc, a.sup) // runtime.go
		hc.TestEndpoint = a.tests.endpoint
	} else if a.noRuntime != nil {
		wireNoRuntime(&hc, a.noRuntime) // runtime.go
	}
	if a.models != nil {
		hc.Models = a.models.statuses // models.go
	}
	if a.api, err = httpapi.New(hc); err != nil {
		return nil, err
	}
	api.Store(a.api)
	a.cleaner = a.newCleaner(log.With("component", "cleaner")) // clean.go

	h := a.api.Handler()
	if cfg.WrapHandler != nil {
		h = cfg.WrapHandler(h)
	}
	a.srv = newHTTPServer(cfg.Conn, a.lb.Handler(h))
	if a.workerLn != nil {
		a.hooks.DenyListener(a.workerLn.Addr())
		a.workerSrv = newHTTPServer(cfg.Conn, a.api.WorkerHandler())
	}
	a.services = a.newServices() // app.go
	return a, nil
}

// instance is the label of a data directory's containers: several Berths
// may share one Docker daemon.
func instance(dataDir string) string {
	abs, _ := filepath.Abs(dataDir)
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:6])
}

// Instance is the runtime.LabelDataDir of the containers a Berth with this
// data directory runs.
func Instance(dataDir string) string { return instance(dataDir) }

// also1, also2, also4 and also5 call the composition's hook, then the one a
// Config gave (tests watch the queue through them), if any.
func also1[A any](mine, theirs func(A)) func(A) {
	if theirs == nil {
		return mine
	}
	return func(a A) { mine(a); theirs(a) }
}

func also2[A, B any](mine, theirs func(A, B)) func(A, B) {
	if theirs == nil {
		return mine
	}
	return func(a A, b B) { mine(a, b); theirs(a, b) }
}

func also5[A, B, C, D, E any](mine, theirs func(A, B, C, D, E)) func(A, B, C, D, E) {
	if theirs == nil {
		return mine
	}
	return func(a A, b B, c C, d D, e E) { mine(a, b, c, d, e); theirs(a, b, c, d, e) }
}

func also4[A, B, C, D any](mine, theirs func(A, B, C, D)) func(A, B, C, D) {
	if theirs == nil {
		return mine
	}
	return func(a A, b B, c C, d D) { mine(a, b, c, d); theirs(a, b, c, d) }
}
