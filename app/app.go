// Package app is the composition of a running Berth: the store, the job
// queue, the container runtime, the management rules, the HTTP API with its
// surfaces, the worker-protocol-only listener containers reach, the
// load-balancing proxy, metrics, the webhook guard and the operator's key.
// `berth serve` runs one (main's serve.go translates its flags into a
// Config), and so does every end-to-end test, with test settings passed
// through the same Config: there is no other wiring of the product.
//
// New assembles (opens the database, binds the listeners, connects to
// Docker); Start starts the services in order and serves; Stop stops them
// in reverse, leaving worker and pod containers running for the next
// Start to adopt (services.go, App.newServices).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/builder"
	"berth/cleaner"
	"berth/gpu"
	"berth/httpapi"
	"berth/httplimit"
	"berth/lbproxy"
	"berth/metrics"
	"berth/mgmt"
	"berth/queue"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/runtime/kube"
	"berth/series"
	"berth/store"
)

// Config is a Berth's settings. DataDir and Addr are required; every other
// field has the default berth serve uses.
type Config struct {
	// DataDir holds berth.db, network volumes, pod volumes and prices.json.
	DataDir string
	// Addr is the API's listen address ("127.0.0.1:0" picks a port: see
	// App.Addr). On a loopback or specific address, containers reach the
	// worker protocol through a second listener on the Docker bridge's
	// gateway, same port, serving nothing else.
	Addr    string
	Logger  *slog.Logger    // [slog.Default]
	Clock   clockwork.Clock // every service's clock [real]
	Version string

	// APIKey is the operator's key. "" uses the key stored on first start,
	// or generates one and, once Start serves, stores its hash and prints
	// it once to KeyNotice (a start that fails stores and shows nothing).
	APIKey    string
	KeyNotice io.Writer // [discarded]

	// RateLimits turns on the specification's per-endpoint limits.
	RateLimits bool
	// WebhookAllow opens addresses the default webhook policy forbids
	// (queue.ParseWebhookAllow's entries).
	WebhookAllow []string

	// Backend runs workers and pods [DockerAuto]: DockerRequired,
	// DockerOff, OnKubernetes(…) or OnBackend(…) (backend.go).
	Backend Backend
	// DiscoverGPUs finds the host's GPUs [the backend's: NVML on Docker;
	// without a backend gpu.DiscoverSystem].
	DiscoverGPUs func() ([]gpu.Device, error)
	// GPUUsage samples the GPUs for /metrics [NVML's on Docker when NVML
	// found GPUs; none on Kubernetes or a given backend, whose GPUs this
	// machine's NVML does not see]. Tests give go-nvml's mock (gpu.Sample).
	GPUUsage func() ([]gpu.Usage, error)
	// RemoveContainersOnStop removes this Berth's containers at Stop
	// (tests; berth serve leaves them for the next start to adopt).
	RemoveContainersOnStop bool
	// BeforeServe runs in Start once the queue, balancer and runtime run
	// and before the listeners accept: berth serve --apply makes its file
	// true there, so the first answer already sees it. An error fails
	// Start.
	BeforeServe func(ctx context.Context, a *App) error

	// Settings of the services. Their dependencies (store, queue, runtime,
	// clock, logger, callbacks into other services) are the composition's
	// and are overwritten; the rest (timeouts, intervals, limits) is used
	// as given, zero meaning each package's default. The queue's hooks
	// given here (OnStopPod, OnQueueChange, OnJobFinished, OnWebhook) are
	// called too, after the composition's.
	Queue   queue.Config
	Runtime runtime.Config
	// Models configures the model cache (docs/models.md).
	Models Models
	// Series: the dashboard's plots (its Clock, Endpoints and Sample are
	// the composition's; SampleEvery and MaxEndpoints are used as given).
	Series series.Config
	// HTTP is the API's tunables; its dependencies and the runtime's views
	// are the composition's.
	HTTP httpapi.Settings
	LB   lbproxy.Config
	// Builds is the image builder's settings (limits, timeouts).
	Builds builder.Config
	// BuildkitAddr, when set, is the BuildKit daemon builds run on
	// instead of the Docker daemon's builder (docs/builds.md).
	BuildkitAddr string
	// Conn is the connection limits of both listeners (package
	// httplimit); zero fields are the defaults.
	Conn httplimit.Limits

	// WrapHandler wraps the API's handler (inside the load balancer):
	// tests hold every exchange to the OpenAPI documents. nil: none.
	WrapHandler func(http.Handler) http.Handler
}

