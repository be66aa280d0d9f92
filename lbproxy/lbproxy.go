// Package lbproxy serves load-balancing endpoints: requests go straight to
// the workers' own HTTP servers, with no queue. It addresses an endpoint by
// Host (ENDPOINT_ID.<domain>) or by path (/lb/ENDPOINT_ID/…), checks the API
// key (not forwarded), health-checks every worker (HEALTH_CHECK_PATH on
// PORT_HEALTH: 200 healthy, 204 initializing, anything else out of the
// pool), picks the least-loaded healthy worker (or the one X-Runpod-Worker-Id
// asks for) and proxies with httputil.ReverseProxy (streaming bodies,
// WebSocket upgrades).
//
// Scaling is the runtime's: [Balancer.Queue] wraps the runtime's queue view
// so that, for load-balancing endpoints, requests waiting for a worker and
// in-flight requests drive the REQUEST_COUNT scaler, and a worker counts as
// "seen" once its health check answers 200.
package lbproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"berth/queue"
	"berth/store"
)

// Defaults.
const (
	DefaultColdStartWait  = 2 * time.Minute
	DefaultTimeout        = 330 * time.Second // 5.5 min
	DefaultMaxBody        = 30 << 20
	DefaultProbeInterval  = time.Second
	DefaultUnhealthyAfter = time.Minute
	defaultPort           = "80"
	defaultHealthPath     = "/ping"
	workerHeader          = "X-Runpod-Worker-Id"
)

// WorkerNet is where a worker's server listens (runtime.Supervisor.WorkerNet).
type WorkerNet struct {
	IP  string
	Env map[string]string
}

// Config holds a Balancer's dependencies.
type Config struct {
	Logger *slog.Logger
	// Endpoint reads an endpoint (an error wrapping store.ErrNotFound when
	// there is none).
	Endpoint func(id string) (store.Endpoint, error)
	// WorkerNet finds a worker container's address; it fails until the
	// container exists.
	WorkerNet func(ctx context.Context, workerID string) (WorkerNet, error)
	// Wake asks the runtime to rescale an endpoint now.
	Wake func(endpointID string)
	// Authorize checks the API key of a request to an endpoint: 0, or
	// the status (401, 403, 429) and message of its refusal.
	Authorize func(r *http.Request, endpointID string) (int, string)
	// Domain: ENDPOINT_ID.<Domain> in Host addresses an endpoint ("" turns
	// Host addressing off).
	Domain string

	ColdStartWait  time.Duration // a request waits this long for a healthy worker [2m]
	StrictWait     time.Duration // a strict-affinity request waits this long for its worker [5m]
	Timeout        time.Duration // until the worker's response headers [5m30s]
	MaxBody        int64         // request body limit; responses too [30 MB]
	ProbeInterval  time.Duration // health checks [1s]
	UnhealthyAfter time.Duration // an unhealthy worker is reported lost after this [1m]
}

type workerState int

const (
	initializing workerState = iota
	healthy
	unhealthy
)

func (s workerState) String() string {
	return [...]string{"initializing", "healthy", "unhealthy"}[s]
}

type lbWorker struct {
	id, ep     string
	addr       string // ip:port, "" until known
	healthURL  string
	state      workerState
	inflight   int
	lastOK     time.Time
	badSince   time.Time
	gone       bool
	goneReason string
	frozen     bool // paused by FlashBoot: not probed, not picked
}

// Balancer is the proxy and the load-balancing endpoints' worker pool.
type Balancer struct {
	cfg       Config
	log       *slog.Logger
	transport *http.Transport
	client    *http.Client

	mu      sync.Mutex
	workers map[string]*lbWorker
	waiting map[string][]time.Time // endpoint → arrival of requests waiting for a worker
	changed chan struct{}          // closed and replaced when the pool changes

	stop chan struct{}
	wg   sync.WaitGroup
}

