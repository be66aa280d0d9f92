package loadtest

import (
	"berth/internal/proctest"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var coldFlag = flag.Int("coldtake", 0, "queue this many jobs on a second endpoint for TestColdTakeLatency; 0 skips it")

// TestColdTakeLatency measures what taking jobs from one endpoint's huge
// cold queue costs the other endpoints: `berth serve` with endpoint A
// (probed) and endpoint B (drained). At each of two depths of B's queue —
// a queue of just the jobs the drain needs, the baseline, then -coldtake
// jobs — Berth is restarted (every queued job is then kept as its entry
// and read from bbolt when taken), berth.db's pages are dropped from the
// page cache (so the takes fault them back in from disk), and 16 workers
// take and finish B's jobs while A's /run and /status are timed from 4
// clients. The queue's lock is not held across those reads: A's p99
// should not follow B's depth.
//
//	go test -run TestColdTakeLatency -v -timeout 2h ./internal/loadtest -args -coldtake 1000000
func TestColdTakeLatency(t *testing.T) {
	if *coldFlag <= 0 {
		t.Skip("a load tool: go test -run TestColdTakeLatency -v -timeout 2h ./internal/loadtest -args -coldtake 1000000")
	}
	dir := t.TempDir()
	bin := proctest.Build(t, "berth", false)
	b := newBerth(t, bin, dir)
	b.start()
	defer b.kill()
	var tpl, epA, epB map[string]any
	b.mustCall("POST", "/v1/templates", `{"name":"coldtake","imageName":"coldtake"}`, &tpl)
	b.mustCall("POST", "/v1/endpoints", `{"templateId":"`+tpl["id"].(string)+`","workersMax":0}`, &epA)
	b.mustCall("POST", "/v1/endpoints", `{"templateId":"`+tpl["id"].(string)+`","workersMax":0}`, &epB)
	a, bq := epA["id"].(string), epB["id"].(string)
	b.ep = a
	b.fillTo(2000) // ids for A's /status
	const drained = 20000

	type result struct {
		depth              int
		run, status        [2]time.Duration
		rate               float64
		restart            time.Duration
		faultsMB, dbSizeMB int64
	}
	var rows []result
	for _, depth := range []int{drained, *coldFlag} {
		b.ep = bq
		b.fillTo(depth)
		b.stop()
		b.ep = a
		restart := b.start()
		dropCache(t, filepath.Join(b.data, "berth.db"))
		before := majorFaults(t, b.cmd.Process.Pid)
		ctx, cancel := context.WithCancel(context.Background())
		var done atomic.Int64
		var wg sync.WaitGroup
		began := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.work(ctx, bq, fmt.Sprintf("cold-w%d", w), &done, drained)
			}()
		}
		r := result{depth: depth, restart: restart}
		r.run, r.status = b.probe("POST", "/run"), b.probe("GET", "/status")
		cancel()
		wg.Wait()
		r.rate = float64(done.Load()) / time.Since(began).Seconds()
		r.faultsMB = (majorFaults(t, b.cmd.Process.Pid) - before) * int64(os.Getpagesize()) >> 20
		r.dbSizeMB = b.dbSize() >> 20
		t.Logf("B queued %d: A /run %s, A /status %s; B drained at %.0f jobs/s; %d MB read back by page faults; restart %s",
			depth, lat(r.run), lat(r.status), r.rate, r.faultsMB, restart.Round(time.Millisecond))
		rows = append(rows, r)
	}
	var sb strings.Builder
	sb.WriteString("\n| B's queue (cold) | A `/run` p50 / p99 | A `/status` p50 / p99 | B drained, 16 workers | read back by page faults | berth.db |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %d | %s | %s | %.0f jobs/s | %d MB | %d MB |\n", r.depth, lat(r.run), lat(r.status), r.rate, r.faultsMB, r.dbSizeMB)
	}
	ratio := func(f func(result) time.Duration) float64 { return float64(f(rows[1])) / float64(f(rows[0])) }
	fmt.Fprintf(&sb, "\np99 at %d against the baseline: /run %.2f×, /status %.2f×\n", rows[1].depth,
		ratio(func(r result) time.Duration { return r.run[1] }), ratio(func(r result) time.Duration { return r.status[1] }))
	t.Log(sb.String())
}

// work takes and finishes jobs of ep as one worker until ctx ends or done
// reaches limit.
func (b *berth) work(ctx context.Context, ep, wid string, done *atomic.Int64, limit int64) {
	for ctx.Err() == nil && done.Load() < limit {
		var j struct {
			ID    string          `json:"id"`
			Input json.RawMessage `json:"input"`
		}
		code, err := b.callCtx(ctx, "GET", "/v2/"+ep+"/job-take/"+wid+"?gpu=&job_in_progress=0", "", &j)
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
		if code, err := b.call("POST", "/v2/"+ep+"/job-done/"+wid+"/"+j.ID+"?gpu=&isStream=false", `{"output":`+string(j.Input)+`}`, nil); code != 200 || err != nil {
			b.t.Errorf("job-done: %d %v", code, err)
			return
		}
		done.Add(1)
	}
}

// dropCache drops a file's pages from the page cache (its own pages only:
// POSIX_FADV_DONTNEED), so reading them again goes to the disk.
func dropCache(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	const fadvDontNeed = 4
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); e != 0 {
		t.Fatalf("fadvise: %v", e)
	}
}

// majorFaults is the process's count of page faults that read the disk.
func majorFaults(t *testing.T, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) end with ")".
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	var n int64
	fmt.Sscan(f[9], &n) // majflt is field 12 of stat, the 10th after the name
	return n
}
