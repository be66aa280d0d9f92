package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
)

// metricsEnv is a Berth (app's composition: its store, queue and server
// feed one Metrics) whose webhooks may reach loopback receivers.
type metricsEnv struct {
	t    *testing.T
	base string
}

func newMetricsEnv(t *testing.T, opts ...apitest.Option) *metricsEnv {
	// The real clock: the job histograms measure real time.
	e := apitest.NewConfig(t)
	e.Cfg.Queue.TakeHold = 100 * time.Millisecond
	e.Start(append([]apitest.Option{apitest.WithLoopbackWebhooks, apitest.Unvalidated}, opts...)...)
	return &metricsEnv{t: t, base: e.Base}
}

func (e *metricsEnv) do(method, path, key string, body any, out any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.base+path, rd)
	req.Header.Set("Authorization", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		e.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		json.Unmarshal(b, out)
	}
}

func (e *metricsEnv) scrape() string {
	req, _ := http.NewRequest("GET", e.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+apitest.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		e.t.Fatalf("/metrics: %d %s", resp.StatusCode, out)
	}
	return string(out)
}

// metric returns the value of the series name{labels}, -1 when absent.
func metric(text, name string, labels ...string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
			}
		}
		if ok {
			f, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			return f
		}
	}
	return -1
}

// After real traffic — jobs through the worker protocol, a webhook
// delivered and one refused, a job still queued — /metrics shows the job
// histograms, webhook results, queue age and the store's commits and size.
func TestMetricsAfterActivity(t *testing.T) {
	e := newMetricsEnv(t)
	hooks := make(chan int, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := 200
		if strings.Contains(r.URL.Path, "refuse") {
			code = 500
		}
		w.WriteHeader(code)
		hooks <- code
	}))
	defer recv.Close()

	admin := "Bearer " + apitest.Key
	var tpl, ep, idle struct{ ID string }
	e.do("POST", "/v1/templates", admin, map[string]any{"name": "m", "imageName": "img:1", "isServerless": true}, &tpl)
	e.do("POST", "/v1/endpoints", admin, map[string]any{"templateId": tpl.ID}, &ep)
	e.do("POST", "/v1/endpoints", admin, map[string]any{"templateId": tpl.ID, "name": "idle"}, &idle)
	var env map[string]string
	e.do("GET", "/v1/endpoints/"+ep.ID+"/worker-env", admin, nil, &env)
	wkey, wid := env["RUNPOD_AI_API_KEY"], env["RUNPOD_POD_ID"]

	// Two jobs a worker runs: one completes, one fails.
	for _, c := range []struct{ hook, result string }{{"/ok", `{"output":1}`}, {"/refuse", `{"error":"boom"}`}} {
		var job struct{ ID string }
		e.do("POST", "/v2/"+ep.ID+"/run", admin, map[string]any{"input": map[string]any{}, "webhook": recv.URL + c.hook}, &job)
		var taken struct{ ID string }
		e.do("GET", "/v2/"+ep.ID+"/job-take/"+wid+"?job_in_progress=0", wkey, nil, &taken)
		if taken.ID != job.ID {
			t.Fatalf("took %q, want %q", taken.ID, job.ID)
		}
		time.Sleep(20 * time.Millisecond) // a measurable executionTime
		e.do("POST", "/v2/"+ep.ID+"/job-done/"+wid+"/"+job.ID, wkey, json.RawMessage(c.result), nil)
	}
	for range 2 {
		select {
		case <-hooks:
		case <-time.After(30 * time.Second):
			t.Fatal("webhooks not called")
		}
	}
	// A job left waiting on the endpoint without workers.
	e.do("POST", "/v2/"+idle.ID+"/run", admin, map[string]any{"input": map[string]any{}}, nil)

	var text string
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Delivery outcomes are counted after the receiver answers.
		text = e.scrape()
		if metric(text, "berth_webhook_deliveries_total", "endpoint", ep.ID, "result", "retry") == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	checks := []struct {
		name   string
		labels []string
		ok     func(float64) bool
	}{
		{"berth_job_delay_seconds_count", []string{"endpoint", ep.ID}, func(v float64) bool { return v == 2 }},
		{"berth_job_execution_seconds_count", []string{"endpoint", ep.ID, "status", "COMPLETED"}, func(v float64) bool { return v == 1 }},
		{"berth_job_execution_seconds_count", []string{"endpoint", ep.ID, "status", "FAILED"}, func(v float64) bool { return v == 1 }},
		{"berth_job_execution_seconds_sum", []string{"endpoint", ep.ID, "status", "COMPLETED"}, func(v float64) bool { return v >= 0.02 }},
		{"berth_webhook_deliveries_total", []string{"endpoint", ep.ID, "result", "delivered"}, func(v float64) bool { return v == 1 }},
		{"berth_webhook_deliveries_total", []string{"endpoint", ep.ID, "result", "retry"}, func(v float64) bool { return v == 1 }},
		{"berth_queue_oldest_job_age_seconds", []string{"endpoint", idle.ID}, func(v float64) bool { return v > 0 }},
		{"berth_queue_oldest_job_age_seconds", []string{"endpoint", ep.ID}, func(v float64) bool { return v == 0 }},
		{"berth_store_commit_seconds_count", nil, func(v float64) bool { return v >= 5 }},
		{"berth_store_file_bytes", nil, func(v float64) bool { return v > 0 }},
		{"berth_image_pulls_total", []string{"result", "ok"}, func(v float64) bool { return v == 0 }},
	}
	for _, c := range checks {
		if v := metric(text, c.name, c.labels...); !c.ok(v) {
			t.Errorf("%s%v = %v", c.name, c.labels, v)
		}
	}
	// Without GPUs there are no GPU series.
	if regexp.MustCompile(`(?m)^berth_gpu_`).MatchString(text) {
		t.Error("GPU series without GPUs")
	}
}
