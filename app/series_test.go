package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth/app"
	"berth/gpu"
	"berth/series"
	"berth/store"
	"berth/worker"
)

type seriesEnv struct {
	t         *testing.T
	base, key string
}

func (e seriesEnv) call(method, path string, body, out any) int {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, e.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+e.key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return res.StatusCode
}

type seriesAnswer struct {
	EndpointID    string
	Window        string
	BucketSeconds int
	Buckets       []series.Bucket
}

// sum adds a window's buckets: the counts, the largest queue depth and
// worker count sampled, and the latencies of the last bucket with some.
func (s seriesAnswer) sum() (b series.Bucket, maxQueue, maxWorkers int) {
	for _, x := range s.Buckets {
		b.Completed += x.Completed
		b.Failed += x.Failed
		b.TimedOut += x.TimedOut
		b.Cancelled += x.Cancelled
		b.ColdStarts += x.ColdStarts
		if x.QueueDepth != nil {
			maxQueue = max(maxQueue, *x.QueueDepth)
		}
		if w := x.Workers; w != nil {
			maxWorkers = max(maxWorkers, w.Idle+w.Running)
		}
		if x.DelayMs != nil {
			b.DelayMs, b.ExecutionMs = x.DelayMs, x.ExecutionMs
		}
	}
	return b, maxQueue, maxWorkers
}

// TestEndpointSeriesThroughBerth: jobs run by a worker attached from the
// host — completed, failed, one cancelled while queued — show on GET
// /v1/endpoints/ID/metrics, the route the dashboard plots: counts by
// outcome in the hour and the day, the queue depth sampled while jobs
// waited, the worker sampled, and the jobs' delay and execution times.
// A bad window is 400 and an unknown endpoint 404.
func TestEndpointSeriesThroughBerth(t *testing.T) {
	const key = "series-key"
	cfg := app.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quiet, APIKey: key, Backend: app.DockerOff,
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }}
	cfg.Series.SampleEvery = 20 * time.Millisecond
	a := start(t, cfg)
	defer stop(t, a)
	e := seriesEnv{t: t, base: a.URL(), key: key}

	var tpl, ep struct{ ID string }
	e.call("POST", "/v1/templates", map[string]any{"name": "plots", "imageName": "plots:1", "isServerless": true}, &tpl)
	e.call("POST", "/v1/endpoints", map[string]any{"name": "plots", "templateId": tpl.ID, "computeType": "CPU"}, &ep)
	read := func(window string) seriesAnswer {
		t.Helper()
		var s seriesAnswer
		if code := e.call("GET", "/v1/endpoints/"+ep.ID+"/metrics?window="+window, nil, &s); code != 200 {
			t.Fatalf("GET metrics?window=%s: %d", window, code)
		}
		return s
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen in 60s; hour: %+v", what, read("hour").Buckets[59])
			}
		}
	}

	// Bad requests.
	if code := e.call("GET", "/v1/endpoints/"+ep.ID+"/metrics?window=week", nil, nil); code != 400 {
		t.Errorf("window=week: %d, want 400", code)
	}
	if code := e.call("GET", "/v1/endpoints/nosuchendpoint/metrics", nil, nil); code != 404 {
		t.Errorf("unknown endpoint: %d, want 404", code)
	}

	// Before any worker: four jobs wait (the sampler sees the queue),
	// one is cancelled.
	var ids []string
	for i := range 4 {
		var j struct{ ID string }
		e.call("POST", "/v2/"+ep.ID+"/run", map[string]any{"input": map[string]any{"ms": 40, "fail": i == 3}}, &j)
		ids = append(ids, j.ID)
	}
	waitFor("queue depth 4", func() bool { _, q, _ := read("hour").sum(); return q >= 4 })
	e.call("POST", "/v2/"+ep.ID+"/cancel/"+ids[0], nil, nil)

	// A worker from the host runs the rest: 40 ms of work each, failing
	// when asked.
	var wenv map[string]string
	e.call("GET", "/v1/endpoints/"+ep.ID+"/worker-env", nil, &wenv)
	wctx, stopWorker := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { stopWorker(); <-done }()
	go func() {
		defer close(done)
		worker.Start(wctx, worker.Config{Env: func(k string) string { return wenv[k] }, Logger: quiet,
			Handler: func(ctx context.Context, j *worker.Job) (any, error) {
				var in struct {
					MS   int
					Fail bool
				}
				json.Unmarshal(j.Input, &in)
				select { // the job's work
				case <-time.After(time.Duration(in.MS) * time.Millisecond):
				case <-ctx.Done():
				}
				if in.Fail {
					return nil, errors.New("asked to fail")
				}
				return "ok", nil
			}})
	}()
	for range 3 {
		var j struct{ Status string }
		e.call("POST", "/v2/"+ep.ID+"/runsync", map[string]any{"input": map[string]any{"ms": 40}}, &j)
		if j.Status != "COMPLETED" {
			t.Fatalf("runsync: %+v", j)
		}
	}
	waitFor("5 completed, 1 failed, 1 cancelled", func() bool {
		b, _, _ := read("hour").sum()
		return b.Completed == 5 && b.Failed == 1 && b.Cancelled == 1
	})
	waitFor("the worker sampled", func() bool { _, _, w := read("hour").sum(); return w >= 1 })

	hour, day := read("hour"), read("day")
	if hour.EndpointID != ep.ID || hour.Window != "hour" || hour.BucketSeconds != 60 || len(hour.Buckets) != 60 {
		t.Errorf("hour: %s %s %ds %d buckets", hour.EndpointID, hour.Window, hour.BucketSeconds, len(hour.Buckets))
	}
	if day.Window != "day" || day.BucketSeconds != 300 || len(day.Buckets) != 288 {
		t.Errorf("day: %s %ds %d buckets", day.Window, day.BucketSeconds, len(day.Buckets))
	}
	hb, _, _ := hour.sum()
	db, dq, _ := day.sum()
	if db.Completed != 5 || db.Failed != 1 || db.Cancelled != 1 || db.TimedOut != 0 || dq < 4 {
		t.Errorf("day: %+v, queue %d", db, dq)
	}
	if hb.ColdStarts != 0 {
		t.Errorf("cold starts without a runtime: %d", hb.ColdStarts)
	}
	// Every job that ran did 40 ms of work: the median execution time is
	// at least that (less the estimate's precision), and bounded.
	if hb.ExecutionMs == nil || hb.DelayMs == nil {
		t.Fatalf("no latencies: %+v", hb)
	}
	if p := hb.ExecutionMs; p.P50 < 40*(1-series.Precision) || p.P95 < p.P50 || p.P50 > 30000 {
		t.Errorf("execution ms %+v, want a median ≥ 40 ms", *p)
	}
	// The jobs queued before the worker came waited: p95 of delay is
	// above its median.
	if p := hb.DelayMs; p.P50 < 0 || p.P95 < p.P50 {
		t.Errorf("delay ms %+v", *p)
	}
	t.Logf("hour: %s", fmt.Sprint(hb.Completed, " completed, delay ", *hb.DelayMs, ", execution ", *hb.ExecutionMs))
}

