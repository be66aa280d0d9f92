package httpapi

import (
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth/store"
)

// Metrics are the Prometheus series fed by the other packages' hooks (queue
// OnJobFinished and OnWebhook, runtime OnScale and Docker.OnPull, store
// OnCommit; wired in app/wire.go) and served on /metrics with the HTTP and
// queue series. One Metrics serves one Server.
type Metrics struct {
	reg      *prometheus.Registry
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

// NewMetrics makes the series, registered on their own registry.
func NewMetrics() *Metrics {
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
	m.reg.MustRegister(m.delay, m.exec, m.scale, m.webhooks, m.pulls, m.pullTime, m.commit, m.writes, m.cleaned, m.pruned)
	for _, r := range []string{"removed", "failed"} {
		m.pruned.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.pulls.WithLabelValues(r) // present from the start, so rate() works from the first pull
	}
	return m
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

var (
	oldestDesc   = prometheus.NewDesc("berth_queue_oldest_job_age_seconds", "Age of the oldest queued job (not low priority) per endpoint; 0 when none waits.", []string{"endpoint"}, nil)
	dbSizeDesc   = prometheus.NewDesc("berth_store_file_bytes", "Size of berth.db on disk.", nil, nil)
	wfailDesc    = prometheus.NewDesc("berth_store_write_failures_total", "Writes that failed (each is also logged); kept: \"true\" for changes already made in memory, kept and written again once the disk takes writes.", []string{"kept"}, nil)
	wretryDesc   = prometheus.NewDesc("berth_store_writes_retrying", "Failed writes (by key) waiting to be written again.", nil, nil)
	wpendDesc    = prometheus.NewDesc("berth_store_writes_pending", "Writes queued for the group commit.", nil, nil)
	damagedDesc  = prometheus.NewDesc("berth_store_damaged", "1 when a damaged page was found while serving: writes are refused until a restart on a checked file.", nil, nil)
	streamDesc   = prometheus.NewDesc("berth_stream_buffered_bytes", "Unread stream chunks held, all jobs (capped: see the README).", nil, nil)
	droppedDesc  = prometheus.NewDesc("berth_stream_chunks_dropped_total", "Stream chunks dropped because a job's (or every job's) unread buffer was full.", nil, nil)
	dmgRecDesc   = prometheus.NewDesc("berth_store_damaged_records", "Damaged records (checksum mismatch, or not decodable) and broken pages found by reads or by the background check, each counted once and logged with its bucket and key.", nil, nil)
	gpuMemDesc   = prometheus.NewDesc("berth_gpu_memory_used_bytes", "GPU memory in use (NVML), by GPU.", []string{"gpu", "uuid", "name"}, nil)
	gpuTotalDesc = prometheus.NewDesc("berth_gpu_memory_total_bytes", "GPU memory size (NVML), by GPU.", []string{"gpu", "uuid", "name"}, nil)
	gpuUtilDesc  = prometheus.NewDesc("berth_gpu_utilization_ratio", "Fraction of the last sample period the GPU was busy (NVML), by GPU.", []string{"gpu", "uuid", "name"}, nil)
)

// hostCollector reports, at scrape time, what is read rather than counted:
// queue ages, the database file's size and GPU usage.
type hostCollector struct{ s *Server }

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{oldestDesc, dbSizeDesc, wfailDesc, wretryDesc, wpendDesc, damagedDesc, dmgRecDesc, streamDesc, droppedDesc, gpuMemDesc, gpuTotalDesc, gpuUtilDesc} {
		ch <- d
	}
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	var ids []string
	s.cfg.Store.Scan(store.Endpoints, func(key string, _ []byte) error { ids = append(ids, key); return nil })
	for _, id := range ids {
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, s.cfg.Queue.Stats(id).OldestWait.Seconds(), id)
	}
	if fi, err := os.Stat(s.cfg.Store.Path()); err == nil {
		ch <- prometheus.MustNewConstMetric(dbSizeDesc, prometheus.GaugeValue, float64(fi.Size()))
	}
	ws := s.cfg.Store.Stats()
	ch <- prometheus.MustNewConstMetric(wfailDesc, prometheus.CounterValue, float64(ws.Kept), "true")
	ch <- prometheus.MustNewConstMetric(wfailDesc, prometheus.CounterValue, float64(ws.Failed-ws.Kept), "false")
	ch <- prometheus.MustNewConstMetric(wretryDesc, prometheus.GaugeValue, float64(ws.Retrying))
	ch <- prometheus.MustNewConstMetric(wpendDesc, prometheus.GaugeValue, float64(ws.Pending))
	damaged := 0.0
	if ws.Damaged {
		damaged = 1
	}
	ch <- prometheus.MustNewConstMetric(damagedDesc, prometheus.GaugeValue, damaged)
	ch <- prometheus.MustNewConstMetric(dmgRecDesc, prometheus.GaugeValue, float64(ws.DamagedRecords))
	ss := s.cfg.Queue.StreamStats()
	ch <- prometheus.MustNewConstMetric(streamDesc, prometheus.GaugeValue, float64(ss.BufferedBytes))
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(ss.Dropped))
	if s.cfg.GPUUsage == nil {
		return
	}
	us, err := s.cfg.GPUUsage()
	if err != nil {
		s.cfg.Logger.Warn("GPU usage for /metrics", "err", err)
		return
	}
	for _, u := range us {
		l := []string{strconv.Itoa(u.Index), u.UUID, u.Name}
		ch <- prometheus.MustNewConstMetric(gpuMemDesc, prometheus.GaugeValue, float64(u.MemoryUsedBytes), l...)
		ch <- prometheus.MustNewConstMetric(gpuTotalDesc, prometheus.GaugeValue, float64(u.MemoryTotalBytes), l...)
		ch <- prometheus.MustNewConstMetric(gpuUtilDesc, prometheus.GaugeValue, u.Utilization, l...)
	}
}
