package kube_test

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"berth/internal/kubetest"
	"berth/runtime/backendtest"
	"berth/runtime/kube"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// The Kubernetes backend keeps runtime.Backend's contract (the suite
// Docker and the fake are held to) on the test cluster, with kubetest's
// PodRunner as the kubelet: each Pod runs backendtest/testdata/behave as
// a process of this host, its behaviour chosen by $BEHAVE (the runner
// runs the program without the Pod's arguments).
func TestContract(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	bin := filepath.Join(t.TempDir(), "behave")
	if out, err := exec.Command("go", "build", "-o", bin, "berth/runtime/backendtest/testdata/behave").CombinedOutput(); err != nil {
		t.Fatalf("go build behave: %v\n%s", err, out)
	}
	r, err := c.RunPods(kubetest.RunPodsConfig{Namespace: ns.Name, Program: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := kube.New(ctx, kube.Config{REST: ns.Config, Namespace: ns.Name, Instance: "contract",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	prog := func(mode string) backendtest.Program {
		return backendtest.Program{Image: "berth-test/behave:contract", Env: map[string]string{"BEHAVE": mode}}
	}
	backendtest.Run(t, backendtest.Harness{Backend: b, Exit: prog("exit"), Trap: prog("trap"), Ignore: prog("ignore")})
}
