// Package httpapi serves Berth's HTTP routes: the /v2/{endpointId} job API
// and worker protocol, the OpenAI-compatible routes, the OpenAPI document
// and /metrics, with the server's limits, deadlines and key checks; and it
// mounts the management surfaces, which live in their own packages: REST
// v1 (httpapi/v1api), REST v2 (httpapi/v2api) and GraphQL (graphqlapi).
// Handlers are built by constructors that take their dependencies.
package httpapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/jonboulle/clockwork"

	"berth/dashboard"
	"berth/gpu"
	"berth/graphqlapi"
	"berth/httpapi/internal/httpx"
	"berth/httpapi/v1api"
	"berth/httpapi/v2api"
	"berth/httplimit"
	"berth/metrics"
	"berth/mgmt"
	"berth/queue"
	"berth/series"
	"berth/store"
)

// Config holds a Server's dependencies.
// Settings are a Server's tunables, what app.Config.HTTP carries; zero
// fields are the defaults. The rest of Config is the composition's
// (package app sets every field): no caller plants a runtime view.
type Settings struct {
	// KeyRequestsPer10s caps each API key's requests in any 10 seconds
	// (authz.go); 0: DefaultKeyRequestsPer10s when RateLimits is on, none
	// otherwise; negative: none.
	KeyRequestsPer10s int
	RequestsPerWorker int           // dynamic limit per running worker per 10 s [100]
	StreamHold        time.Duration // /stream hold while empty [10s]
	PingInterval      time.Duration // RUNPOD_PING_INTERVAL given to workers [10s]

	// BackupReserve is the free space GET /v1/backup leaves in the data
	// directory after its temporary copy [256 MiB].
	BackupReserve int64
	// JobListBytes bounds the inputs, outputs and errors one job list
	// (GET /v1/endpoints/ID/jobs) carries [32 MiB]: past it, jobs come
	// without them (dataOmitted).
	JobListBytes int

	// Long-poll caps (limits.go): MaxLongPollsPerWorker [8] and
	// MaxLongPollsPerKey [10000] concurrent long polls held for one worker
	// id or one key. Body and write deadlines of every request are the
	// HTTP server's (package httplimit), applied outside the router.
	MaxLongPollsPerWorker int
	MaxLongPollsPerKey    int

	// GraphQL bounds what GraphQL requests cost, alone and together
	// (graphqlapi.Limits); zero fields are the defaults.
	GraphQL graphqlapi.Limits
	// ListShares bounds the answers that grow with the data built at once
	// (answers.go) [64: 8 job lists, or 64 pod or billing lists];
	// ListWait is how long one waits for room [2s].
	ListShares int
	ListWait   time.Duration
}