// New makes a Balancer; Start runs its health checks.
func New(cfg Config) *Balancer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ColdStartWait <= 0 {
		cfg.ColdStartWait = DefaultColdStartWait
	}
	if cfg.StrictWait <= 0 {
		cfg.StrictWait = 5 * time.Minute // RunPod: strict requests wait up to ~5 min
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.UnhealthyAfter <= 0 {
		cfg.UnhealthyAfter = DefaultUnhealthyAfter
	}
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	return &Balancer{cfg: cfg, log: cfg.Logger, transport: tr,
		client:  &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 3 * time.Second},
		workers: map[string]*lbWorker{}, waiting: map[string][]time.Time{}, changed: make(chan struct{}),
		stop: make(chan struct{})}
}

// Start runs the health checks until Stop.
func (b *Balancer) Start() {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(b.cfg.ProbeInterval)
		defer t.Stop()
		for {
			b.probeAll()
			select {
			case <-t.C:
			case <-b.stop:
				return
			}
		}
	}()
}

// Stop ends the health checks.
func (b *Balancer) Stop() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	b.wg.Wait()
	b.transport.CloseIdleConnections()
}

func (b *Balancer) changedLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// probeAll health-checks every worker (in parallel) and updates the pool.
func (b *Balancer) probeAll() {
	b.mu.Lock()
	var ws []*lbWorker
	for _, w := range b.workers {
		if !w.gone && !w.frozen {
			ws = append(ws, w)
		}
	}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); b.probe(w) }()
	}
	wg.Wait()
}

func (b *Balancer) probe(w *lbWorker) {
	b.mu.Lock()
	healthURL := w.healthURL
	b.mu.Unlock()
	if healthURL == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		n, err := b.cfg.WorkerNet(ctx, w.id)
		cancel()
		if err != nil {
			return // no container yet
		}
		port := envOr(n.Env, "PORT", defaultPort)
		hport := envOr(n.Env, "PORT_HEALTH", port)
		path := envOr(n.Env, "HEALTH_CHECK_PATH", defaultHealthPath)
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		b.mu.Lock()
		w.addr = net.JoinHostPort(n.IP, port)
		w.healthURL = "http://" + net.JoinHostPort(n.IP, hport) + path
		healthURL = w.healthURL
		b.mu.Unlock()
	}
	code := 0
	if res, err := b.client.Get(healthURL); err == nil {
		code = res.StatusCode
		res.Body.Close()
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.gone || w.frozen {
		return
	}
	before := w.state
	switch code {
	case http.StatusOK:
		w.state, w.lastOK, w.badSince = healthy, now, time.Time{}
	case http.StatusNoContent:
		if w.state == healthy {
			w.state, w.badSince = unhealthy, now // a worker back to initializing is out of the pool
		}
	default:
		if w.state == healthy || (w.state == unhealthy && w.badSince.IsZero()) {
			w.state, w.badSince = unhealthy, now
		}
	}
	if w.state != before {
		b.log.Info("load-balancing worker health", "endpoint", w.ep, "worker", w.id, "state", w.state.String(), "status", code)
		b.changedLocked()
		if b.cfg.Wake != nil {
			go b.cfg.Wake(w.ep)
		}
	}
}

func envOr(env map[string]string, k, def string) string {
	if v := strings.TrimSpace(env[k]); v != "" {
		return v
	}
	return def
}

// ---- the runtime's view (runtime.Queue) ----

// RuntimeQueue is what the runtime needs from the queue (runtime.Queue).
type RuntimeQueue interface {
	Stats(endpointID string) queue.QueueStats
	RegisterWorker(endpointID string, external bool) (queue.Registration, error)
	WorkerGone(workerID, reason string)
	ForgetWorker(workerID string)
	Workers(endpointID string) []queue.WorkerLoad
	PendingStops(workerID string) []string
	SetFrozen(workerID string, frozen bool)
	DrainWorker(workerID string) int
}

// Queue wraps the runtime's queue: load-balancing endpoints are answered
// from the pool, every other endpoint by q.
func (b *Balancer) Queue(q RuntimeQueue) RuntimeQueue { return &adapter{q: q, b: b} }

type adapter struct {
	q RuntimeQueue
	b *Balancer
}

func (a *adapter) isLB(ep string) bool {
	e, err := a.b.cfg.Endpoint(ep)
	return err == nil && e.LoadBalancer()
}

func (a *adapter) lbWorker(id string) bool {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	return a.b.workers[id] != nil
}

