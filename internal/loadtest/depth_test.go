package loadtest

import (
	"berth/internal/proctest"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var (
	depthFlag  = flag.Int("depth", 0, "fill the queue to this many jobs through HTTP; 0 skips TestQueueDepth")
	marksFlag  = flag.String("marks", "", "comma-separated depths to measure at [0, 10%, 50% and 100% of -depth]")
	drainFlag  = flag.Int("drain", 20000, "jobs 16 workers drain at each mark")
	probesFlag = flag.Int("probes", 2000, "requests per route for the latency percentiles at each mark")
)

const (
	apiKey      = "loadtest-key"
	submitters  = 32
	workers     = 16
	probeConc   = 4
	purgeProbes = 3 // probing goroutines during the purge
)

// TestQueueDepth runs `berth serve --rate-limits=off` with no workers,
// fills one endpoint's queue through HTTP and, at each mark, measures RSS,
// the p50/p99 of /run, /status and /health, the drain rate of 16 workers,
// and the time a restart takes to serve the full queue again; at the end it
// purges the queue while other requests run and reports their longest wait.
//
//	go test -run TestQueueDepth -v -timeout 2h ./internal/loadtest -args -depth 1000000
func TestQueueDepth(t *testing.T) {
	if *depthFlag <= 0 {
		t.Skip("a load tool: go test -run TestQueueDepth -v -timeout 2h ./internal/loadtest -args -depth 1000000")
	}
	marks := []int{0, *depthFlag / 10, *depthFlag / 2, *depthFlag}
	if *marksFlag != "" {
		marks = nil
		for _, f := range strings.Split(*marksFlag, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("-marks: %v", err)
			}
			marks = append(marks, n)
		}
	}
	dir := t.TempDir()
	bin := proctest.Build(t, "berth", false)
	b := newBerth(t, bin, dir)
	b.start()
	defer b.kill()

	var tpl, ep map[string]any
	b.mustCall("POST", "/v1/templates", `{"name":"loadtest","imageName":"loadtest"}`, &tpl)
	b.mustCall("POST", "/v1/endpoints", `{"templateId":"`+tpl["id"].(string)+`","workersMax":0}`, &ep)
	b.ep = ep["id"].(string)

	var rows []row
	for _, m := range marks {
		r := row{depth: m}
		// The drain is measured first: at mark 0 it drains a queue of just
		// the jobs it needs, the empty-queue rate the others compare with.
		b.fillTo(m + *drainFlag)
		r.drain = b.drain(*drainFlag)
		b.fillTo(m)
		r.fillRSS, r.fillPeak, r.fileRSS = b.rss()
		r.run, r.status, r.health = b.probe("POST", "/run"), b.probe("GET", "/status"), b.probe("GET", "/health")
		r.dbSize = b.dbSize()
		b.stop()
		r.restart = b.start()
		time.Sleep(time.Second) // let start-up garbage be collected
		r.restartRSS, _, r.restartFileRSS = b.rss()
		r.queued = b.inQueue()
		t.Logf("%s", r)
		rows = append(rows, r)
	}
	purge, pause := b.purge()
	t.Logf("purge-queue of %d jobs: %s; longest other request meanwhile %s", b.inQueueBeforePurge, purge.Round(time.Millisecond), pause.Round(time.Millisecond))

	var sb strings.Builder
	sb.WriteString("\n| queued jobs | RSS after fill (peak) | RSS after restart | restart to serving | /run p50 / p99 | /status p50 / p99 | /health p50 / p99 | drain, 16 workers | berth.db |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %d | %s (%s) | %s | %s | %s | %s | %s | %.0f jobs/s | %s |\n", r.queued,
			mb(r.fillRSS), mb(r.fillPeak), mb(r.restartRSS), r.restart.Round(time.Millisecond),
			lat(r.run), lat(r.status), lat(r.health), r.drain, mb(r.dbSize))
	}
	fmt.Fprintf(&sb, "\npurge-queue of %d jobs took %s; the longest /run, /status or /health meanwhile took %s\n",
		b.inQueueBeforePurge, purge.Round(time.Millisecond), pause.Round(time.Millisecond))
	t.Log(sb.String())
}

type row struct {
	depth, queued                                          int
	fillRSS, fillPeak, fileRSS, restartRSS, restartFileRSS int64
	dbSize                                                 int64
	restart                                                time.Duration
	run, status, health                                    [2]time.Duration
	drain                                                  float64
}