type Config struct {
	Store *store.DB
	Queue *queue.Service
	// Mgmt is the management rules every surface calls. Required (app
	// makes it); its endpoint hooks must reach the Server's
	// EndpointChanged and EndpointDeleted.
	Mgmt   *mgmt.Service
	Logger *slog.Logger
	Clock  clockwork.Clock
	// APIKeyHash is the sha256 hex of an All key that is not stored
	// (BERTH_API_KEY); the stored keys are Mgmt's (mgmt.SetupKeys).
	APIKeyHash string
	Settings

	RateLimits bool // the spec's per-endpoint limits
	Version    string

	// Workers adds the runtime's container states to /health. Optional.
	Workers func(endpointID string) queue.WorkerCounts
	// EndpointChanged tells the runtime an endpoint was created or changed.
	EndpointChanged func(endpointID string)

	// DataDir holds network volumes (volumes/<id>) and the price table
	// (prices.json). Optional: defaults to the database file's directory.
	DataDir string
	// WorkerInfo is the runtime's worker containers of an endpoint, shown
	// by every management surface. Optional.
	WorkerInfo func(endpointID string) []mgmt.WorkerInfo
	// EndpointDeleted tells the runtime an endpoint was deleted (its jobs
	// are already cancelled): stop its workers and forget their ids.
	// Optional.
	EndpointDeleted func(endpointID string)

	// GPUs lists this host's GPUs with their holders (GET /v1/gpus).
	// Optional: nil lists none.
	GPUs func() []gpu.Status
	// WorkerLogs and PodLogs return a container's log as text (tail > 0:
	// its last tail lines; follow: stream until ctx ends or the container
	// stops; jobID: only that job's runpod JSON lines). They wrap
	// mgmt.ErrNoSuchWorker / ErrNoSuchPod when there is no such container.
	// Optional: nil answers 503.
	WorkerLogs func(ctx context.Context, endpointID, workerID string, follow bool, tail int, jobID string) (io.ReadCloser, error)
	// Builds runs image builds (package builder). Optional: without it
	// a new build answers 503.
	Builds v2api.Builds
	// Pushes takes push-to-deploy webhook deliveries (*builder.Pushes).
	// Optional: without it the webhook route answers 503.
	Pushes  v2api.GitPushes
	PodLogs func(ctx context.Context, podID string, follow bool, tail int) (io.ReadCloser, error)
	// WebhookURL refuses a job's webhook URL at submission (400), e.g.
	// queue.WebhookGuard.CheckURL. Optional.
	WebhookURL func(rawURL string) error

	// EndpointStatus is the runtime's status of an endpoint, shown as the
	// endpoint's "status" (JSON as is); its "reason" (why jobs are held
	// back) is added to /health. Optional.
	EndpointStatus func(endpointID string) any
	// TestEndpoint finds a build's test worker's endpoint (never stored:
	// builder tests, app/buildtests.go); the worker protocol, and only
	// it, serves its worker. Optional.
	TestEndpoint func(id string) (store.Endpoint, bool)
	// Models is an endpoint's model references with their downloads,
	// shown as the endpoint's "models" on v1, v2 and GraphQL (nil: it
	// names none). Optional.
	Models func(e store.Endpoint) []mgmt.ModelStatus

	// Metrics holds the series other packages feed (metrics.New; pass the
	// one whose hooks were wired). Optional: New makes one.
	Metrics *metrics.Metrics
	// GPUUsage samples the GPUs for /metrics. Optional: nil (no GPUs)
	// leaves the GPU series out.
	GPUUsage func() ([]gpu.Usage, error)
	// Series is an endpoint's last hour or day for the dashboard's plots
	// (GET /v1/endpoints/ID/metrics; package series). Optional: nil
	// answers 503.
	Series func(endpointID string, w series.Window) series.View
}

// Server is Berth's HTTP API.
type Server struct {
	cfg    Config
	router *mux.Router
	limits *limiter
	polls  *pollLimits

	epMu    sync.RWMutex
	epCache map[string]*store.Endpoint
	epGen   uint64 // bumped by forgetEndpoint so a stale read is not cached

	lists     *httplimit.Gate // answers.go
	keyLimits *keyLimiter     // authz.go

	mg *mgmt.Service // the management rules every API surface calls
	v1 *v1api.API    // REST v1 management
	v2 *v2api.API    // REST v2 management
}

// HashKey returns the stored form of an API key.
func HashKey(key string) string { return mgmt.HashKey(key) }

// DefaultKeyRequestsPer10s is each key's request limit when --rate-limits
// is on and no other is given.
const DefaultKeyRequestsPer10s = 5000

