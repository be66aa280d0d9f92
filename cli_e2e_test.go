package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth/cli"
	"berth/internal/dockertest"
	"berth/runtime"
)

// TestCLIWithWorkerContainers drives `berth serve` (the real wiring: store,
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
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		abs, _ := filepath.Abs(data)
		sum := sha256.Sum256([]byte(abs))
		inst := hex.EncodeToString(sum[:6]) // as startRuntime labels them
		list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true})
		if err != nil {
			t.Errorf("list containers: %v", err)
			return
		}
		for _, c := range list.Items {
			if c.Labels[runtime.LabelDataDir] == inst {
				docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
			}
		}
	})

	// Workers reach Berth on the same port through the bridge gateway:
	// pick a free one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const key = "cli-e2e-key"
	t.Setenv("BERTH_API_KEY", key)
	ready := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	root := cli.New(cli.Options{Version: "test", Stderr: &logs, Stdout: &logs, Getenv: func(string) string { return "" },
		Serve: func(ctx context.Context, o cli.ServeOptions) error {
			o.Ready = func(string) { ready <- struct{}{} }
			return serve(ctx, o)
		}})
	root.SetArgs([]string{"serve", "--addr", addr, "--data", data, "--rate-limits", "off"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("berth log:\n%s", logs.String())
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatal("serve not ready")
	}

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
	// The worker's log holds the job's lines (runpod-python-style JSON).
	out, _, code := berth("logs", ep.ID, "--job", job.ID)
	if code != 0 || !strings.Contains(out, job.ID) {
		t.Fatalf("logs --job: exit %d: %q", code, out)
	}

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
	ok(nil, "endpoint", "delete", ep.ID)
	if _, _, code := berth("endpoint", "get", ep.ID); code != cli.ExitNotFound {
		t.Fatalf("deleted endpoint: exit %d", code)
	}
}
