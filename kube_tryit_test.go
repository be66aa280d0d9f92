package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth/cli"
	"berth/internal/kubetest"
)

// TestKubernetesTryIt runs docs/kubernetes.md's "Try it without a cluster"
// as a user does: kubedev (the test cluster, its kubelet running
// echoworker for every Pod), the berth binary serving with --runtime
// kubernetes and the kubeconfig of the manifests' ServiceAccount, and the
// CLI's template create, endpoint create and runsync: the job goes through
// a worker Pod on the GPU node.
func TestKubernetesTryIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	kubetest.Require(t)
	berth, kubedev, echo := buildBerth(t), buildBin(t, "./internal/kubetest/cmd/kubedev"), buildBin(t, "./testdata/echoworker")
	dir := t.TempDir()

	var devOut syncBuffer
	dev := exec.Command(kubedev, "-dir", dir, "-worker", echo)
	dev.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	dev.Stdout, dev.Stderr = pw, &devOut
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	devDone := make(chan error, 1)
	go func() { devDone <- dev.Wait(); pw.Close() }()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			devOut.Write(append(sc.Bytes(), '\n'))
			if strings.HasPrefix(sc.Text(), "kubedev: ready") {
				close(ready)
			}
		}
	}()
	defer func() {
		_ = dev.Process.Signal(os.Interrupt)
		select {
		case err := <-devDone:
			if err != nil {
				t.Errorf("kubedev: %v", err)
			}
		case <-time.After(2 * time.Minute):
			_ = dev.Process.Kill()
			t.Error("kubedev did not stop within 2 minutes of SIGINT")
		}
		t.Logf("kubedev:\n%s", devOut.String())
	}()
	select {
	case <-ready:
	case err := <-devDone:
		t.Fatalf("kubedev: %v\n%s", err, devOut.String())
	case <-time.After(kubetest.StartTimeout() + time.Minute):
		t.Fatalf("kubedev not ready\n%s", devOut.String())
	}

	// The port is chosen first: workers are told the address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const key = "tryit-key"
	var serveOut syncBuffer
	serve := exec.Command(berth, "serve", "--runtime", "kubernetes", "--kubeconfig", filepath.Join(dir, "berth.kubeconfig"),
		"--namespace", "berth", "--advertise-url", "http://"+addr, "--addr", addr, "--data", filepath.Join(dir, "data"))
	serve.Env = append(os.Environ(), "BERTH_API_KEY="+key, "KUBECONFIG=")
	serve.Stdout, serve.Stderr = &serveOut, &serveOut
	serve.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- serve.Wait() }()
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-serveDone:
		case <-time.After(time.Minute):
			_ = serve.Process.Kill()
			t.Error("berth serve did not stop within a minute of SIGTERM")
		}
		t.Logf("berth serve:\n%s", serveOut.String())
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-serveDone:
			t.Fatalf("berth serve exited: %v\n%s", err, serveOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("berth serve does not answer: %v\n%s", err, serveOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	env := map[string]string{"BERTH_URL": "http://" + addr, "BERTH_API_KEY": key}
	ok := func(v any, args ...string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := cli.Main(args, cli.Options{Version: "test", Stdout: &out, Stderr: &errb, Stdin: strings.NewReader(""),
			Getenv: func(k string) string { return env[k] }, IsTerminal: func(io.Writer) bool { return false }})
		if code != 0 {
			t.Fatalf("berth %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		if err := json.Unmarshal(out.Bytes(), v); err != nil {
			t.Fatalf("berth %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	var tpl, ep struct{ ID string }
	ok(&tpl, "template", "create", "echo", "berth/echoworker:dev", "--json")
	ok(&ep, "endpoint", "create", tpl.ID, "--gpu-type-ids", "NVIDIA GeForce RTX 4090", "--workers-max", "1", "--json")
	var job struct {
		Status string
		Output any
	}
	ok(&job, "runsync", ep.ID, `{"echo":"hello"}`, "--json")
	if job.Status != "COMPLETED" || job.Output != "hello" {
		t.Fatalf("job: %+v", job)
	}
	// It went through a worker Pod on the GPU node, run by kubedev.
	if out := devOut.String(); !strings.Contains(out, "for Pod berth-") || !strings.Contains(out, "on node testkubelet-gpu-1") {
		t.Errorf("kubedev ran no worker Pod on the GPU node:\n%s", out)
	}
	var gpus any
	ok(&gpus, "gpus", "--json")
	if b, _ := json.Marshal(gpus); !strings.Contains(string(b), "RTX 4090") {
		t.Errorf("the GPU catalogue does not list the node's GPUs: %s", b)
	}
}