// New builds the Server and its routes. Store, Queue and Mgmt are
// required: the composition (package app) makes them.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Queue == nil || cfg.Mgmt == nil {
		return nil, errors.New("httpapi: Config.Store, Queue and Mgmt are required (package app composes them)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.RequestsPerWorker <= 0 {
		cfg.RequestsPerWorker = 100
	}
	if cfg.StreamHold <= 0 {
		cfg.StreamHold = 10 * time.Second
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 10 * time.Second
	}
	if cfg.MaxLongPollsPerWorker <= 0 {
		cfg.MaxLongPollsPerWorker = 8
	}
	if cfg.MaxLongPollsPerKey <= 0 {
		cfg.MaxLongPollsPerKey = 10000
	}
	if cfg.ListShares <= 0 {
		cfg.ListShares = defaultListShares
	}
	if cfg.ListWait <= 0 {
		cfg.ListWait = defaultListWait
	}
	s := &Server{cfg: cfg, epCache: map[string]*store.Endpoint{}, lists: newListGate(cfg.ListShares)}
	s.mg = cfg.Mgmt
	if cfg.APIKeyHash != "" {
		if err := s.mg.SetupKeys(cfg.APIKeyHash, ""); err != nil {
			cfg.Logger.Error("API keys not loaded", "err", err)
		}
	}
	if cfg.KeyRequestsPer10s == 0 && cfg.RateLimits {
		cfg.KeyRequestsPer10s = DefaultKeyRequestsPer10s
	}
	s.cfg = cfg
	s.keyLimits = newKeyLimiter(cfg.KeyRequestsPer10s)
	s.v1 = s.newV1()
	s.v2 = s.newV2()
	s.limits = newLimiter(cfg.RateLimits, cfg.RequestsPerWorker, s.workerCount)
	s.polls = newPollLimits(cfg.MaxLongPollsPerWorker, cfg.MaxLongPollsPerKey)
	s.watchMetrics()
	s.routes()
	return s, nil
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return s.router }

// newRouter is a router with the server's answers to unknown routes and
// methods and its middleware: request deadlines, then panic recovery.
func (s *Server) newRouter() *mux.Router {
	r := mux.NewRouter()
	notAllowed := func(w http.ResponseWriter, req *http.Request, allow []string) {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeErr(w, req, http.StatusMethodNotAllowed, "method "+req.Method+" not allowed on "+req.URL.Path+" (allowed: "+strings.Join(allow, ", ")+")")
	}
	// gorilla/mux reports a method mismatch inside a subrouter (/v1,
	// /v2/…, the job API) as "not found": the path is tried again with
	// each method, and a path some method matches answers 405.
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if allow := allowedMethods(r, req); len(allow) > 0 {
			notAllowed(w, req, allow)
			return
		}
		writeErr(w, req, http.StatusNotFound, "no such route: "+req.Method+" "+req.URL.Path)
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		notAllowed(w, req, allowedMethods(r, req))
	})
	r.Use(s.recoverer, s.authz) // authz.go: every route's key check
	return r
}

// routeMethods are the methods allowedMethods tries.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// allowedMethods are the methods of routeMethods with which req's path
// matches a route of r (matching runs no handler).
func allowedMethods(r *mux.Router, req *http.Request) []string {
	var out []string
	for _, m := range routeMethods {
		if m == req.Method {
			continue
		}
		probe := req.Clone(req.Context())
		probe.Method = m
		var match mux.RouteMatch
		if r.Match(probe, &match) && match.MatchErr == nil {
			out = append(out, m)
		}
	}
	return out
}

