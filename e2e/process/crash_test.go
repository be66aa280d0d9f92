package process_test

import (
	"berth/internal/proctest"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// TestCrashLosesNoAcceptedJob kills Berth with SIGKILL while clients submit
// and workers run jobs, restarts it on the same data, and accounts for every
// id it had returned: each must complete with its own output.
func TestCrashLosesNoAcceptedJob(t *testing.T) {
	t.Parallel() // a process of its own: overlaps the other binaries' tests
	if testing.Short() {
		t.Skip("crash test builds and runs binaries")
	}
	workerBin := proctest.Build(t, "berth/testdata/echoworker", false)
	const key = "crash-test-key"
	berth := proctest.Start(t, proctest.Options{Key: key, Args: []string{"--rate-limits=off", "--worker-timeout=5s", "--reconcile-grace=3s"}})
	base := berth.Base

	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path string, body any, out any) (int, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		if out != nil {
			if err := json.NewDecoder(res.Body).Decode(out); err != nil {
				return res.StatusCode, err
			}
		}
		return res.StatusCode, nil
	}
	var tpl, ep map[string]any
	if code, err := call("POST", "/v1/templates", map[string]any{"name": "crash", "imageName": "x"}, &tpl); code != 200 {
		t.Fatal(code, err)
	}
	if code, err := call("POST", "/v1/endpoints", map[string]any{"templateId": tpl["id"]}, &ep); code != 200 {
		t.Fatal(code, err)
	}
	epID := ep["id"].(string)
	for i := 0; i < 2; i++ {
		var wenv map[string]string
		if code, err := call("GET", "/v1/endpoints/"+epID+"/worker-env", nil, &wenv); code != 200 {
			t.Fatal(code, err)
		}
		w := exec.Command(workerBin)
		for k, v := range wenv {
			w.Env = append(w.Env, k+"="+v)
		}
		w.Env = append(w.Env, "RUNPOD_PING_INTERVAL=1000", "ECHOWORKER_CONCURRENCY=2")
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { w.Process.Kill(); w.Wait() }()
	}

	// Submit from 4 clients; kill Berth once 300 ids were returned.
	var mu sync.Mutex
	accepted := map[string]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	killAt := make(chan struct{})
	var once sync.Once
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := c*1_000_000 + i
				var r map[string]any
				code, err := call("POST", "/v2/"+epID+"/run", map[string]any{"input": map[string]any{"echo": n, "sleep_ms": 5}}, &r)
				if err != nil || code != 200 {
					continue // not accepted
				}
				mu.Lock()
				accepted[r["id"].(string)] = n
				if len(accepted) >= 300 {
					once.Do(func() { close(killAt) })
				}
				mu.Unlock()
			}
		}(c)
	}
	<-killAt
	berth.Kill()
	close(stop)
	wg.Wait()
	t.Logf("killed Berth after %d accepted jobs", len(accepted))

	berth.Start()
	deadline := time.Now().Add(90 * time.Second)
	for id, n := range accepted {
		for {
			var st map[string]any
			code, err := call("POST", "/v2/"+epID+"/status-sync/"+id+"?wait=10000", nil, &st)
			if err == nil && code == 404 {
				t.Fatalf("accepted job %s lost after the crash", id)
			}
			if err == nil && st["status"] == "COMPLETED" {
				if st["output"] != float64(n) {
					t.Fatalf("job %s output %v, want %d", id, st["output"], n)
				}
				break
			}
			if err == nil && st["status"] != "IN_QUEUE" && st["status"] != "IN_PROGRESS" {
				t.Fatalf("job %s ended %v", id, st)
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s not completed after restart: %v %v", id, st, err)
			}
		}
	}
}
