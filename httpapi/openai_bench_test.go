package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	goruntime "runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/store"
)

// streamWorker takes jobs and answers each like worker-vllm streaming:
// one job-stream chunk with the first token at once, then [DONE] and
// job-done (the worker's own time to first token is zero).
func (bs *benchServer) streamWorker(b *testing.B, ctx context.Context, id string) {
	post := func(path, body string) bool {
		req, _ := http.NewRequest("POST", bs.srv.URL+"/v2/"+bs.ep+path, strings.NewReader(body))
		req.Header.Set("Authorization", apitest.Key)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := bs.client.Do(req)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return true
	}
	first, _ := json.Marshal(map[string]string{"output": "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"})
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "GET", bs.srv.URL+"/v2/"+bs.ep+"/job-take/"+id+"?job_in_progress=0", nil)
		req.Header.Set("Authorization", apitest.Key)
		res, err := bs.client.Do(req)
		if err != nil {
			return
		}
		var job struct{ ID string }
		code := res.StatusCode
		if code == 200 {
			json.NewDecoder(res.Body).Decode(&job)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if code != 200 {
			continue
		}
		if !post("/job-stream/"+id+"/"+job.ID+"?isStream=true", string(first)) ||
			!post("/job-stream/"+id+"/"+job.ID+"?isStream=true", `{"output": "data: [DONE]\n\n"}`) ||
			!post("/job-done/"+id+"/"+job.ID+"?isStream=true", `{"output": []}`) {
			return
		}
	}
}

// BenchmarkOpenAIStreamTTFT measures the time to first token Berth adds to
// a streamed /openai/v1/chat/completions request: the worker yields its
// first token at once, so the client's time to the first SSE event is all
// Berth's (durable submit, hand-off to the waiting job-take, the job-stream
// post, the relay). The same run measures /runsync of a no-op job with the
// same kind of worker as the baseline of a queue round trip.
func BenchmarkOpenAIStreamTTFT(b *testing.B) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(store.Procs()))
	bs := newBenchServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go bs.streamWorker(b, ctx, "ttft")
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	ttft := func() time.Duration {
		req, _ := http.NewRequest("POST", bs.srv.URL+"/v2/"+bs.ep+"/openai/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", apitest.Key)
		t0 := time.Now()
		res, err := bs.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		r := bufio.NewReader(res.Body)
		var d time.Duration
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				break
			}
			if d == 0 && strings.HasPrefix(line, "data: {") {
				d = time.Since(t0)
			}
		}
		if d == 0 {
			b.Fatalf("no token: status %d", res.StatusCode)
		}
		return d
	}
	runsync := func() time.Duration {
		t0 := time.Now()
		bs.do(b, "POST", "/v2/"+bs.ep+"/runsync", []byte(`{"input":{}}`), nil)
		return time.Since(t0)
	}
	for i := 0; i < 10; i++ {
		ttft()
	}
	var a, s []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a = append(a, ttft())
		s = append(s, runsync())
	}
	b.StopTimer()
	cancel()
	bs.srv.CloseClientConnections()
	pct := func(l []time.Duration, p float64) float64 {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		return float64(l[int(p*float64(len(l)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(a, .5), "ttft-p50-ms")
	b.ReportMetric(pct(a, .99), "ttft-p99-ms")
	b.ReportMetric(pct(s, .5), "runsync-p50-ms")
	b.ReportMetric(pct(s, .99), "runsync-p99-ms")
}