func (r row) String() string {
	return fmt.Sprintf("depth %d: RSS after fill %s (peak %s, file-backed %s), after restart %s (file-backed %s); restart %s; run %s, status %s, health %s; drain %.0f jobs/s; db %s",
		r.queued, mb(r.fillRSS), mb(r.fillPeak), mb(r.fileRSS), mb(r.restartRSS), mb(r.restartFileRSS), r.restart.Round(time.Millisecond),
		lat(r.run), lat(r.status), lat(r.health), r.drain, mb(r.dbSize))
}

func mb(b int64) string { return fmt.Sprintf("%d MB", b>>20) }

func lat(p [2]time.Duration) string {
	return fmt.Sprintf("%.2f / %.2f ms", float64(p[0].Microseconds())/1000, float64(p[1].Microseconds())/1000)
}

type berth struct {
	t                  *testing.T
	bin, data, addr    string
	ep                 string
	cmd                *exec.Cmd
	log                bytes.Buffer
	client             *http.Client
	idMu               sync.Mutex
	ids                []string // a sample of submitted ids, for /status
	inQueueBeforePurge int
}

func newBerth(t *testing.T, bin, dir string) *berth {
	return &berth{t: t, bin: bin, data: filepath.Join(dir, "data"), addr: freeAddr(t),
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Minute}}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs berth and returns how long it took to answer the endpoint's
// /health (or, before there is an endpoint, to accept connections).
func (b *berth) start() time.Duration {
	b.log.Reset()
	b.cmd = exec.Command(b.bin, "serve", "--addr", b.addr, "--data", b.data, "--rate-limits=off")
	b.cmd.Env = proctest.Environ("BERTH_API_KEY=" + apiKey)
	b.cmd.Stdout, b.cmd.Stderr = &syncWriter{w: &b.log}, &syncWriter{w: &b.log}
	began := time.Now()
	if err := b.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	for deadline := began.Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b.ep == "" {
			if c, err := net.Dial("tcp", b.addr); err == nil {
				c.Close()
				return time.Since(began)
			}
			continue
		}
		if code, _ := b.call("GET", "/v2/"+b.ep+"/health", "", nil); code == 200 {
			return time.Since(began)
		}
	}
	b.t.Fatalf("berth did not start:\n%s", b.log.String())
	return 0
}

func (b *berth) stop() {
	b.cmd.Process.Signal(syscall.SIGTERM)
	b.cmd.Wait()
}

