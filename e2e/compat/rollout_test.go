package compat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/internal/dockertest"
)

// deployWait is how long a deploy may take in these tests: a cold build
// commits four layers, and on a naive-diff storage driver (fuse-overlayfs)
// under a loaded machine a commit can take a minute.
const deployWait = 15 * time.Minute

// cliLong runs the berth binary as cli does, bounded by deployWait.
func (s *server) cliLong(args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	return s.cliFor(deployWait, args...)
}

// rolloutHandler is the worker of TestDeployRolloutLosesNoJob: each job it
// runs appends its id and the release's version to a file on the
// endpoint's network volume (a host folder the test reads), so a job run
// twice shows twice.
const rolloutHandler = `import runpod, time

VERSION = "v1"


def handler(job):
    with open("/runpod-volume/ran.log", "a") as f:
        f.write(job["id"] + " " + VERSION + "\n")
    time.sleep(0.05)
    return {"version": VERSION, "n": job["input"]["n"]}


runpod.serverless.start({"handler": handler})
`

// TestDeployRolloutLosesNoJob: jobs are sent every 250 ms (a steady
// stream one worker keeps up with on a loaded machine) while `berth
// deploy` of a handler change builds the new image and rolls the endpoint
// (one worker kept: the old one is drained once the new one is ready), and
// for a while after. Every job completes, with the output of the job it
// was (input n), and ran exactly once (the handler's own record of what
// it ran); jobs after the deploy answered are the new release's.
func TestDeployRolloutLosesNoJob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images, runs workers")
	}
	base := sdkBaseImage(t)
	s := startBerth(t)
	var nv struct{ ID string }
	s.rest("POST", "/v1/networkvolumes", map[string]any{"name": "ran", "size": 10, "dataCenterId": "BERTH-LOCAL"}, 200, &nv)
	dir := filepath.Join(t.TempDir(), dockertest.Unique("roll-"))
	if _, errOut, code := s.cli("init", dir); code != 0 {
		t.Fatalf("init: %s", errOut)
	}
	h := filepath.Join(dir, "handler.py")
	if err := os.WriteFile(h, []byte(rolloutHandler), 0o644); err != nil {
		t.Fatal(err)
	}
	var id string
	removeBuiltImages(t, s, &id)
	args := []string{"deploy", dir, "--compute-type", "CPU", "--workers-min", "1", "--workers-max", "1", "-o", "id",
		"--network-volume-id", nv.ID, "--build-arg", "BASE_IMAGE=" + base, "--build-arg", "PIP_INSTALL=no"}
	out, errOut, code := s.cliLong(args...)
	id = strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("first deploy: exit %d\n%s", code, errOut)
	}

	type sent struct {
		id string
		n  int
	}
	var (
		mu    sync.Mutex
		jobs  []sent
		limit = -1 // jobs to send in all; -1 until the deploy has returned
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() { // the steady stream
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			code, b := s.do("POST", "/v2/"+id+"/run", map[string]any{"input": map[string]any{"n": n}})
			var r struct{ ID string }
			if code != 200 || json.Unmarshal(b, &r) != nil || r.ID == "" {
				t.Errorf("job %d: POST /run answered %d %s", n, code, b)
				continue
			}
			mu.Lock()
			jobs = append(jobs, sent{r.ID, n})
			enough := limit >= 0 && len(jobs) >= limit
			mu.Unlock()
			if enough {
				return
			}
		}
	}()

	if err := os.WriteFile(h, []byte(strings.Replace(rolloutHandler, `VERSION = "v1"`, `VERSION = "v2"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, errOut, code := s.cliLong(args...); code != 0 {
		close(stop)
		wg.Wait()
		t.Fatalf("deploy of the change: exit %d\n%s", code, errOut)
	}
	deployed := time.Since(began)
	// 20 more jobs: five seconds of the stream after the deploy returned.
	mu.Lock()
	limit = len(jobs) + 20
	mu.Unlock()
	wg.Wait()

	type status struct {
		Status string
		Output struct {
			Version string
			N       int
		}
		Error any
	}
	results := map[string]status{}
	deadline := time.Now().Add(deployWait)
	for _, j := range jobs {
		for {
			var st status
			s.rest("GET", "/v2/"+id+"/status/"+j.id, nil, 200, &st)
			if st.Status == "COMPLETED" || st.Status == "FAILED" || st.Status == "CANCELLED" || st.Status == "TIMED_OUT" {
				results[j.id] = st
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s (n %d) still %s", j.id, j.n, st.Status)
			}
			time.Sleep(100 * time.Millisecond) // polling a job's status, bounded by the deadline
		}
	}
	ran, err := os.ReadFile(filepath.Join(s.Data, "volumes", nv.ID, "ran.log"))
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(ran)), "\n") {
		jid, _, _ := strings.Cut(l, " ")
		runs[jid]++
	}
	versions := map[string]int{}
	for _, j := range jobs {
		st := results[j.id]
		if st.Status != "COMPLETED" || st.Output.N != j.n {
			t.Errorf("job %s (n %d): %s, output %+v, error %v", j.id, j.n, st.Status, st.Output, st.Error)
		}
		if runs[j.id] != 1 {
			t.Errorf("job %s (n %d) ran %d times", j.id, j.n, runs[j.id])
		}
		versions[st.Output.Version]++
	}
	if len(runs) != len(jobs) {
		t.Errorf("the worker ran %d distinct jobs; %d were sent", len(runs), len(jobs))
	}
	if versions["v1"] == 0 || versions["v2"] == 0 {
		t.Errorf("jobs by release %v: the stream did not span the rollout", versions)
	}
	t.Logf("%d jobs sent over %s (deploy took %s): %d answered by v1, %d by v2; lost 0, failed 0, run twice 0 unless reported above",
		len(jobs), time.Since(began).Round(time.Millisecond), deployed.Round(time.Millisecond), versions["v1"], versions["v2"])
}