// App is one running Berth.
type App struct {
	cfg Config
	log *slog.Logger

	db      *store.DB
	metrics *metrics.Metrics
	series  *series.Series
	hooks   *queue.WebhookGuard
	q       *queue.Service
	mg      *mgmt.Service
	api     *httpapi.Server
	lb      *lbproxy.Balancer
	gpus    *gpu.Allocator
	dock    *docker.Docker // nil without Docker
	// noRuntime: why Docker was not reached (DockerAuto), nil otherwise.
	noRuntime  error
	backend    runtime.Backend     // nil without a runtime
	volumes    runtime.Volumes     // the backend's; without one, host directories (runtime.go)
	sup        *runtime.Supervisor // nil without Docker
	cleaner    *cleaner.Service
	models     *modelSync   // nil: no model cache (no Docker runtime)
	kubeModels *kube.Models // the kubernetes runtime's model cache, nil on others
	builds     *builder.Service
	tests      *testWorkers // builds' test workers (buildtests.go)
	inst       string

	keepKey func() error // stores and shows a generated key once serving (key.go)

	verifyStop context.CancelFunc // the background check of the file
	verified   chan struct{}

	ln, workerLn   net.Listener // workerLn: nil when Addr listens on every interface, or without Docker
	srv, workerSrv *httplimit.Server
	failed         chan error
	services       *services      // Start and Stop (newServices)
	closers        []func()       // undo New, last first
	closed         sync.Once      // Stop's undoing of New
	podExits       sync.WaitGroup // pod exits being recorded (runtime.go)
}

// Addr is the API's address (the port chosen when Addr ends in ":0").
func (a *App) Addr() string { return a.ln.Addr().String() }

// URL is the API's base URL, http://ADDR (a wildcard address as 127.0.0.1).
func (a *App) URL() string {
	addr := a.ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
}

// WorkerAddr is the worker-protocol-only listener's address, "" without one.
func (a *App) WorkerAddr() string {
	if a.workerLn == nil {
		return ""
	}
	return a.workerLn.Addr().String()
}

// Store, Queue, Mgmt, API, Balancer and Supervisor are the parts, for
// tests that watch them; Supervisor and Docker are nil without Docker.
func (a *App) Store() *store.DB                { return a.db }
func (a *App) Queue() *queue.Service           { return a.q }
func (a *App) Mgmt() *mgmt.Service             { return a.mg }
func (a *App) API() *httpapi.Server            { return a.api }
func (a *App) Balancer() *lbproxy.Balancer     { return a.lb }
func (a *App) Supervisor() *runtime.Supervisor { return a.sup }
func (a *App) Docker() *docker.Docker          { return a.dock }
func (a *App) GPUs() *gpu.Allocator            { return a.gpus }
func (a *App) Builds() *builder.Service        { return a.builds }

// KubeModels is the kubernetes runtime's model cache (its download Jobs),
// nil on another runtime.
func (a *App) KubeModels() *kube.Models { return a.kubeModels }

// Instance labels this Berth's containers (runtime.LabelDataDir).
func (a *App) Instance() string { return a.inst }

// Failed delivers a listener's failure while the App runs.
func (a *App) Failed() <-chan error { return a.failed }

// Start starts the services in order (newServices), ending by serving;
// when one fails, those already started are stopped, last first, and the
// error returned (Stop then only undoes New). ctx bounds the start-up only.
func (a *App) Start(ctx context.Context) error { return a.services.Start(ctx) }

