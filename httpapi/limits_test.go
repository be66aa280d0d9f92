package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth/httpapi"
	"berth/httplimit"
	"berth/internal/apitest"
	"berth/queue"
)

// TestSlowBodyIsCutOff: a client that sends its body a byte at a time is
// answered 408 once it falls behind the minimum rate, its connection is
// closed, and nothing is queued.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	e := newEnv(t, apitest.RawConn(httplimit.Limits{BodyGrace: time.Second, MinBodyRate: 1000}))
	ep := e.Endpoint(nil)
	conn, err := net.Dial("tcp", e.App.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v2/%s/run HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"input\":{\"x\":\"", ep, apitest.Key)
	start := time.Now()
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopWriting := func() { stopOnce.Do(func() { close(stop) }) }
	defer stopWriting()
	go func() { // 10 bytes/s, far under the 1000 bytes/s minimum
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := conn.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the slow body: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	took := time.Since(start)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "too slowly") {
		t.Fatalf("got %d %s, want 408 saying the body was too slow", res.StatusCode, body)
	}
	if took < time.Second {
		t.Errorf("cut off after %s, before the 1 s grace", took)
	}
	// Closed: a clean EOF, or a reset when a byte the writer had in flight
	// reached the closed socket (the kernel answers it with RST).
	stopWriting()
	if _, err := br.ReadByte(); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the connection stayed open after the 408: %v", err)
	}
	if h := e.Q.Health(ep); h.Jobs.InQueue != 0 {
		t.Errorf("a job was queued from the cut-off body: %+v", h.Jobs)
	}
	t.Logf("slow body answered 408 after %s", took.Round(time.Millisecond))
}

