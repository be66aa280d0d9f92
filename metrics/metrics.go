// Package metrics is Berth's Prometheus registry: the series the other
// packages feed through plain hooks (queue OnJobFinished and OnWebhook,
// runtime OnScale, Docker.OnPull, store OnCommit, cleaner OnRun, builder
// OnPrune; wired in app/wire.go), the HTTP request series httpapi
// observes, and the collectors that read the store, the queue and the GPUs
// at scrape time (Watch). httpapi serves it on /metrics (Handler); none of
// the feeding packages imports Prometheus.
package metrics

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"berth/store"
)

// Metrics are the series of one Berth, on their own registry. One Metrics
// serves one httpapi.Server (Watch registers its collectors once).
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	delay    *prometheus.HistogramVec
	exec     *prometheus.HistogramVec
	scale    *prometheus.CounterVec
	webhooks *prometheus.CounterVec
	pulls    *prometheus.CounterVec
	pullTime prometheus.Histogram
	commit   prometheus.Histogram
	writes   prometheus.Histogram

	cleaned *prometheus.CounterVec
	pruned  *prometheus.CounterVec

	mu        sync.Mutex
	endpoints map[string]bool // endpoints with series, for PruneEndpoints
}

// jobBuckets span a fast handler (10 ms) to an hour-long job.
var jobBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// New makes the series, registered on their own registry with the Go
// runtime's and the process's.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), endpoints: map[string]bool{}}
	m.delay = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berth_job_delay_seconds", Help: "Jobs' delayTime: from submission to a worker taking the job, by endpoint (observed when the job ends).",
		Buckets: jobBuckets,
	}, []string{"endpoint"})
	m.exec = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berth_job_execution_seconds", Help: "Jobs' executionTime: from a worker taking the job to its end, by endpoint and final status.",
		Buckets: jobBuckets,
	}, []string{"endpoint", "status"})
	m.scale = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_scaling_decisions_total", Help: "Autoscaler decisions by endpoint and action: start (a worker launched), drain (a worker asked to finish and stop), kill (a worker stopped for a fault).",
	}, []string{"endpoint", "action"})
	m.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_webhook_deliveries_total", Help: "Webhook delivery attempts by endpoint and result: delivered, retry (failed, will be retried), failed (gave up).",
	}, []string{"endpoint", "result"})
	m.pulls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_image_pulls_total", Help: "Image pulls by result (ok, error). Images already present are not pulled.",
	}, []string{"result"})
	m.pullTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "berth_image_pull_seconds", Help: "Time taken by image pulls.",
		Buckets: []float64{.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
	})
	m.commit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "berth_store_commit_seconds", Help: "bbolt group-commit transaction latency, fsync included.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1},
	})
	m.writes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "berth_store_commit_writes", Help: "Writes carried by one group-commit transaction.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 8),
	})
	m.cleaned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_cleaner_removed_total", Help: "What the cleaner removed, by task: workers (unused worker identities), endpoints (a deleted endpoint's queue state and series), rate-limits (idle buckets), build-images (build images past the kept releases).",
	}, []string{"task"})
	m.pruned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_build_images_pruned_total", Help: "Build images removed from the daemon because no endpoint keeps them (berth serve --build-images-kept), by result: removed, failed (the daemon refused; logged).",
	}, []string{"result"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_http_requests_total", Help: "HTTP requests by route and status code.",
	}, []string{"route", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berth_http_request_duration_seconds", Help: "HTTP request latency by route (long polls included).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .05, .25, 1, 5, 30, 90},
	}, []string{"route"})
	m.reg.MustRegister(m.delay, m.exec, m.scale, m.webhooks, m.pulls, m.pullTime, m.commit, m.writes, m.cleaned, m.pruned,
		m.requests, m.duration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"removed", "failed"} {
		m.pruned.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.pulls.WithLabelValues(r) // present from the start, so rate() works from the first pull
	}
	return m
}