func (a *adapter) Stats(ep string) queue.QueueStats {
	if !a.isLB(ep) {
		return a.q.Stats(ep)
	}
	e, _ := a.b.cfg.Endpoint(ep)
	sv := max(e.ScalerValue, 1)
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	inflight, ready := 0, 0
	for _, w := range b.workers {
		if w.ep == ep && !w.gone {
			inflight += w.inflight
			if w.state == healthy {
				ready++
			}
		}
	}
	waits := b.waiting[ep]
	// REQUEST_COUNT wants ceil((queued + in progress) / scalerValue) while
	// something is queued: requests waiting for a worker, and in-flight
	// requests beyond scalerValue per healthy worker, count as queued.
	over := max(inflight-ready*sv, 0)
	st := queue.QueueStats{InQueue: len(waits) + over, InProgress: inflight - over}
	if len(waits) > 0 {
		st.OldestWait = time.Since(waits[0])
	}
	return st
}

func (a *adapter) RegisterWorker(ep string, external bool) (queue.Registration, error) {
	if external || !a.isLB(ep) {
		return a.q.RegisterWorker(ep, external)
	}
	id := queue.NewID(14)
	a.b.mu.Lock()
	a.b.workers[id] = &lbWorker{id: id, ep: ep}
	a.b.mu.Unlock()
	return queue.Registration{WorkerID: id, EndpointID: ep, Key: queue.NewID(32)}, nil
}

func (a *adapter) WorkerGone(id, reason string) {
	if !a.lbWorker(id) {
		a.q.WorkerGone(id, reason)
		return
	}
	a.b.mu.Lock()
	if w := a.b.workers[id]; w != nil {
		w.gone, w.goneReason = true, reason
		a.b.changedLocked()
	}
	a.b.mu.Unlock()
}

func (a *adapter) ForgetWorker(id string) {
	if !a.lbWorker(id) {
		a.q.ForgetWorker(id)
		return
	}
	a.b.mu.Lock()
	if w := a.b.workers[id]; w != nil {
		w.gone = true
		if w.goneReason == "" {
			w.goneReason = "the worker was removed"
		}
		delete(a.b.workers, id)
		a.b.changedLocked()
	}
	a.b.mu.Unlock()
}

func (a *adapter) Workers(ep string) []queue.WorkerLoad {
	if !a.isLB(ep) {
		return a.q.Workers(ep)
	}
	now := time.Now()
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	var out []queue.WorkerLoad
	for _, w := range a.b.workers {
		if w.ep != ep || w.gone {
			continue
		}
		l := queue.WorkerLoad{WorkerID: w.id, EndpointID: ep, Running: w.inflight, LastSeen: w.lastOK}
		if !w.frozen && w.state == unhealthy && !w.badSince.IsZero() && now.Sub(w.badSince) >= a.b.cfg.UnhealthyAfter {
			l.Lost = true // the runtime replaces it
		}
		if !w.lastOK.IsZero() || w.state != initializing {
			out = append(out, l)
		}
	}
	return out
}

func (a *adapter) SetFrozen(id string, frozen bool) {
	if !a.lbWorker(id) {
		a.q.SetFrozen(id, frozen)
		return
	}
	a.b.mu.Lock()
	if w := a.b.workers[id]; w != nil {
		w.frozen = frozen
		if !frozen {
			w.state = initializing // healthy again at its next 200
		}
		a.b.changedLocked()
	}
	a.b.mu.Unlock()
	if !frozen {
		go a.b.probeAll()
	}
}

// DrainWorker: a load-balancing worker's requests are the balancer's (it
// stops routing to it when the runtime forgets it); the queue's workers
// are the queue's.
func (a *adapter) DrainWorker(id string) int {
	if a.lbWorker(id) {
		return 0
	}
	return a.q.DrainWorker(id)
}

func (a *adapter) PendingStops(id string) []string {
	if a.lbWorker(id) {
		return nil
	}
	return a.q.PendingStops(id)
}

// WorkerHealth lists an endpoint's load-balancing workers with their health
// and in-flight requests.
type WorkerHealth struct {
	ID       string `json:"id"`
	Health   string `json:"health"`
	InFlight int    `json:"inFlight"`
}