// newServices is a Berth's services in the order they start; they stop in
// reverse. The order is the shutdown's: the listeners stop accepting last,
// after the queue (whose Stop wakes every long poll, so the drain does not
// wait for them), and their drain is the front's, whose place in the list
// is early although it starts serving last (serve); the database closes
// after every service (Stop).
func (a *App) newServices() *services {
	l := []service{
		// The balancer's health checks (a pool still empty) and the
		// listeners' drain: requests are answered until everything after
		// has stopped.
		{name: "front", start: func(context.Context) error { a.lb.Start(); return nil }, stop: a.stopListeners},
		// The dashboard's series: restored before the first job ends,
		// saved once the queue stopped (no job ends after).
		{name: "series", start: func(context.Context) error { a.restoreSeries(); return nil }, // series.go
			stop: func(context.Context) error {
				// What changed since the last minute's save.
				if err := a.saveSeries(false); err != nil {
					a.log.Warn("the dashboard's series of the last minute are lost", "err", err)
				}
				return nil
			}},
		{name: "queue", start: a.q.Start, stop: func(context.Context) error { a.q.Stop(); return nil }},
		// The sampler reads the queue: its first sample sees the jobs loaded.
		{name: "sampler", start: func(context.Context) error { a.series.Start(); return nil },
			stop: func(context.Context) error { a.series.Stop(); return nil }},
	}
	if a.sup != nil || a.cfg.Backend.off() {
		// Before the runtime adopts what runs: close what stopped meanwhile.
		l = append(l, service{name: "usage repair", start: func(ctx context.Context) error {
			if err := a.repairUsage(ctx, a.backend); err != nil {
				a.log.Error("repair open usage intervals", "err", err)
			}
			return nil
		}})
	}
	if a.sup != nil {
		// Stopped before the queue (runtime.Supervisor.Stop); its
		// containers keep running for the next start to adopt.
		l = append(l, service{name: "runtime",
			start: func(ctx context.Context) error {
				if err := a.sup.Start(ctx); err != nil {
					return fmt.Errorf("start the container runtime: %w", err)
				}
				return nil
			},
			stop: func(ctx context.Context) error {
				a.sup.Stop()
				a.podExits.Wait()
				if a.cfg.RemoveContainersOnStop {
					return a.removeContainers(ctx)
				}
				return nil
			}})
	}
	if a.models != nil {
		l = append(l, service{name: "models", start: func(context.Context) error { a.models.start(); return nil },
			stop: func(context.Context) error { a.models.stop(); return nil }})
	}
	l = append(l,
		// Its loop outlives the start's ctx; its last word is the stop time.
		service{name: "cleaner", start: func(context.Context) error { return a.cleaner.Start(context.Background()) },
			stop: func(context.Context) error {
				a.cleaner.Stop()
				if err := store.StampAlive(a.db, a.cfg.Clock.Now()); err != nil {
					a.log.Warn("stamp the stop time", "err", err)
				}
				return nil
			}},
		service{name: "builds", start: func(context.Context) error { return a.builds.Start() },
			stop: func(context.Context) error { a.builds.Stop(); return nil }},
		service{name: "verify", start: func(context.Context) error { a.verifyInBackground(); return nil },
			stop: func(context.Context) error { a.verifyStop(); <-a.verified; return nil }},
	)
	if a.cfg.BeforeServe != nil {
		l = append(l, service{name: "before serve", start: func(ctx context.Context) error { return a.cfg.BeforeServe(ctx, a) }})
	}
	// Accepting is last; stopping is the front's (above).
	l = append(l, service{name: "serve", start: a.startServing})
	return &services{list: l}
}

// startServing accepts on the listeners and keeps a generated key.
func (a *App) startServing(context.Context) error {
	if a.workerLn != nil {
		a.log.Info("worker protocol for containers", "addr", a.workerLn.Addr().String())
		go a.serve(a.workerSrv, a.workerLn)
	}
	go a.serve(a.srv, a.ln)
	if a.keepKey != nil {
		// The listeners accept: a generated key is stored and shown now,
		// not before a start that might still fail.
		if err := a.keepKey(); err != nil {
			return err
		}
		a.keepKey = nil
	}
	a.log.Info("berth serving", "addr", a.ln.Addr().String(), "data", a.cfg.DataDir, "version", a.cfg.Version, "rateLimits", a.cfg.RateLimits)
	return nil
}

