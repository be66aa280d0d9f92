package jobs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/internal/disktest"
)

// A full disk while clients submit and two workers run jobs: /run is
// refused with a retryable 503 (Retry-After, the cause named), not a 500;
// the failures are counted on /metrics; once space frees everything goes
// through again, every acknowledged job completes, and what Berth serves
// from memory is what it reads back from disk after a restart (the writes
// that failed meanwhile — job takes, results — were kept and written).
func TestE2EDiskFullLosesNothing(t *testing.T) {
	dir := disktest.Tmpfs(t, 6<<20)
	e := newEnv(t, apitest.WithDataDir(dir))
	ep := e.Endpoint(nil)
	var acked []string
	submit := func() resp {
		input := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, len(acked), strings.Repeat("x", 2000))
		r := e.Do("POST", "/v2/"+ep+"/run", "Bearer "+apitest.Key, `{"input":`+input+`}`)
		if r.Code == 200 {
			acked = append(acked, r.JSON(t)["id"].(string))
		}
		return r
	}
	// Queued work, then the disk fills, then workers come: their takes
	// and results meet the full disk.
	for range 300 {
		if r := submit(); r.Code != 200 {
			t.Fatalf("/run: %d %s", r.Code, r.Body)
		}
	}
	filler := filepath.Join(dir, "filler")
	size := disktest.Fill(t, filler)
	if err := os.Truncate(filler, size-256<<10); err != nil { // the last 256 KiB fill as jobs come
		t.Fatal(err)
	}
	// Their job-done back-off a tenth of the SDK's: the twenty kept
	// writes below come from their retries.
	const retry = "ECHOWORKER_RETRY_BASE=100ms"
	workers := []*workerProc{e.startWorker(ep, retry), e.startWorker(ep, retry)}

	// Submit until the disk refuses twenty in a row.
	var refused resp
	var slowest503 time.Duration // how long a refused client waited for its answer
	for fails := 0; fails < 20 && len(acked) < 5000; {
		began := time.Now()
		r := submit()
		switch r.Code {
		case 200:
			fails = 0
		case 503:
			refused = r
			fails++
			slowest503 = max(slowest503, time.Since(began))
		default:
			t.Fatalf("/run on a filling disk: %d %s", r.Code, r.Body)
		}
	}
	if refused.Code != 503 || len(acked) == 0 {
		t.Fatalf("no 503 after %d acknowledged jobs", len(acked))
	}
	if refused.Hdr.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if msg := refused.JSON(t)["error"].(string); !strings.Contains(msg, "no space left on device") {
		t.Errorf("error %q does not say why", msg)
	}
	m := string(e.Do("GET", "/metrics", "Bearer "+apitest.Key, nil).Body)
	if strings.Contains(m, `berth_store_write_failures_total{kept="false"} 0`) {
		t.Errorf("/metrics does not count the failed writes:\n%s", grepLines(m, "berth_store_write"))
	}
	// The workers' writes fail too (kept: their changes are in memory).
	for deadline := time.Now().Add(60 * time.Second); e.DB.Stats().Kept < 20; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the workers' writes never met the full disk: %+v", e.DB.Stats())
		}
	}
	t.Logf("%d jobs acknowledged before the disk filled; the slowest 503 answered in %s; writes: %+v",
		len(acked), slowest503.Round(time.Millisecond), e.DB.Stats())

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	// Every acknowledged job completes, and no failed write is left.
	seen := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, id := range acked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := e.WaitStatus(ep, id, "COMPLETED")
			if !strings.Contains(fmt.Sprint(out["output"]), fmt.Sprintf("n:%d ", i)) {
				t.Errorf("job %s: output %v is not its own", id, out["output"])
			}
			mu.Lock()
			seen[id] = fmt.Sprint(out["output"])
			mu.Unlock()
		}()
		if i%64 == 63 {
			wg.Wait()
		}
	}
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); e.DB.Stats().Retrying > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("failed writes never written: %+v", e.DB.Stats())
		}
	}
	e.Run(ep, `{"after":"recovery"}`)
	t.Logf("space freed: every acknowledged job completed and every kept write landed %s later", time.Since(freed).Round(time.Millisecond))

	// Memory and disk agree: what was served is what a restart reads.
	for _, w := range workers {
		w.cmd.Process.Kill()
		w.cmd.Wait()
	}
	e.Restart()
	for _, id := range acked {
		r := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200)
		if r["status"] != "COMPLETED" || fmt.Sprint(r["output"]) != seen[id] {
			t.Fatalf("job %s after a restart: %v, served before as COMPLETED %s", id, r, seen[id])
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