// Health reports the pool of one endpoint.
func (b *Balancer) Health(ep string) []WorkerHealth {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []WorkerHealth
	for _, w := range b.workers {
		if w.ep == ep && !w.gone {
			out = append(out, WorkerHealth{ID: w.id, Health: w.state.String(), InFlight: w.inflight})
		}
	}
	return out
}

// ---- the proxy ----

// Handler serves load-balancing requests (by Host or /lb/ID/…) and passes
// every other request to next.
func (b *Balancer) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ep, path, ok := b.route(r); ok {
			b.serve(w, r, ep, path)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// route finds the endpoint a request addresses and the path to forward.
func (b *Balancer) route(r *http.Request) (ep, path string, ok bool) {
	if b.cfg.Domain != "" {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if id, found := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(b.cfg.Domain)); found && id != "" && !strings.Contains(id, ".") {
			return id, r.URL.Path, true
		}
	}
	if rest, found := strings.CutPrefix(r.URL.Path, "/lb/"); found {
		id, p, _ := strings.Cut(rest, "/")
		if id != "" {
			return id, "/" + p, true
		}
	}
	return "", "", false
}

// lbError answers a JSON error with a reason code.
func lbError(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg, "reason": reason})
}

type affinity struct {
	mode string // "", "soft", "strict", "strict-resume"
	id   string
}

func parseAffinity(h string) affinity {
	h = strings.TrimSpace(h)
	if h == "" {
		return affinity{}
	}
	if mode, id, ok := strings.Cut(h, " "); ok && (mode == "strict" || mode == "strict-resume") {
		return affinity{mode: mode, id: strings.TrimSpace(id)}
	}
	return affinity{mode: "soft", id: h}
}

