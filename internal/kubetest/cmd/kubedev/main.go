// Command kubedev is a Kubernetes cluster on this machine for trying
// Berth's kubernetes runtime without one: the test suite's control plane
// (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok,
// from .ci/kube-binaries) with a GPU node and a CPU node whose kubelet is
// this command. It creates the namespace with the RBAC of
// deploy/kubernetes, writes a kubeconfig for its ServiceAccount (a bound
// token) for berth serve --kubeconfig, and runs every Pod Berth makes
// there as a local process of testdata/echoworker with the Pod's
// environment, reporting it to the API server as a kubelet does. Ctrl-C
// stops it all.
//
//	go run ./internal/kubetest/cmd/kubedev            # then, in another shell:
//	go run . serve --runtime kubernetes --kubeconfig kubedev/berth.kubeconfig \
//	    --namespace berth --advertise-url http://127.0.0.1:8080 --data kubedev/data
//
// See docs/kubernetes.md, "Try it without a cluster".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"berth/internal/kubetest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kubedev:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "kubedev", "where the kubeconfigs (and the worker program) are written")
	namespace := flag.String("namespace", "berth", "the namespace of Berth's Pods, with the RBAC of deploy/kubernetes")
	gpus := flag.Int("gpus", 2, "nvidia.com/gpu of the GPU node (0: none)")
	product := flag.String("gpu-product", "NVIDIA-GeForce-RTX-4090", "the GPU node's nvidia.com/gpu.product label")
	memory := flag.Int("gpu-memory", 24564, "the GPU node's nvidia.com/gpu.memory label (MiB)")
	worker := flag.String("worker", "", "the program run for every Pod (default: testdata/echoworker, built into -dir)")
	flag.Parse()

	say := func(format string, a ...any) { fmt.Printf("kubedev: "+format+"\n", a...) }
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	if *worker == "" {
		*worker = filepath.Join(*dir, "echoworker")
		say("building testdata/echoworker into %s", *worker)
		if out, err := exec.Command("go", "build", "-o", *worker, "berth/testdata/echoworker").CombinedOutput(); err != nil {
			return fmt.Errorf("build echoworker (run kubedev from Berth's source tree): %v\n%s", err, out)
		}
	}
	if abs, err := filepath.Abs(*worker); err == nil {
		*worker = abs
	}

	say("starting the control plane from %s …", kubetest.BinDir())
	c, err := kubetest.StartCluster()
	if err != nil {
		return err
	}
	defer func() {
		say("stopping the cluster")
		if err := c.Stop(); err != nil {
			say("stop: %v", err)
		}
	}()
	say("cluster up in %s (%s); API server %s", c.StartupTime.Round(100*time.Millisecond), c.StartupPhases, c.Admin.Host)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	setup, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if *gpus > 0 {
		n, err := c.CreateNode(setup, kubetest.NodeSpec{Name: "gpu-1", GPUs: *gpus, GPUProduct: *product, GPUMemoryMiB: *memory, TestKubelet: true})
		if err != nil {
			return err
		}
		say("node %s: %d × nvidia.com/gpu, nvidia.com/gpu.product=%s, nvidia.com/gpu.memory=%d", n.Name, *gpus, *product, *memory)
	}
	n, err := c.CreateNode(setup, kubetest.NodeSpec{Name: "cpu-1", CPU: "16", Memory: "64Gi", TestKubelet: true})
	if err != nil {
		return err
	}
	say("node %s: 16 CPUs, 64 GiB, no GPU", n.Name)
	ns, remove, err := c.CreateNamespace(setup, *namespace, nil)
	if remove != nil {
		defer func() { _ = remove() }()
	}
	if err != nil {
		return err
	}
	berthKC, adminKC := filepath.Join(*dir, "berth.kubeconfig"), filepath.Join(*dir, "admin.kubeconfig")
	if err := c.WriteServiceAccountKubeconfig(setup, ns, berthKC, 24*time.Hour); err != nil {
		return err
	}
	if err := c.WriteAdminKubeconfig(adminKC, ns.Name); err != nil {
		return err
	}
	say("namespace %s: ServiceAccount %s with the Role and ClusterRole of deploy/kubernetes", ns.Name, ns.ServiceAccount)
	say("Berth's kubeconfig (that ServiceAccount, a 24 h token): %s", berthKC)
	say("admin kubeconfig, for kubectl: %s", adminKC)

	r, err := c.RunPods(kubetest.RunPodsConfig{
		Namespace: ns.Name, Program: *worker,
		Events: func(line string) { say("kubelet: %s", line) },
	})
	if err != nil {
		return err
	}
	defer r.Close()
	say("ready: every Pod Berth makes in %s runs as %s with the Pod's environment; Ctrl-C stops it all", ns.Name, *worker)
	<-ctx.Done()
	return nil
}
