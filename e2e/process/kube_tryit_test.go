package process_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth/cli"
	"berth/internal/kubetest"
	"berth/internal/proctest"
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
	kubedev, echo := proctest.Build(t, "berth/internal/kubetest/cmd/kubedev", false), proctest.Build(t, "berth/testdata/echoworker", false)
	dir := t.TempDir()

	var devOut proctest.Buffer
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
	addr := proctest.FreeAddr(t)
	const key = "tryit-key"
	berth := proctest.Start(t, proctest.Options{Addr: addr, Data: filepath.Join(dir, "data"), Key: key, Env: []string{"KUBECONFIG="},
		Args: []string{"--runtime", "kubernetes", "--kubeconfig", filepath.Join(dir, "berth.kubeconfig"), "--namespace", "berth", "--advertise-url", "http://" + addr}})
	defer berth.Stop() // before kubedev stops

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
