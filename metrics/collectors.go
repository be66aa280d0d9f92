package metrics

import (
	"log/slog"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"berth/gpu"
	"berth/queue"
	"berth/store"
)

// Sources are what the scrape-time series read (httpapi.New gives its
// own): nothing is counted ahead, each scrape asks.
type Sources struct {
	Store *store.DB
	Queue *queue.Service
	// Health is an endpoint's jobs and workers by state, the runtime's
	// workers included (what /health answers).
	Health func(endpointID string) queue.Health
	// LongPolls is the number of long polls held.
	LongPolls func() int
	// GPUUsage samples the GPUs; nil (no GPUs) leaves the GPU series out.
	GPUUsage func() ([]gpu.Usage, error)
	Logger   *slog.Logger
}

// Watch registers the series read from src at scrape time. Once per
// Metrics: a second Watch panics (the series are already registered).
func (m *Metrics) Watch(src Sources) {
	if src.Logger == nil {
		src.Logger = slog.Default()
	}
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "berth_long_polls", Help: "Long polls (job-take, job-stop, runsync, status-sync, stream) being held.",
	}, func() float64 { return float64(src.LongPolls()) })
	m.reg.MustRegister(held, &queueCollector{src: src}, &hostCollector{src: src})
}

// queueCollector reports queue depth and workers per endpoint at scrape
// time.
type queueCollector struct{ src Sources }

var (
	queueDepthDesc = prometheus.NewDesc("berth_queue_jobs", "Jobs per endpoint and state.", []string{"endpoint", "state"}, nil)
	workersDesc    = prometheus.NewDesc("berth_workers", "Workers per endpoint and state.", []string{"endpoint", "state"}, nil)
)

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- workersDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	var ids []string
	c.src.Store.Scan(store.Endpoints, func(key string, _ []byte) error { ids = append(ids, key); return nil })
	for _, id := range ids {
		h := c.src.Health(id)
		for state, n := range map[string]int{"in_queue": h.Jobs.InQueue, "in_progress": h.Jobs.InProgress, "completed": h.Jobs.Completed, "failed": h.Jobs.Failed} {
			ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(n), id, state)
		}
		for state, n := range map[string]int{"idle": h.Workers.Idle, "running": h.Workers.Running, "initializing": h.Workers.Initializing, "unhealthy": h.Workers.Unhealthy, "frozen": h.Workers.Frozen} {
			ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(n), id, state)
		}
	}
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
type hostCollector struct{ src Sources }

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{oldestDesc, dbSizeDesc, wfailDesc, wretryDesc, wpendDesc, damagedDesc, dmgRecDesc, streamDesc, droppedDesc, gpuMemDesc, gpuTotalDesc, gpuUtilDesc} {
		ch <- d
	}
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src
	var ids []string
	s.Store.Scan(store.Endpoints, func(key string, _ []byte) error { ids = append(ids, key); return nil })
	for _, id := range ids {
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, s.Queue.Stats(id).OldestWait.Seconds(), id)
	}
	if fi, err := os.Stat(s.Store.Path()); err == nil {
		ch <- prometheus.MustNewConstMetric(dbSizeDesc, prometheus.GaugeValue, float64(fi.Size()))
	}
	ws := s.Store.Stats()
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
	ss := s.Queue.StreamStats()
	ch <- prometheus.MustNewConstMetric(streamDesc, prometheus.GaugeValue, float64(ss.BufferedBytes))
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(ss.Dropped))
	if s.GPUUsage == nil {
		return
	}
	us, err := s.GPUUsage()
	if err != nil {
		s.Logger.Warn("GPU usage for /metrics", "err", err)
		return
	}
	for _, u := range us {
		l := []string{strconv.Itoa(u.Index), u.UUID, u.Name}
		ch <- prometheus.MustNewConstMetric(gpuMemDesc, prometheus.GaugeValue, float64(u.MemoryUsedBytes), l...)
		ch <- prometheus.MustNewConstMetric(gpuTotalDesc, prometheus.GaugeValue, float64(u.MemoryTotalBytes), l...)
		ch <- prometheus.MustNewConstMetric(gpuUtilDesc, prometheus.GaugeValue, u.Utilization, l...)
	}
}