// TestSteadyUploadOutlastsTheGrace: a body that takes several times the
// grace but keeps above the minimum rate is accepted, and a long poll whose
// body was read is not cut off by the body deadline afterwards.
func TestSteadyUploadOutlastsTheGrace(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	e := newEnv(t, apitest.RawConn(httplimit.Limits{BodyGrace: 500 * time.Millisecond, MinBodyRate: 2000}))
	ep := e.Endpoint(nil)
	pad := strings.Repeat("p", 8000)
	body := `{"input":{"pad":"` + pad + `"}}`
	pr, pw := io.Pipe()
	go func() { // ≈ 5000 bytes/s for ≈ 1.6 s: three times the grace
		for i := 0; i < len(body); i += 500 {
			time.Sleep(100 * time.Millisecond)
			if _, err := pw.Write([]byte(body[i:min(i+500, len(body))])); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", e.Base+"/v2/"+ep+"/runsync?wait=30000", pr)
	req.ContentLength = int64(len(body))
	req.Header.Set("Authorization", "Bearer "+apitest.Key)
	type result struct {
		code int
		body string
		err  error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		done <- result{code: res.StatusCode, body: string(b)}
	}()
	// The job is queued once the whole body is in; then runsync waits.
	var jobs []queue.TakenJob
	for deadline := time.Now().Add(60 * time.Second); len(jobs) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the upload never became a job")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		jobs, _ = e.Q.Take(ctx, ep, "w1", 1)
		cancel()
	}
	taken := time.Now()
	if took := taken.Sub(start); took < 1500*time.Millisecond {
		t.Fatalf("the upload took %s; the test needs it slower than the grace", took)
	}
	// Hold the runsync until the body's last read deadline has passed
	// before answering: the server set it to its start (before the job was
	// queued) + grace + bytes/rate, had it not cleared it at the body's end.
	bodyDeadline := taken.Add(500*time.Millisecond + time.Duration(len(body))*time.Second/2000)
	<-time.After(time.Until(bodyDeadline) + 100*time.Millisecond)
	out, _ := json.Marshal(map[string]any{"output": len(pad)})
	rep, _ := queue.ParseDone(out, false)
	if ok, err := e.Q.Done(ep, "w1", jobs[0].ID, rep); !ok || err != nil {
		t.Fatalf("done: %v %v", ok, err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.code != 200 || !strings.Contains(r.body, `"COMPLETED"`) || !strings.Contains(r.body, `"output":8000`) {
			t.Fatalf("runsync: %d %s %v", r.code, r.body, r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("runsync never answered")
	}
}

// TestLongPollCaps: a worker may hold MaxLongPollsPerWorker long polls and a
// key MaxLongPollsPerKey; past that the answer is 429 with Retry-After at
// once, and a released poll frees its place. Every step waits for the
// server's own count of held polls (berth_long_polls), so a slow machine
// only makes it slower: a poll is proven held, never assumed from a
// client-side timeout.
func TestLongPollCaps(t *testing.T) {
	e := newEnv(t, apitest.RawHTTP(func(c *httpapi.Settings) { c.MaxLongPollsPerWorker, c.MaxLongPollsPerKey = 2, 3 }))
	ep := e.Endpoint(nil)
	id := e.Run(ep, `{}`)   // a job nobody runs: status-sync on it waits (on the test's fake clock)
	idle := e.Endpoint(nil) // no jobs: job-take on it waits (a job-take on ep would take the job and end)

	call := func(ctx context.Context, path string) (*http.Response, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.Base+path, nil)
		req.Header.Set("Authorization", "Bearer "+apitest.Key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b), nil
	}
	// held is the server's count of the long polls it holds.
	held := func() float64 {
		res, body, err := call(context.Background(), "/metrics")
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("/metrics: %v %v", res, err)
		}
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, "berth_long_polls "); ok {
				var n float64
				fmt.Sscan(v, &n)
				return n
			}
		}
		t.Fatalf("no berth_long_polls in /metrics")
		return 0
	}
	waitHeld := func(n float64) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got := held()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server holds %v long polls, want %v", got, n)
			}
		}
	}
	// hold makes a long poll on path until ctx ends; what the server
	// answered, if it did, comes on the channel ("" when the client left).
	hold := func(ctx context.Context, path string) <-chan string {
		out := make(chan string, 1)
		go func() {
			res, body, err := call(ctx, path)
			if err != nil {
				out <- ""
				return
			}
			out <- fmt.Sprintf("%d %s", res.StatusCode, body)
		}()
		return out
	}
	released := func(cancel context.CancelFunc, polls ...<-chan string) {
		t.Helper()
		cancel()
		for _, p := range polls {
			if got := <-p; got != "" {
				t.Fatalf("a held long poll was answered: %s", got)
			}
		}
		waitHeld(0)
	}
	// refused makes one request that must be refused at once (no client
	// timeout: a held request would fail the test by its deadline).
	refused := func(path, limit string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, body, err := call(ctx, path)
		if err != nil {
			t.Fatalf("%s was held past the cap: %v", path, err)
		}
		if res.StatusCode != 429 || !strings.Contains(body, limit) || res.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: %d %s (Retry-After %q), want 429 naming %q", path, res.StatusCode, body, res.Header.Get("Retry-After"), limit)
		}
	}

	// Per worker: two job-takes held, the third refused; another worker
	// is not affected.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	w1a, w1b := hold(wctx, "/v2/"+idle+"/job-take/w1"), hold(wctx, "/v2/"+idle+"/job-take/w1")
	waitHeld(2)
	refused("/v2/"+idle+"/job-take/w1", "worker w1 (limit 2)")
	w2 := hold(wctx, "/v2/"+idle+"/job-stop/w2")
	waitHeld(3)
	released(wcancel, w1a, w1b, w2)
	// Released places are free again: w1 may hold two once more.
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	w1c, w1d := hold(actx, "/v2/"+idle+"/job-take/w1"), hold(actx, "/v2/"+idle+"/job-take-batch/w1?batch_size=2")
	waitHeld(2)
	released(acancel, w1c, w1d)

	// Per key: three status-syncs held, the fourth (a stream) refused.
	kctx, kcancel := context.WithCancel(context.Background())
	defer kcancel()
	var polls []<-chan string
	for i := 0; i < 3; i++ {
		polls = append(polls, hold(kctx, "/v2/"+ep+"/status-sync/"+id+"?wait=60000"))
	}
	waitHeld(3)
	refused("/v2/"+ep+"/stream/"+id+"?wait=60000", "this API key (limit 3)")
	// Short requests are never counted.
	res, body, err := call(context.Background(), "/v2/"+ep+"/health")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("health while the key's long polls are full: %v %s %v", res, body, err)
	}
	released(kcancel, polls...)
}
