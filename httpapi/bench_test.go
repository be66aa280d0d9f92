package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/store"
)

// benchServer is Berth on a real, fsynced bbolt file with rate limits off
// and the real clock.
type benchServer struct {
	srv    *httptest.Server
	client *http.Client
	ep     string
}

func newBenchServer(b *testing.B) *benchServer {
	// Berth as app composes it, its API handler served by an httptest
	// server (the benchmarks' client settings, no connection limits).
	api := apptest.Start(b, apptest.Config(b, apitest.Key)).API()
	bs := &benchServer{srv: httptest.NewServer(api.Handler()), client: benchClient()}
	b.Cleanup(func() {
		bs.srv.CloseClientConnections()
		bs.srv.Close()
	})
	var tpl, ep map[string]any
	bs.do(b, "POST", "/v1/templates", []byte(`{"name":"bench","imageName":"x"}`), &tpl)
	bs.do(b, "POST", "/v1/endpoints", []byte(`{"templateId":"`+tpl["id"].(string)+`"}`), &ep)
	bs.ep = ep["id"].(string)
	return bs
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}
}

func (bs *benchServer) do(b *testing.B, method, path string, body []byte, out any) int {
	req, _ := http.NewRequest(method, bs.srv.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", apitest.Key)
	res, err := bs.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil {
		json.NewDecoder(res.Body).Decode(out)
	} else {
		io.Copy(io.Discard, res.Body)
	}
	return res.StatusCode
}

// worker runs the worker protocol (job-take, job-done) until ctx ends,
// counting finished jobs.
func (bs *benchServer) worker(b *testing.B, ctx context.Context, id string, done *counter) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "GET", bs.srv.URL+"/v2/"+bs.ep+"/job-take/"+id+"?gpu=&job_in_progress=0", nil)
		req.Header.Set("Authorization", apitest.Key)
		res, err := bs.client.Do(req)
		if err != nil {
			return
		}
		var job struct {
			ID    string          `json:"id"`
			Input json.RawMessage `json:"input"`
		}
		code := res.StatusCode
		if code == 200 {
			json.NewDecoder(res.Body).Decode(&job)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if code != 200 {
			continue
		}
		body := append(append([]byte(`{"output":`), job.Input...), '}')
		req, _ = http.NewRequest("POST", bs.srv.URL+"/v2/"+bs.ep+"/job-done/"+id+"/"+job.ID+"?gpu=&isStream=false", bytes.NewReader(body))
		req.Header.Set("Authorization", apitest.Key)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err = bs.client.Do(req)
		if err != nil {
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		done.inc()
	}
}

// counter signals when it reaches its target.
type counter struct {
	n, target int64
	reached   chan struct{}
}

func newCounter(target int) *counter {
	return &counter{target: int64(target), reached: make(chan struct{})}
}

func (c *counter) inc() {
	if atomic.AddInt64(&c.n, 1) == c.target {
		close(c.reached)
	}
}

const (
	benchWorkers    = 16
	benchSubmitters = 32
)

// BenchmarkDurableJobs measures jobs per second through run → job-take →
// job-done with several workers, each job on disk before its id is
// returned, and compares it with a bare net/http echo server answering the
// same number of requests (three per job) with the same concurrency.
func BenchmarkDurableJobs(b *testing.B) {
	n := b.N
	echo := echoCeiling(b, 3*n)                                     // at the default GOMAXPROCS, its best
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(store.Procs())) // Berth as `berth serve` runs it
	bs := newBenchServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := newCounter(n)
	var wg sync.WaitGroup
	for i := 0; i < benchWorkers; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); bs.worker(b, ctx, "bw"+string(rune('a'+i)), done) }(i)
	}
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var sub sync.WaitGroup
	for s := 0; s < benchSubmitters; s++ {
		sub.Add(1)
		go func() {
			defer sub.Done()
			for next.Add(1) <= int64(n) {
				if code := bs.do(b, "POST", "/v2/"+bs.ep+"/run", []byte(`{"input":{"n":1}}`), nil); code != 200 {
					b.Errorf("run: %d", code)
					return
				}
			}
		}()
	}
	sub.Wait()
	<-done.reached
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	bs.srv.CloseClientConnections()
	wg.Wait()
	jobsPerSec := float64(n) / elapsed.Seconds()
	echoJobsPerSec := float64(n) / echo.Seconds()
	b.ReportMetric(jobsPerSec, "jobs/s")
	b.ReportMetric(echoJobsPerSec, "echo-jobs/s")
	b.ReportMetric(100*jobsPerSec/echoJobsPerSec, "%-of-echo")
}

// echoCeiling times `requests` requests against a bare net/http server
// that reads the body and answers a small JSON object.
func echoCeiling(b *testing.B, requests int) time.Duration {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"00000000-0000-0000-0000-000000000000","status":"IN_QUEUE"}`))
	}))
	defer srv.Close()
	client := benchClient()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for s := 0; s < benchSubmitters+benchWorkers; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(requests) {
				res, err := client.Post(srv.URL+"/run", "application/json", bytes.NewReader([]byte(`{"input":{"n":1}}`)))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkRunsyncOverhead measures /runsync latency with a warm no-op
// worker: Berth's overhead on a job (two fsynced writes, the hand-off to a
// held job-take and the wake-up of the waiting runsync).
func BenchmarkRunsyncOverhead(b *testing.B) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(store.Procs()))
	bs := newBenchServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go bs.worker(b, ctx, "warm", newCounter(-1))
	lat := make([]time.Duration, 0, b.N)
	// warm the connections and the worker's long poll
	for i := 0; i < 10; i++ {
		bs.do(b, "POST", "/v2/"+bs.ep+"/runsync", []byte(`{"input":{}}`), nil)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		var r map[string]any
		bs.do(b, "POST", "/v2/"+bs.ep+"/runsync", []byte(`{"input":{"i":1}}`), &r)
		lat = append(lat, time.Since(t0))
		if r["status"] != "COMPLETED" {
			b.Fatalf("runsync: %v", r)
		}
	}
	b.StopTimer()
	cancel()
	bs.srv.CloseClientConnections()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
