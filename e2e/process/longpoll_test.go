package process_test

import (
	"berth/internal/proctest"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestManyLongPollsLeaveHealthResponsive runs the real binary (built
// without -race, which caps a process at 8128 goroutines), holds 5,000
// status-sync long polls on it from 5,000 connections, and measures what an
// operator would: /health latency, and goroutines and memory from /metrics
// and /proc. Then it releases them and checks that everything is returned.
func TestManyLongPollsLeaveHealthResponsive(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const polls = 5000
	// Both processes (the server inherits the limit) need a descriptor per
	// connection.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < polls+500 {
		if lim.Max < polls+500 {
			t.Skipf("RLIMIT_NOFILE hard limit %d is below %d", lim.Max, polls+500)
		}
		old := lim.Cur
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		defer func() { lim.Cur = old; syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) }()
	}

	const key = "longpoll-key"
	// No container runtime: the job below must stay queued.
	berth := proctest.Start(t, proctest.Options{Key: key, Args: []string{"--rate-limits=off"}, Env: []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"}})
	addr, base := berth.Addr, berth.Base
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	obj := func(code int, b []byte) map[string]any {
		var m map[string]any
		if code != 200 || json.Unmarshal(b, &m) != nil {
			t.Fatalf("%d %s", code, b)
		}
		return m
	}
	tpl := obj(call("POST", "/v1/templates", `{"name":"lp","imageName":"none:latest","isServerless":true}`))
	ep := obj(call("POST", "/v1/endpoints", fmt.Sprintf(`{"templateId":%q}`, tpl["id"])))["id"].(string)
	job := obj(call("POST", "/v2/"+ep+"/run", `{"input":{}}`))["id"].(string)

	metric := func(name string) float64 {
		_, b := call("GET", "/metrics", "")
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == name {
				v, _ := strconv.ParseFloat(f[1], 64)
				return v
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	rss := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", berth.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
				return kb << 10
			}
		}
		return 0
	}
	health := func() (time.Duration, time.Duration) {
		var ds []time.Duration
		for i := 0; i < 21; i++ {
			start := time.Now()
			if code, b := call("GET", "/v2/"+ep+"/health", ""); code != 200 {
				t.Fatalf("health: %d %s", code, b)
			}
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2], ds[len(ds)-1]
	}
	waitMetric := func(name string, ok func(float64) bool) float64 {
		for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if v := metric(name); ok(v) {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s stuck at %v", name, metric(name))
			}
		}
	}

	p50Idle, maxIdle := health()
	g0, rss0 := metric("go_goroutines"), rss()

	conns := make([]net.Conn, 0, polls)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	req := fmt.Sprintf("GET /v2/%s/status-sync/%s?wait=300000 HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer %s\r\n\r\n", ep, job, key)
	for i := 0; i < polls; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	waitMetric("berth_long_polls", func(v float64) bool { return v >= polls })
	p50, maxH := health()
	g1, rss1 := metric("go_goroutines"), rss()
	heap := metric("go_memstats_heap_inuse_bytes")
	stack := metric("go_memstats_stack_inuse_bytes")
	perPoll := float64(rss1-rss0) / polls
	t.Logf("%d long polls held: /health p50 %s max %s (idle: p50 %s max %s); goroutines %v → %v; RSS %d → %d MiB (%.1f KiB per poll); heap in use %d MiB, stacks %d MiB",
		polls, p50.Round(time.Microsecond), maxH.Round(time.Microsecond), p50Idle.Round(time.Microsecond), maxIdle.Round(time.Microsecond),
		g0, g1, rss0>>20, rss1>>20, perPoll/1024, int64(heap)>>20, int64(stack)>>20)

	// Bounds: net/http holds two goroutines per waiting request (the
	// handler's and the connection's background read); memory per held
	// poll is a few tens of KiB (goroutine stacks, bufio buffers, the
	// request). Generous, so a loaded machine passes, tight enough to catch
	// a leak per poll of a goroutine or a buffer.
	if g1-g0 > 2.5*polls {
		t.Errorf("%v goroutines for %d polls: more than 2.5 per poll", g1-g0, polls)
	}
	if perPoll > 64<<10 {
		t.Errorf("RSS grew %.1f KiB per held poll, more than 64", perPoll/1024)
	}
	if maxH > 5*time.Second || p50 > time.Second {
		t.Errorf("/health with %d long polls held: p50 %s, max %s", polls, p50, maxH)
	}

	// The held polls still answer: finish the job through the worker
	// protocol and every connection gets the result.
	code, b := call("GET", "/v2/"+ep+"/job-take/lp-worker", "")
	if code != 200 {
		t.Fatalf("job-take: %d %s", code, b)
	}
	if code, b := call("POST", "/v2/"+ep+"/job-done/lp-worker/"+job, `{"output":"done"}`); code != 200 {
		t.Fatalf("job-done: %d %s", code, b)
	}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("poll %d: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !bytes.Contains(body, []byte(`"COMPLETED"`)) {
			t.Fatalf("poll %d: %d %s", i, res.StatusCode, body)
		}
		c.Close()
	}
	conns = nil
	waitMetric("berth_long_polls", func(v float64) bool { return v == 0 })
	g2 := waitMetric("go_goroutines", func(v float64) bool { return v <= g0+50 })
	t.Logf("after release: goroutines %v", g2)
}