func (s *Server) routes() {
	r := s.newRouter()
	admin := func(name string, h http.HandlerFunc) http.Handler { return s.instrument(name, h) } // keys: authz.go

	// Routes are matched in order: the hot paths (worker protocol, run)
	// come first; gorilla/mux tries one regexp per route.
	r.Handle("/metrics", s.cfg.Metrics.Handler()).Methods(http.MethodGet)
	// REST v2 management (/v2/pods, /v2/serverless…), before the job API
	// so its names are not taken for endpoint ids.
	s.v2.Mount(r)

	// Worker protocol and job API (/v2/{endpointId}). The worker routes
	// are one table (workerproto.go), which WorkerHandler serves too.
	job := func(op string, h http.HandlerFunc) http.Handler {
		return s.instrument(op, s.withEndpoint(s.limits.wrap(op, s.polls.wrap(op, false, h))))
	}
	v2 := r.PathPrefix("/v2/{endpointId}").Subrouter()
	s.workerProtocol(v2)
	v2.Handle("/run", job("run", s.run)).Methods(http.MethodPost)
	v2.Handle("/runsync", job("runsync", s.runsync)).Methods(http.MethodPost)
	v2.Handle("/status/{jobId}", job("status", s.status)).Methods(http.MethodGet, http.MethodPost)
	v2.Handle("/stream/{jobId}", job("stream", s.stream)).Methods(http.MethodGet, http.MethodPost)
	v2.Handle("/status-sync/{jobId}", job("status-sync", s.statusSync)).Methods(http.MethodGet, http.MethodPost)
	v2.Handle("/cancel/{jobId}", job("cancel", s.cancel)).Methods(http.MethodPost)
	v2.Handle("/health", job("health", s.healthWithReason)).Methods(http.MethodGet)
	v2.Handle("/retry/{jobId}", job("retry", s.retry)).Methods(http.MethodPost)
	v2.Handle("/purge-queue", job("purge-queue", s.purge)).Methods(http.MethodPost)
	s.openaiRoutes(v2, job) // openai.go

	// GraphQL (runpod-python's and runpodctl's management calls): graphql.go.
	s.graphqlRoute(r, admin)

	// REST v1 management and Berth's /v1 extensions (package v1api); the
	// document of every route outside REST v2 (openapi.go).
	// The documents are served without a key, as RunPod serves its own
	// (generators and editors fetch them without one); they hold no data.
	r.Handle("/v1/openapi.json", s.instrument("openapi", http.HandlerFunc(s.openapiDoc))).Methods(http.MethodGet)
	r.Handle("/v1/docs", s.instrument("docs", http.HandlerFunc(s.docsPage))).Methods(http.MethodGet)
	s.v1.Mount(r)

	// The web dashboard: a static page without data (every datum it shows
	// is fetched from /v1 and /v2 with the key). No Methods: it is not an
	// API route, and answers GET and HEAD only.
	r.Handle("/", dashboard.Handler())
	r.PathPrefix("/ui/").Handler(dashboard.Handler())
	s.router = r
}

// ---- auth ----

// apiKey accepts "Bearer KEY" and the bare "KEY" (RunPod's docs use both).
func apiKey(r *http.Request) string {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return h
}

// workerAuth lets an All key or the worker's own key through; a worker
// key opens only its own endpoint's worker routes, under its own id. An
// API key of another level is refused naming its level (403).
func (s *Server) workerAuth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := apiKey(r)
		if p, err := s.mg.Authenticate(key); err == nil {
			if err := mgmt.Access(p, mgmt.ScopeWorker, "", mgmt.Write, r.Method+" "+r.URL.Path); err != nil {
				writeErr(w, r, http.StatusForbidden, err.Error())
				return
			}
			h(w, r)
			return
		}
		wid, ep, ok := s.cfg.Queue.AuthWorker(key)
		vars := mux.Vars(r)
		if ok && (vars["workerId"] == "$RUNPOD_POD_ID" || vars["workerId"] == "$ID") {
			// A template the SDK left unsubstituted: the key says who it is.
			vars["workerId"] = wid
		}
		if !ok || ep != vars["endpointId"] || wid != vars["workerId"] {
			writeErr(w, r, http.StatusUnauthorized, "missing or invalid worker key")
			return
		}
		h(w, r)
	}
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.cfg.Logger.Error("handler panic", append(routeAttrs(r), "path", r.URL.Path, "panic", v)...)
				writeErr(w, r, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// ---- endpoints cache ----

func (s *Server) endpoint(id string) (*store.Endpoint, error) {
	s.epMu.RLock()
	e, ok := s.epCache[id]
	gen := s.epGen
	s.epMu.RUnlock()
	if ok {
		return e, nil
	}
	var rec store.Endpoint
	err := s.cfg.Store.View(func(tx *store.Tx) error { return tx.Get(store.Endpoints, id, &rec) })
	if err != nil {
		return nil, err
	}
	s.epMu.Lock()
	if s.epGen == gen {
		s.epCache[id] = &rec
	}
	s.epMu.Unlock()
	return &rec, nil
}

// PruneRateLimits drops the rate-limit buckets idle for a minute (deleted
// endpoints' among them); the cleaner calls it.
func (s *Server) PruneRateLimits() int { return s.limits.prune(time.Now()) }

func (s *Server) forgetEndpoint(id string) {
	s.epMu.Lock()
	delete(s.epCache, id)
	s.epGen++
	s.epMu.Unlock()
}

type epCtxKey struct{}

func (s *Server) withEndpoint(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := mux.Vars(r)["endpointId"]
		e, err := s.endpoint(id)
		if errors.Is(err, store.ErrNotFound) {
			writeErr(w, r, http.StatusNotFound, "endpoint "+mgmt.ShortID(id)+" not found")
			return
		}
		if err != nil {
			s.internal(w, r, err)
			return
		}
		h(w, withValue(r, epCtxKey{}, e))
	}
}

