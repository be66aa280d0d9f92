package process_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth/cli"
	"berth/internal/apptest"
	"berth/internal/dockertest"
	"berth/internal/proctest"
)

// TestCLIWithWorkerContainers drives `berth serve` (the built binary: store,
// queue, Docker runtime) with the CLI the README shows: a template, an
// endpoint created with --wait until its worker container is ready, a job
// through it with run --wait, the worker's logs, a pod, and deletion.
func TestCLIWithWorkerContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containers")
	}
	docker := dockertest.Require(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// Remove whatever this Berth left (registered first: runs last).
	t.Cleanup(func() { apptest.RemoveContainers(t, data) })

	const key = "cli-e2e-key"
	// On loopback, as by default: containers reach the worker protocol
	// through the listener on the Docker bridge, same port.
	addr := proctest.Start(t, proctest.Options{Data: data, Key: key, Args: []string{"--rate-limits", "off"}}).Addr

	env := map[string]string{"BERTH_URL": "http://" + addr, "BERTH_API_KEY": key}
	berth := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := cli.Main(args, cli.Options{Version: "test", Stdout: &out, Stderr: &errb, Stdin: strings.NewReader(""),
			Getenv: func(k string) string { return env[k] }, IsTerminal: func(io.Writer) bool { return false }})
		return out.String(), errb.String(), code
	}
	ok := func(v any, args ...string) string {
		t.Helper()
		out, errs, code := berth(args...)
		if code != 0 {
			t.Fatalf("berth %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errs)
		}
		if v != nil {
			if err := json.Unmarshal([]byte(out), v); err != nil {
				t.Fatalf("berth %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		return errs
	}

	var tpl, ep struct{ ID string }
	ok(&tpl, "template", "create", "echo", image, "--json")
	progress := ok(&ep, "endpoint", "create", tpl.ID, "--name", "echo", "--workers-min", "1", "--workers-max", "1", "--compute-type", "CPU", "--wait", "--timeout", "3m", "--json")
	if !strings.Contains(progress, "waiting for 1 worker") {
		t.Errorf("no progress shown while waiting: %q", progress)
	}
	var job struct {
		ID     string
		Status string
		Output map[string]any
	}
	ok(&job, "run", ep.ID, `{"echo":{"hello":"container"}}`, "--wait", "--json")
	if job.Status != "COMPLETED" || job.Output["hello"] != "container" {
		t.Fatalf("job: %+v", job)
	}
	var h struct{ Workers struct{ Idle, Running int } }
	ok(&h, "health", ep.ID, "--json")
	if h.Workers.Idle+h.Workers.Running != 1 {
		t.Fatalf("health: %+v", h)
	}
	// logsUntil runs `berth logs ARGS` until its output satisfies has: the
	// job has ended when its worker printed the lines, but Docker's log
	// driver delivers them to readers later, longer on a loaded machine.
	logsUntil := func(what string, has func(string) bool, args ...string) {
		t.Helper()
		var out, errs string
		code := 0
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			out, errs, code = berth(append([]string{"logs"}, args...)...)
			if code != 0 {
				t.Fatalf("berth logs %s: exit %d: %s", strings.Join(args, " "), code, errs)
			}
			if has(out) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("berth logs %s: %s never came: %q", strings.Join(args, " "), what, out)
			}
		}
	}
	// The worker's log holds the job's lines (runpod-python-style JSON).
	logsUntil("the job's lines", func(out string) bool { return strings.Contains(out, job.ID) }, ep.ID, "--job", job.ID)
	// A second worker: `logs ENDPOINT` shows every worker's log, each line
	// prefixed with its worker id.
	ok(nil, "endpoint", "update", ep.ID, "--workers-min", "2", "--workers-max", "2", "--json")
	var ws struct{ Workers []struct{ ID, State string } }
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ok(&ws, "endpoint", "get", ep.ID, "--workers", "--json")
		ready := 0
		for _, w := range ws.Workers {
			if w.State == "idle" || w.State == "running" {
				ready++
			}
		}
		if ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("two ready workers: %+v", ws)
		}
	}
	// Each worker's start-up line, prefixed with its id.
	logsUntil("both workers' start-up lines", func(out string) bool {
		started := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			if id, text, ok := strings.Cut(line, " | "); ok && strings.Contains(text, "Starting Serverless Worker") {
				started[id] = true
			}
		}
		for _, w := range ws.Workers {
			if !started[w.ID] {
				return false
			}
		}
		return true
	}, ep.ID)

	// A CPU pod from the same image, its logs, then delete everything.
	var pod struct{ ID, DesiredStatus string }
	ok(&pod, "pod", "create", "--name", "p", "--image-name", image, "--compute-type", "CPU", "--wait", "--json")
	if pod.DesiredStatus != "RUNNING" {
		t.Fatalf("pod: %+v", pod)
	}
	if _, errs, code := berth("pod", "logs", pod.ID); code != 0 {
		t.Fatalf("pod logs: exit %d %s", code, errs)
	}
	ok(nil, "pod", "delete", pod.ID)

	podPullProgress(t, docker, env, ok)

	ok(nil, "endpoint", "delete", ep.ID)
	if _, _, code := berth("endpoint", "get", ep.ID); code != cli.ExitNotFound {
		t.Fatalf("deleted endpoint: exit %d", code)
	}
}