func (b *Balancer) serve(w http.ResponseWriter, r *http.Request, epID, path string) {
	if b.cfg.Authorize == nil {
		lbError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid API key")
		return
	}
	if code, msg := b.cfg.Authorize(r, epID); code != 0 {
		reason := map[int]string{http.StatusUnauthorized: "unauthorized", http.StatusForbidden: "forbidden", http.StatusTooManyRequests: "rate_limited"}[code]
		if reason == "" {
			reason = "unavailable"
		}
		lbError(w, code, reason, msg)
		return
	}
	ep, err := b.cfg.Endpoint(epID)
	if errors.Is(err, store.ErrNotFound) {
		lbError(w, http.StatusNotFound, "endpoint_not_found", "endpoint "+epID+" not found")
		return
	}
	if err != nil {
		lbError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	if !ep.LoadBalancer() {
		lbError(w, http.StatusBadRequest, "not_load_balancer", "endpoint "+epID+" is a QUEUE endpoint: use /v2/"+epID+"/run or /runsync")
		return
	}
	if r.ContentLength > b.cfg.MaxBody {
		lbError(w, http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf("request body larger than the %d MB limit", b.cfg.MaxBody>>20))
		return
	}
	aff := parseAffinity(r.Header.Get(workerHeader))
	wk, code, reason, msg := b.pick(r.Context(), epID, aff)
	if wk == nil {
		if r.Context().Err() == nil {
			lbError(w, code, reason, msg)
		}
		return
	}
	defer b.release(wk)
	b.proxy(w, r, wk, path)
}

// pick waits for a worker: the affinity's, or the least-loaded healthy one.
func (b *Balancer) pick(ctx context.Context, ep string, aff affinity) (*lbWorker, int, string, string) {
	wait := b.cfg.ColdStartWait
	if aff.mode == "strict" || aff.mode == "strict-resume" {
		wait = b.cfg.StrictWait
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	queued := false
	defer func() {
		if queued {
			b.mu.Lock()
			ws := b.waiting[ep]
			if len(ws) > 0 {
				b.waiting[ep] = ws[1:] // the oldest arrival goes: only the count and the oldest matter
			}
			b.mu.Unlock()
		}
	}()
	for {
		b.mu.Lock()
		var pick *lbWorker
		if aff.mode != "" {
			target := b.workers[aff.id]
			if target != nil && target.ep != ep {
				target = nil // never across endpoints
			}
			if aff.mode != "soft" && (target == nil || target.gone) {
				b.mu.Unlock()
				return nil, http.StatusNotFound, "affinity_worker_gone", "worker " + aff.id + " of endpoint " + ep + " is gone"
			}
			if target != nil && !target.gone && !target.frozen && target.state == healthy {
				pick = target
			}
		}
		if pick == nil && aff.mode != "strict" && aff.mode != "strict-resume" {
			for _, w := range b.workers {
				if w.ep == ep && !w.gone && !w.frozen && w.state == healthy && (pick == nil || w.inflight < pick.inflight) {
					pick = w
				}
			}
		}
		if pick != nil {
			pick.inflight++
			b.mu.Unlock()
			return pick, 0, "", ""
		}
		if !queued {
			queued = true
			b.waiting[ep] = append(b.waiting[ep], time.Now())
		}
		ch := b.changed
		b.mu.Unlock()
		if b.cfg.Wake != nil {
			b.cfg.Wake(ep)
		}
		select {
		case <-ch:
		case <-timer.C:
			if aff.mode == "strict" || aff.mode == "strict-resume" {
				return nil, http.StatusBadRequest, "timed_out_waiting_for_worker", "timed out waiting for worker " + aff.id
			}
			return nil, http.StatusServiceUnavailable, "no_healthy_worker",
				fmt.Sprintf("no healthy worker of endpoint %s within %s (is its health check %s answering 200?)", ep, wait, defaultHealthPath)
		case <-ctx.Done():
			return nil, 0, "", ""
		}
	}
}

func (b *Balancer) release(w *lbWorker) {
	b.mu.Lock()
	w.inflight--
	b.mu.Unlock()
	if b.cfg.Wake != nil {
		b.cfg.Wake(w.ep)
	}
}

// limitedBody fails a response body past the limit.
type limitedBody struct {
	rc interface {
		Read([]byte) (int, error)
		Close() error
	}
	left int64
}

var errTooLarge = errors.New("response body larger than the load balancer's limit")

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.rc.Read(p)
	l.left -= int64(n)
	return n, err
}
func (l *limitedBody) Close() error { return l.rc.Close() }

func (b *Balancer) proxy(w http.ResponseWriter, r *http.Request, wk *lbWorker, path string) {
	b.mu.Lock()
	addr := wk.addr
	b.mu.Unlock()
	target := &url.URL{Scheme: "http", Host: addr}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, b.cfg.MaxBody)
	}
	rp := &httputil.ReverseProxy{
		Transport:     b.transport,
		FlushInterval: -1, // stream every write: SSE, chunked
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Header.Del("Authorization") // the Berth key stays here
			pr.Out.Header.Del(workerHeader)
			pr.SetXForwarded()
		},
		ModifyResponse: func(res *http.Response) error {
			if res.ContentLength > b.cfg.MaxBody {
				return errTooLarge
			}
			if res.StatusCode != http.StatusSwitchingProtocols {
				res.Body = &limitedBody{rc: res.Body, left: b.cfg.MaxBody}
			}
			res.Header.Set(workerHeader, wk.id)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				lbError(w, http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf("request body larger than the %d MB limit", b.cfg.MaxBody>>20))
			case errors.Is(err, errTooLarge):
				lbError(w, http.StatusBadGateway, "response_too_large", fmt.Sprintf("the worker's response is larger than the %d MB limit", b.cfg.MaxBody>>20))
			case r.Context().Err() != nil:
				// The client went away.
			default:
				w.Header().Set(workerHeader, wk.id)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					lbError(w, http.StatusGatewayTimeout, "worker_timeout", fmt.Sprintf("worker %s did not answer within %s", wk.id, b.cfg.Timeout))
					return
				}
				lbError(w, http.StatusBadGateway, "worker_failed", b.failReason(wk, err))
			}
		},
	}
	rp.ServeHTTP(w, r)
}

// failReason explains a failed proxied request: the worker's exit when the
// runtime reports it soon, else the connection error.
func (b *Balancer) failReason(wk *lbWorker, err error) string {
	deadline := time.Now().Add(2 * time.Second)
	for {
		b.mu.Lock()
		gone, why, ch := wk.gone, wk.goneReason, b.changed
		b.mu.Unlock()
		if gone {
			return fmt.Sprintf("worker %s exited during the request: %s", wk.id, why)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Sprintf("worker %s failed during the request: %v", wk.id, err)
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}