// withWorkerEndpoint is withEndpoint for the worker protocol: a build's
// test worker's endpoint, which is no stored endpoint, is found too.
func (s *Server) withWorkerEndpoint(h http.HandlerFunc) http.HandlerFunc {
	stored := s.withEndpoint(h)
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.TestEndpoint != nil {
			if e, ok := s.cfg.TestEndpoint(mux.Vars(r)["endpointId"]); ok {
				h(w, withValue(r, epCtxKey{}, &e))
				return
			}
		}
		stored(w, r)
	}
}

func endpointOf(r *http.Request) *store.Endpoint {
	return r.Context().Value(epCtxKey{}).(*store.Endpoint)
}

// ---- responses ----

func writeJSON(w http.ResponseWriter, code int, v any) { httpx.WriteJSON(w, code, v) }

// writeErr answers with RunPod's error shapes: management (/v1) errors are
// {"message": …}; job API and worker errors are {"error": …}; GraphQL's are
// {"data": null, "errors": [{"message": …}]}.
func writeErr(w http.ResponseWriter, r *http.Request, code int, msg string) {
	msg = mgmt.ClipMessage(msg) // nothing a client sent is echoed at length
	if r.URL.Path == "/graphql" {
		graphqlapi.WriteError(w, code, msg)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		writeJSON(w, code, map[string]string{"message": msg})
		return
	}
	writeJSON(w, code, map[string]string{"error": msg})
}

func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.cfg.Logger.Error("request failed", append(routeAttrs(r), "path", r.URL.Path, "err", err)...)
	// A full disk or a damaged file is the server's condition, answered
	// 503 (with Retry-After when it may pass); nothing was changed.
	code := httpx.FailureCode(w, err)
	writeErr(w, r, code, httpx.FailureMessage(code, err))
}

// routeAttrs are the log attributes of a request's ids: endpoint, job,
// worker, pod.
func routeAttrs(r *http.Request) []any {
	var out []any
	for _, kv := range [][2]string{{"endpointId", "endpoint"}, {"jobId", "job"}, {"workerId", "worker"}, {"podId", "pod"}} {
		if v := mux.Vars(r)[kv[0]]; v != "" {
			out = append(out, kv[1], v)
		}
	}
	return out
}

func (s *Server) workerCount(endpointID string) int {
	h := s.cfg.Queue.Health(endpointID)
	return h.Workers.Running + h.Workers.Idle
}

// ---- metrics ----

// watchMetrics registers the series /metrics reads from this server at
// scrape time (package metrics).
func (s *Server) watchMetrics() {
	if s.cfg.Metrics == nil {
		s.cfg.Metrics = metrics.New()
	}
	s.cfg.Metrics.Watch(metrics.Sources{Store: s.cfg.Store, Queue: s.cfg.Queue, Health: s.health,
		LongPolls: s.polls.Held, GPUUsage: s.cfg.GPUUsage, Logger: s.cfg.Logger})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) instrument(route string, h http.Handler) http.Handler {
	series := s.cfg.Metrics.Route(route)
	gated := s.gateList(route, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: 200}
		gated.ServeHTTP(rec, r)
		series.Observe(rec.code, time.Since(start))
	})
}