// stopListeners stops the servers, waiting for their requests until ctx
// ends — then cancelling the work of those still running and closing
// their connections rather than waiting for it — and then the balancer.
func (a *App) stopListeners(ctx context.Context) error {
	c, ab := a.srv.Stop(ctx)
	if a.workerSrv != nil {
		wc, wab := a.workerSrv.Stop(ctx)
		c, ab = c+wc, ab+wab
	}
	if c > 0 {
		a.log.Warn("requests still running at shutdown were cancelled", "requests", c, "abandoned", ab)
	}
	a.lb.Stop()
	return nil
}

// verifyDelay is how long after a start the background check begins.
const verifyDelay = 10 * time.Second

// verifyInBackground decodes every record and, when the clean-close marker
// let the open skip it, walks every page, while Berth serves (store.Verify):
// what it finds is logged with its bucket and key and counted on /metrics;
// a broken page stops writes. A million jobs take seconds, so the start
// does not wait for it: it begins verifyDelay after the start.
func (a *App) verifyInBackground() {
	ctx, cancel := context.WithCancel(context.Background())
	a.verifyStop, a.verified = cancel, make(chan struct{})
	go func() {
		defer close(a.verified)
		// Not while the start's own work (the queue's id map, the first
		// requests) runs: the check can wait, a restart cannot.
		select {
		case <-time.After(verifyDelay):
		case <-ctx.Done():
			return
		}
		start := time.Now()
		problems := 0
		n, err := a.db.Verify(ctx, func(p store.Problem) {
			if problems++; problems <= 100 {
				a.log.Error("database damage found", "bucket", p.Bucket, "key", p.Key, "page", p.Page, "err", p.Err)
			}
			if !p.Page && (p.Bucket == store.Jobs || p.Bucket == store.JobInputs) {
				// Its key is the job's id: the job leaves the queue and
				// counts, and its reads name the damage.
				a.q.RecordDamaged(p.Key, &store.DamagedError{Bucket: p.Bucket, Key: p.Key, Why: p.Err.Error()})
			}
		})
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.Error("database check", "err", err)
		case problems > 0:
			a.log.Error("database check found damage: run 'berth check' (with Berth stopped) for the full list, then restore a backup",
				"records", n, "problems", problems, "took", time.Since(start).Round(time.Millisecond))
		case err == nil:
			a.log.Info("database checked", "records", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}()
}

func (a *App) serve(srv *httplimit.Server, ln net.Listener) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		select {
		case a.failed <- fmt.Errorf("serve %s: %w", ln.Addr(), err):
		default:
		}
	}
}

// Stop stops the services that started, in reverse (newServices): the
// runtime (its containers keep running), the queue (which wakes every long
// poll), then the servers, waiting for their requests until ctx ends — and
// closes the database. It undoes New too, so it is the one call after New
// whether or not Start ran, or failed; a second Stop does nothing.
func (a *App) Stop(ctx context.Context) error {
	err := a.services.Stop(ctx)
	a.closed.Do(func() {
		// Requests are over: the keys' last uses are written before the
		// file closes (a write a request started would race the close).
		a.mg.StopKeyUses()
		for i := len(a.closers) - 1; i >= 0; i-- {
			a.closers[i]()
		}
		err = errors.Join(err, a.db.Close())
	})
	return err
}

// removeContainers removes every container labelled with this instance.
func (a *App) removeContainers(ctx context.Context) error {
	infos, err := a.backend.List(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, in := range infos {
		if err := a.backend.Remove(ctx, in.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", in.ID, err))
		}
	}
	return errors.Join(errs...)
}

// newHTTPServer serves h with the connection limits of every request
// (package httplimit): header, body and write deadlines, unread bodies,
// idle connections — whatever route, method or key a request has.
func newHTTPServer(l httplimit.Limits, h http.Handler) *httplimit.Server {
	return l.NewServer(h)
}