// podPullProgress: `pod create --wait` of an image on a private registry
// shows the pull as it runs. The registry sits behind a proxy that holds
// every blob download until the CLI has shown a "pulling IMAGE: …" line and
// a GET /v1/pods/{id} has the same progress as the pod's statusMessage, so
// the check does not depend on how fast the pull is.
func podPullProgress(t *testing.T, docker *client.Client, env map[string]string, ok func(any, ...string) string) {
	t.Helper()
	host, user, pass := dockertest.Registry(t)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: host})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	defer open() // before Close, which waits for held requests
	// A fresh import has its own config blob (its creation time): once it is
	// pushed and removed here, the pull has to download at least that.
	fresh := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	repo := "/berth-test/podpull:" + dockertest.Unique("t")
	dockertest.PushImage(t, fresh, host+repo, host, user, pass)
	rmctx, rmcancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := docker.ImageRemove(rmctx, fresh, client.ImageRemoveOptions{Force: true})
	rmcancel()
	if err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(proxy.URL, "http://") + repo
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, r := range []string{ref, host + repo} {
			docker.ImageRemove(ctx, r, client.ImageRemoveOptions{Force: true})
		}
	})

	var ra struct{ ID string }
	ok(&ra, "registry", "create", "--name", dockertest.Unique("podpull"), "--username", user, "--password", pass, "--json")
	var stdout, stderr proctest.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- cli.Main([]string{"pod", "create", "--name", "pulled", "--image-name", ref, "--container-registry-auth-id", ra.ID,
			"--compute-type", "CPU", "--wait", "--timeout", "5m", "--json"},
			cli.Options{Version: "test", Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader(""),
				Getenv: func(k string) string { return env[k] }, IsTerminal: func(io.Writer) bool { return false }})
	}()
	// "pod ID: pulling REF: …" (one line per change, as on a non-terminal).
	line := regexp.MustCompile(`pod (\w+): pulling ` + regexp.QuoteMeta(ref) + `: `)
	deadline := time.After(3 * time.Minute)
	var podID string
	for podID == "" {
		if m := line.FindStringSubmatch(stderr.String()); m != nil {
			podID = m[1]
			break
		}
		select {
		case code := <-exit:
			t.Fatalf("pod create ended (exit %d) before any pull progress was shown:\n%s\n%s", code, stderr.String(), stdout.String())
		case <-deadline:
			t.Fatalf("no pull progress shown by pod create --wait:\n%s", stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The same progress through the pod's own view, while the pull is held.
	req, _ := http.NewRequest(http.MethodGet, env["BERTH_URL"]+"/v1/pods/"+podID, nil)
	req.Header.Set("Authorization", "Bearer "+env["BERTH_API_KEY"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var view struct{ StatusMessage string }
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(view.StatusMessage, "pulling "+ref+": ") {
		t.Fatalf("GET /v1/pods/%s during the pull: %d %+v %v", podID, resp.StatusCode, view, err)
	}
	open()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("pod create: exit %d\n%s\n%s", code, stderr.String(), stdout.String())
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("pod create --wait did not end after the pull was released")
	}
	// --json: stdout is the pod alone, running, its pull over.
	var pod struct{ ID, DesiredStatus, StatusMessage string }
	if err := json.Unmarshal([]byte(stdout.String()), &pod); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout.String())
	}
	if pod.ID != podID || pod.DesiredStatus != "RUNNING" || pod.StatusMessage != "" {
		t.Fatalf("pod %+v, want %s running", pod, podID)
	}
	t.Logf("pull progress shown:\n%s", stderr.String())
	ok(nil, "pod", "delete", pod.ID)
	ok(nil, "registry", "delete", ra.ID)
}