// Handler serves the registry in Prometheus' text format (GET /metrics).
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// Route is one route's request series; httpapi makes one per route, so a
// request hashes no label.
type Route struct {
	m        *Metrics
	route    string
	hist     prometheus.Observer
	counters sync.Map // status code → counter
}

// Route returns the series of route (its pattern, e.g. "GET /v2/{id}/run").
func (m *Metrics) Route(route string) *Route {
	return &Route{m: m, route: route, hist: m.duration.WithLabelValues(route)}
}

// Observe counts one request answered code after took.
func (r *Route) Observe(code int, took time.Duration) {
	r.hist.Observe(took.Seconds())
	c, ok := r.counters.Load(code)
	if !ok {
		c, _ = r.counters.LoadOrStore(code, r.m.requests.WithLabelValues(r.route, codeLabel(code)))
	}
	c.(prometheus.Counter).Inc()
}

var codeText sync.Map

func codeLabel(c int) string {
	if v, ok := codeText.Load(c); ok {
		return v.(string)
	}
	b, _ := json.Marshal(c)
	codeText.Store(c, string(b))
	return string(b)
}

// seen notes an endpoint with series.
func (m *Metrics) seen(endpointID string) {
	m.mu.Lock()
	m.endpoints[endpointID] = true
	m.mu.Unlock()
}

// ForgetEndpoint deletes an endpoint's series (it was deleted).
func (m *Metrics) ForgetEndpoint(endpointID string) {
	m.mu.Lock()
	delete(m.endpoints, endpointID)
	m.mu.Unlock()
	l := prometheus.Labels{"endpoint": endpointID}
	m.delay.DeletePartialMatch(l)
	m.exec.DeletePartialMatch(l)
	m.scale.DeletePartialMatch(l)
	m.webhooks.DeletePartialMatch(l)
}

// PruneEndpoints deletes the series of endpoints that no longer exist
// (live reports false): what a job or webhook finishing after its
// endpoint's deletion added. The cleaner calls it; it returns how many
// endpoints' series went.
func (m *Metrics) PruneEndpoints(live func(endpointID string) bool) int {
	m.mu.Lock()
	var ids []string
	for id := range m.endpoints {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	n := 0
	for _, id := range ids {
		if !live(id) {
			m.ForgetEndpoint(id)
			n++
		}
	}
	return n
}

// JobFinished is queue.Config.OnJobFinished.
func (m *Metrics) JobFinished(endpointID string, st store.JobStatus, delay, execution time.Duration) {
	m.seen(endpointID)
	m.delay.WithLabelValues(endpointID).Observe(delay.Seconds())
	m.exec.WithLabelValues(endpointID, string(st)).Observe(execution.Seconds())
}

// Webhook is queue.Config.OnWebhook.
func (m *Metrics) Webhook(endpointID, result string) {
	m.seen(endpointID)
	m.webhooks.WithLabelValues(endpointID, result).Inc()
}

// Scale is runtime.Config.OnScale.
func (m *Metrics) Scale(endpointID, action string) {
	m.seen(endpointID)
	m.scale.WithLabelValues(endpointID, action).Inc()
}

// Pull is docker.Docker.OnPull (runtime/docker).
func (m *Metrics) Pull(_ string, took time.Duration, err error) {
	res := "ok"
	if err != nil {
		res = "error"
	}
	m.pulls.WithLabelValues(res).Inc()
	m.pullTime.Observe(took.Seconds())
}

// Cleaned is cleaner.Config.OnRun.
func (m *Metrics) Cleaned(task string, removed int, _ time.Duration, _ error) {
	if removed > 0 {
		m.cleaned.WithLabelValues(task).Add(float64(removed))
	}
}

// BuildImagePruned is builder.Config.OnPrune.
func (m *Metrics) BuildImagePruned(result string) {
	m.pruned.WithLabelValues(result).Inc()
}

// Commit is store.Options.OnCommit.
func (m *Metrics) Commit(took time.Duration, writes int) {
	m.commit.Observe(took.Seconds())
	m.writes.Observe(float64(writes))
}
