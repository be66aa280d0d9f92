package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"berth/app"
	"berth/internal/apptest"
	"berth/internal/dockertest"
	"berth/runtime"
)

// TestResultFinishedWhileBerthIsDown: a worker of Berth's Go SDK finishes a
// job while Berth is stopped — longer than runpod-python's 3 attempts
// (≈ 4 s) — and keeps retrying the result; when Berth is back on the same
// address the result is taken: the job is COMPLETED with the output of its
// one run, on the worker that ran it, and was never run again.
func TestResultFinishedWhileBerthIsDown(t *testing.T) {
	docker := dockertest.Require(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	data := t.TempDir()
	t.Cleanup(func() { apptest.RemoveContainers(t, data) })

	a := startOn(t, data, false)
	addr := a.Addr()
	s := &stack{t: t, app: a.App, db: a.Store(), q: a.Queue(), sup: a.Supervisor(), base: a.URL()}
	ep := s.endpoint(image, nil, map[string]any{"workersMin": 1, "workersMax": 1, "idleTimeout": 60})
	var job struct{ ID, Status, WorkerID string }
	const output = "finished while Berth was down"
	// The job runs long enough for Berth to stop before it ends.
	s.call("POST", "/v2/"+ep.ID+"/run", map[string]any{"input": map[string]any{"sleep_ms": 6000, "echo": output}}, 200, &job)
	s.eventually("the job running on a worker", func() bool {
		s.call("GET", "/v2/"+ep.ID+"/status/"+job.ID, nil, 200, &job)
		return job.Status == "IN_PROGRESS" && job.WorkerID != ""
	})
	ran := job.WorkerID
	stopOn(t, a)

	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	container := containerOfWorker(ctx, t, docker, data, ran)
	// The SDK gives up after its third attempt; Berth's retries past it.
	waitLogLine(ctx, t, docker, container, "Failed to return job results (attempt 4), retrying")

	a = startOnAddr(t, data, addr, true)
	defer stopOn(t, a)
	s = &stack{t: t, app: a.App, db: a.Store(), q: a.Queue(), sup: a.Supervisor(), base: a.URL()}
	var done struct {
		Status, WorkerID string
		Output           any
	}
	s.eventually("the job completed with the result of its run", func() bool {
		s.call("GET", "/v2/"+ep.ID+"/status/"+job.ID, nil, 200, &done)
		return done.Status != "IN_QUEUE" && done.Status != "IN_PROGRESS"
	})
	if done.Status != "COMPLETED" || done.Output != output || done.WorkerID != ran {
		t.Fatalf("job after the restart: %+v, want COMPLETED with %q from %s", done, output, ran)
	}
	if n := countLogLines(ctx, t, docker, data, job.ID, `"Started"`); n != 1 {
		t.Errorf("the job was started %d times across the endpoint's workers, want 1", n)
	}
}

// containerOfWorker finds the container of a worker of data's Berth.
func containerOfWorker(ctx context.Context, t *testing.T, docker *client.Client, data, worker string) string {
	t.Helper()
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var theirs []string // for the failure: what this Berth does have
	for _, c := range list.Items {
		if c.Labels[runtime.LabelDataDir] != app.Instance(data) {
			continue
		}
		if c.Labels[runtime.LabelWorker] == worker {
			return c.ID
		}
		theirs = append(theirs, fmt.Sprintf("%s worker=%s %s", c.ID[:12], c.Labels[runtime.LabelWorker], c.State))
	}
	t.Fatalf("no container for worker %s among this Berth's %d of %d: %v", worker, len(theirs), len(list.Items), theirs)
	return ""
}

// waitLogLine follows a container's output until a line holds want.
func waitLogLine(ctx context.Context, t *testing.T, docker *client.Client, container, want string) {
	t.Helper()
	rc, err := docker.ContainerLogs(ctx, container, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var seen []string
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return
		}
		seen = append(seen, sc.Text())
	}
	t.Fatalf("container %.12s: no line with %q (%v); its output:\n%s", container, want, sc.Err(), strings.Join(seen, "\n"))
}

// countLogLines counts the lines of every container of data's Berth that
// hold job and word.
func countLogLines(ctx context.Context, t *testing.T, docker *client.Client, data, job, word string) int {
	t.Helper()
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range list.Items {
		if c.Labels[runtime.LabelDataDir] != app.Instance(data) {
			continue
		}
		rc, err := docker.ContainerLogs(ctx, c.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
		if err != nil {
			t.Fatal(fmt.Errorf("logs of %.12s: %w", c.ID, err))
		}
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), job) && strings.Contains(sc.Text(), word) {
				n++
			}
		}
		rc.Close()
	}
	return n
}