func (b *berth) kill() {
	if b.cmd != nil && b.cmd.ProcessState == nil {
		b.cmd.Process.Kill()
		b.cmd.Wait()
	}
	if b.t.Failed() {
		b.t.Logf("berth log:\n%s", b.log.String())
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (b *berth) call(method, path, body string, out any) (int, error) {
	return b.callCtx(context.Background(), method, path, body, out)
}

func (b *berth) callCtx(ctx context.Context, method, path, body string, out any) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+b.addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	res, err := b.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if out != nil && res.StatusCode == 200 {
		return res.StatusCode, json.NewDecoder(res.Body).Decode(out)
	}
	_, err = io.Copy(io.Discard, res.Body)
	return res.StatusCode, err
}

func (b *berth) mustCall(method, path, body string, out any) {
	if code, err := b.call(method, path, body, out); code != 200 || err != nil {
		b.t.Fatalf("%s %s: %d %v", method, path, code, err)
	}
}

func (b *berth) inQueue() int {
	var h struct {
		Jobs struct {
			InQueue int `json:"inQueue"`
		} `json:"jobs"`
	}
	b.mustCall("GET", "/v2/"+b.ep+"/health", "", &h)
	return h.Jobs.InQueue
}

// fillTo submits jobs from 32 clients until the queue holds n.
func (b *berth) fillTo(n int) {
	need := int64(n - b.inQueue())
	if need <= 0 {
		return
	}
	began := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= need; i = next.Add(1) {
				var r struct {
					ID string `json:"id"`
				}
				if code, err := b.call("POST", "/v2/"+b.ep+"/run", `{"input":{"prompt":"a photo of a lighthouse at dawn","seed":`+strconv.FormatInt(i, 10)+`}}`, &r); code != 200 || err != nil {
					failed.Store(fmt.Sprintf("run: %d %v", code, err))
					return
				}
				if i%64 == 0 {
					b.idMu.Lock()
					b.ids = append(b.ids, r.ID)
					b.idMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		b.t.Fatal(f)
	}
	b.t.Logf("filled %d jobs in %s (%.0f jobs/s)", need, time.Since(began).Round(time.Millisecond), float64(need)/time.Since(began).Seconds())
}

// drain runs 16 workers (job-take, job-done) until n jobs are done and
// returns the rate.
func (b *berth) drain(n int) float64 {
	var done atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var took time.Duration
	var once sync.Once
	began := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wid := fmt.Sprintf("loadtest-w%d", w)
			for done.Load() < int64(n) {
				var j struct {
					ID    string          `json:"id"`
					Input json.RawMessage `json:"input"`
				}
				code, err := b.callCtx(ctx, "GET", "/v2/"+b.ep+"/job-take/"+wid+"?gpu=&job_in_progress=0", "", &j)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					b.t.Errorf("job-take: %v", err)
					return
				}
				if code != 200 || j.ID == "" {
					continue
				}
				if code, err := b.call("POST", "/v2/"+b.ep+"/job-done/"+wid+"/"+j.ID+"?gpu=&isStream=false", `{"output":`+string(j.Input)+`}`, nil); code != 200 || err != nil {
					b.t.Errorf("job-done: %d %v", code, err)
					return
				}
				if done.Add(1) == int64(n) {
					once.Do(func() { took = time.Since(began); cancel() })
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / took.Seconds()
}

// probe times requests to one route from 4 clients and returns p50, p99.
func (b *berth) probe(method, route string) [2]time.Duration {
	var mu sync.Mutex
	var lats []time.Duration
	var next atomic.Int64
	var wg sync.WaitGroup
	for range probeConc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*probesFlag) {
				d := b.once(method, route)
				mu.Lock()
				lats = append(lats, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(lats)
	return [2]time.Duration{lats[len(lats)/2], lats[len(lats)*99/100]}
}

// once makes one request of a route and returns its latency.
func (b *berth) once(method, route string) time.Duration {
	path, body := "/v2/"+b.ep+route, ""
	switch route {
	case "/run":
		body = `{"input":{"probe":true}}`
	case "/status":
		b.idMu.Lock()
		path += "/" + b.ids[rand.IntN(len(b.ids))]
		b.idMu.Unlock()
	}
	began := time.Now()
	code, err := b.call(method, path, body, nil)
	d := time.Since(began)
	if err != nil || (code != 200 && code != 404) {
		b.t.Fatalf("%s %s: %d %v", method, path, code, err)
	}
	return d
}

// purge empties the queue while 3 clients keep calling /run, /status and
// /health, and returns the purge's duration and their longest request.
func (b *berth) purge() (took, longest time.Duration) {
	b.inQueueBeforePurge = b.inQueue()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var maxNs atomic.Int64
	routes := [purgeProbes][2]string{{"POST", "/run"}, {"GET", "/status"}, {"GET", "/health"}}
	var warm sync.WaitGroup // each client has had one answer: all are calling
	for _, r := range routes {
		wg.Add(1)
		warm.Add(1)
		go func() {
			defer wg.Done()
			var warmed sync.Once
			defer warmed.Do(warm.Done) // also when once fails the test
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := int64(b.once(r[0], r[1]))
				for m := maxNs.Load(); d > m && !maxNs.CompareAndSwap(m, d); m = maxNs.Load() {
				}
				warmed.Do(warm.Done)
			}
		}()
	}
	warm.Wait()
	began := time.Now()
	b.mustCall("POST", "/v2/"+b.ep+"/purge-queue", "", nil)
	took = time.Since(began)
	close(stop)
	wg.Wait()
	return took, time.Duration(maxNs.Load())
}

// rss reads the process's resident set, its peak and the file-backed part
// (bbolt's mapped file).
func (b *berth) rss() (rss, peak, file int64) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		b.t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		case "RssFile:":
			file = kb << 10
		}
	}
	return rss, peak, file
}

func (b *berth) dbSize() int64 {
	fi, err := os.Stat(filepath.Join(b.data, "berth.db"))
	if err != nil {
		b.t.Fatal(err)
	}
	return fi.Size()
}