// TestEndpointSeriesSurviveRestart: the series are saved to berth.db (each
// minute, and at a stop) and a restart shows them again; a deleted
// endpoint's record goes with it.
func TestEndpointSeriesSurviveRestart(t *testing.T) {
	const key = "series-restart-key"
	cfg := app.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quiet, APIKey: key, Backend: app.DockerOff,
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }}
	cfg.Series.SampleEvery = 20 * time.Millisecond
	a := start(t, cfg)
	e := seriesEnv{t: t, base: a.URL(), key: key}
	var tpl, ep, other struct{ ID string }
	e.call("POST", "/v1/templates", map[string]any{"name": "plots", "imageName": "plots:1", "isServerless": true}, &tpl)
	e.call("POST", "/v1/endpoints", map[string]any{"name": "kept", "templateId": tpl.ID, "computeType": "CPU"}, &ep)
	e.call("POST", "/v1/endpoints", map[string]any{"name": "deleted", "templateId": tpl.ID, "computeType": "CPU"}, &other)
	read := func(id string) (series.Bucket, int) {
		var s seriesAnswer
		if code := e.call("GET", "/v1/endpoints/"+id+"/metrics?window=day", nil, &s); code != 200 {
			t.Fatalf("GET metrics of %s: %d", id, code)
		}
		b, q, _ := s.sum()
		return b, q
	}
	// No worker: three jobs wait (sampled), then are cancelled.
	for _, id := range []string{ep.ID, ep.ID, ep.ID, other.ID} {
		e.call("POST", "/v2/"+id+"/run", map[string]any{"input": map[string]any{}}, nil)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, q := read(ep.ID); q == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("queue depth 3 not sampled")
		}
	}
	var list []struct{ ID string }
	e.call("GET", "/v1/endpoints/"+ep.ID+"/jobs", nil, &list)
	for _, j := range list {
		e.call("POST", "/v2/"+ep.ID+"/cancel/"+j.ID, nil, nil)
	}
	e.call("DELETE", "/v1/endpoints/"+other.ID, nil, nil)
	if b, _ := read(ep.ID); b.Cancelled != 3 {
		t.Fatalf("before the restart: %d cancelled, want 3", b.Cancelled)
	}
	stop(t, a)

	a = start(t, cfg)
	defer stop(t, a)
	e.base = a.URL()
	if b, q := read(ep.ID); b.Cancelled != 3 || q != 3 {
		t.Errorf("after a restart: %d cancelled, queue depth %d; want 3 and 3", b.Cancelled, q)
	}
	var saved []string
	a.Store().View(func(tx *store.Tx) error {
		return tx.ForEachKey(store.Meta, func(k string) error {
			if strings.HasPrefix(k, "series/") {
				saved = append(saved, k)
			}
			return nil
		})
	})
	if len(saved) != 1 || saved[0] != "series/"+ep.ID {
		t.Errorf("series records in berth.db: %v, want only %s's", saved, ep.ID)
	}
}
