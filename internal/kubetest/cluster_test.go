package kubetest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"berth/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// pod returns a worker-like pod (restartPolicy Never, as Berth's workers),
// requesting gpus nvidia.com/gpu when gpus > 0.
func pod(name string, gpus int, nodeSelector map[string]string) *corev1.Pod {
	c := corev1.Container{Name: "worker", Image: "example.invalid/worker:1"}
	if gpus > 0 {
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		c.Resources = corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{kubetest.GPUResource: q},
			Requests: corev1.ResourceList{kubetest.GPUResource: q},
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			NodeSelector:                 nodeSelector,
			AutomountServiceAccountToken: new(bool),
			Containers:                   []corev1.Container{c},
		},
	}
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

// The end-to-end shape of a kubernetes-runtime test: kwok GPU and CPU
// nodes; pods created as Berth's ServiceAccount; a GPU pod bound by the
// scheduler and run by kwok; a pod Unschedulable for lack of GPUs; the
// test as the kubelet writing what a real one would (image pull errors, a
// crash, OOMKilled, the end of a graceful deletion) without kwok
// overwriting it.
func TestGPUPodsOnKwokNodes(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const product = "NVIDIA-GeForce-RTX-4090"
	gpuNode := c.AddNode(t, kubetest.NodeSpec{GPUs: 2, GPUProduct: product, GPUMemoryMiB: 24564})
	cpuNode := c.AddNode(t, kubetest.NodeSpec{}) // CPU only
	// Pods without GPUs go to it, not to the test-kubelet node added below.
	onCPU := map[string]string{"kubernetes.io/hostname": cpuNode.Name}
	if got := gpuNode.Status.Allocatable[kubetest.GPUResource]; got.Value() != 2 {
		t.Fatalf("GPU node allocatable nvidia.com/gpu = %s, want 2", got.String())
	}
	for k, want := range map[string]string{kubetest.LabelGPUProduct: product, kubetest.LabelGPUMemory: "24564", kubetest.LabelGPUCount: "2"} {
		if got := gpuNode.Labels[k]; got != want {
			t.Errorf("GPU node label %s = %q, want %q", k, got, want)
		}
	}

	pods := ns.Client.CoreV1().Pods(ns.Name)
	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s as the berth ServiceAccount: %v", p.Name, err)
		}
	}

	// A GPU pod: bound to the GPU node by the scheduler, run by kwok.
	create(pod("gpu-worker", 1, map[string]string{kubetest.LabelGPUProduct: product}))
	p, err := c.WaitPod(ctx, ns.Name, "gpu-worker", time.Minute, running)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != gpuNode.Name || p.Status.PodIP == "" {
		t.Errorf("gpu-worker on %q with IP %q, want node %s and an IP", p.Spec.NodeName, p.Status.PodIP, gpuNode.Name)
	}

	// More GPUs than any node has left: the scheduler says so.
	create(pod("too-big", 2, nil))
	p, err = c.WaitPod(ctx, ns.Name, "too-big", time.Minute, func(p *corev1.Pod) bool {
		cond := kubetest.Condition(p, corev1.PodScheduled)
		return cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable
	})
	if err != nil {
		t.Fatal(err)
	}
	if msg := kubetest.Condition(p, corev1.PodScheduled).Message; !strings.Contains(msg, "Insufficient nvidia.com/gpu") {
		t.Errorf("Unschedulable message %q does not name nvidia.com/gpu", msg)
	}

	// The test as the kubelet of a test-kubelet node's pods: kwok leaves
	// them Pending until the test writes their status.
	kl := c.Kubelet()
	tk := c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: "NVIDIA-A100-SXM4-80GB", GPUMemoryMiB: 81920, TestKubelet: true})
	create(pod("pull-fails", 1, map[string]string{kubetest.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB"}))
	if _, err := c.WaitPod(ctx, ns.Name, "pull-fails", time.Minute, func(p *corev1.Pod) bool { return p.Spec.NodeName == tk.Name }); err != nil {
		t.Fatal(err)
	}
	if _, err := kl.Waiting(ctx, ns.Name, "pull-fails", "ErrImagePull", "pull access denied"); err != nil {
		t.Fatal(err)
	}
	if _, err := kl.Waiting(ctx, ns.Name, "pull-fails", "ImagePullBackOff", `Back-off pulling image "example.invalid/worker:1"`); err != nil {
		t.Fatal(err)
	}

	// A pod kwok already runs, taken over by the test, then crashing.
	create(pod("crashes", 0, onCPU))
	if _, err := c.WaitPod(ctx, ns.Name, "crashes", time.Minute, running); err != nil {
		t.Fatal(err)
	}
	if err := kl.TakeOver(ctx, ns.Name, "crashes"); err != nil {
		t.Fatal(err)
	}
	if _, err := kl.Terminated(ctx, ns.Name, "crashes", 1, "Error", ""); err != nil {
		t.Fatal(err)
	}
	create(pod("oom", 0, onCPU))
	if _, err := c.WaitPod(ctx, ns.Name, "oom", time.Minute, running); err != nil {
		t.Fatal(err)
	}
	if err := kl.TakeOver(ctx, ns.Name, "oom"); err != nil {
		t.Fatal(err)
	}
	if _, err := kl.Terminated(ctx, ns.Name, "oom", 137, "OOMKilled", ""); err != nil {
		t.Fatal(err)
	}

	// kwok has acted on everything before this pod (one informer, in
	// order) once it runs it: the statuses the test wrote must still be
	// there.
	create(pod("later", 0, onCPU))
	if _, err := c.WaitPod(ctx, ns.Name, "later", time.Minute, running); err != nil {
		t.Fatal(err)
	}
	for name, check := range map[string]func(*corev1.Pod) string{
		"pull-fails": func(p *corev1.Pod) string {
			if p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 1 ||
				p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.ContainerStatuses[0].State.Waiting.Reason != "ImagePullBackOff" {
				return "want Pending, waiting ImagePullBackOff"
			}
			return ""
		},
		"crashes": func(p *corev1.Pod) string {
			cs := p.Status.ContainerStatuses
			if p.Status.Phase != corev1.PodFailed || len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 1 {
				return "want Failed, terminated with exit code 1"
			}
			return ""
		},
		"oom": func(p *corev1.Pod) string {
			cs := p.Status.ContainerStatuses
			if p.Status.Phase != corev1.PodFailed || len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.Reason != "OOMKilled" {
				return "want Failed, terminated OOMKilled"
			}
			return ""
		},
	} {
		p, err := c.AdminClient.CoreV1().Pods(ns.Name).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if msg := check(p); msg != "" {
			t.Errorf("pod %s: %s; got phase %s, containers %+v", name, msg, p.Status.Phase, p.Status.ContainerStatuses)
		}
	}

	// Deletion: kwok removes its pods at once; a test-kubelet pod stays
	// Terminating until the test, as its kubelet, finishes it.
	if err := pods.Delete(ctx, "later", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "pull-fails", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, c, ns.Name, "later")
	p, err = c.AdminClient.CoreV1().Pods(ns.Name).Get(ctx, "pull-fails", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("pull-fails after a delete: %v, want Terminating with the default 30 s grace (got %+v)", err, p.ObjectMeta)
	}
	if err := kl.FinishDeletion(ctx, ns.Name, "pull-fails"); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, c, ns.Name, "pull-fails")
}

func waitGone(ctx context.Context, t *testing.T, c *kubetest.Cluster, ns, name string) {
	t.Helper()
	if err := c.WaitPodGone(ctx, ns, name, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// The Namespace config is the manifests' ServiceAccount and has exactly
// their permissions.
func TestNamespaceActsAsTheManifestsServiceAccount(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sa, _, err := c.ManifestsServiceAccount()
	if err != nil {
		t.Fatal(err)
	}
	if ns.ServiceAccount != sa {
		t.Fatalf("namespace impersonates %q, the manifests define %q", ns.ServiceAccount, sa)
	}
	if _, err := c.AdminClient.CoreV1().ServiceAccounts(ns.Name).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		t.Fatalf("the ServiceAccount is not in the namespace: %v", err)
	}
	if want := "system:serviceaccount:" + ns.Name + ":" + sa; ns.Config.Impersonate.UserName != want {
		t.Fatalf("impersonates %q, want %q", ns.Config.Impersonate.UserName, want)
	}

	// Granted: pods in its namespace, nodes read-only, and listing the
	// cluster's pods (the GPUs other workloads hold).
	if _, err := ns.Client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods in its namespace: %v", err)
	}
	if _, err := ns.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list nodes: %v", err)
	}
	if _, err := ns.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName!="}); err != nil {
		t.Errorf("list the cluster's bound pods: %v", err)
	}
	// Not granted: anything else.
	forbidden := map[string]error{}
	_, forbidden["get a pod in another namespace"] = ns.Client.CoreV1().Pods("default").Get(ctx, "x", metav1.GetOptions{})
	_, forbidden["create a pod in another namespace"] = ns.Client.CoreV1().Pods("default").Create(ctx,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	forbidden["delete a pod in another namespace"] = ns.Client.CoreV1().Pods("default").Delete(ctx, "x", metav1.DeleteOptions{})
	_, forbidden["create a ConfigMap"] = ns.Client.CoreV1().ConfigMaps(ns.Name).Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	_, forbidden["create a Deployment"] = ns.Client.AppsV1().Deployments(ns.Name).Create(ctx,
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	forbidden["delete a node"] = ns.Client.CoreV1().Nodes().Delete(ctx, "no-such-node", metav1.DeleteOptions{})
	_, forbidden["update pod status"] = ns.Client.CoreV1().Pods(ns.Name).UpdateStatus(ctx,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns.Name}}, metav1.UpdateOptions{})
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as the berth ServiceAccount: %v, want Forbidden", what, err)
		}
	}

	// The same identity through a kubeconfig file (berth serve --kubeconfig).
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := ns.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("kubeconfig: list pods in its namespace: %v", err)
	}
	if _, err := kc.CoreV1().Pods("default").Get(ctx, "x", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kubeconfig: get a pod in default: %v, want Forbidden", err)
	}
}

// A cluster of its own: it stops within the grace periods, and then none
// of its processes runs, none of its ports answers and its directory is
// gone.
func TestStopLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second cluster")
	}
	c := kubetest.Start(t)
	t.Logf("own cluster started in %s", c.StartupTime)
	dir := c.Dir()
	pids := processesMentioning(t, dir)
	if len(pids) != len(kubetest.Binaries) {
		t.Fatalf("%d processes run with %s in their command line, want %d (%v)", len(pids), dir, len(kubetest.Binaries), pids)
	}
	u, err := url.Parse(c.Admin.Host)
	if err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	t.Logf("stopped in %s", time.Since(began))
	if left := processesMentioning(t, dir); len(left) > 0 {
		t.Errorf("processes %v still run after Stop", left)
	}
	for _, pid := range pids {
		// Stop waited for each child, so its pid is reaped: signal 0 fails.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still there after Stop (%v)", pid, err)
		}
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		conn.Close()
		t.Errorf("the API server's port %s still answers after Stop", u.Host)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.crt")); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory is still there: %v", err)
	}
}

// processesMentioning returns the pids whose command line contains s.
func processesMentioning(t *testing.T, s string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pods/log as Berth reads it: through the API server, as the berth
// ServiceAccount, from the node's kubelet endpoint (the kit's log server),
// follow included; the follow ends when the container terminates.
func TestPodLogsThroughTheAPIServer(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kl := c.Kubelet()
	c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	if _, err := ns.Client.CoreV1().Pods(ns.Name).Create(ctx, pod("logger", 0, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPod(ctx, ns.Name, "logger", time.Minute, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }); err != nil {
		t.Fatal(err)
	}
	if _, err := kl.Running(ctx, ns.Name, "logger", ""); err != nil {
		t.Fatal(err)
	}
	log := kl.Log(ns.Name, "logger", "worker")
	fmt.Fprintln(log, "first")

	logs := func(opts *corev1.PodLogOptions) string {
		t.Helper()
		b, err := ns.Client.CoreV1().Pods(ns.Name).GetLogs("logger", opts).DoRaw(ctx)
		if err != nil {
			t.Fatalf("pods/log %+v: %v", opts, err)
		}
		return string(b)
	}
	if got := logs(&corev1.PodLogOptions{}); got != "first\n" {
		t.Fatalf("log %q, want %q", got, "first\n")
	}

	stream, err := ns.Client.CoreV1().Pods(ns.Name).GetLogs("logger", &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	r := bufio.NewReader(stream)
	readLine := func() string {
		t.Helper()
		s, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("follow: %v after %q", err, s)
		}
		return s
	}
	if got := readLine(); got != "first\n" {
		t.Fatalf("follow read %q first", got)
	}
	fmt.Fprintln(log, "second")
	if got := readLine(); got != "second\n" {
		t.Fatalf("follow read %q, want the line written after it began", got)
	}
	if got := logs(&corev1.PodLogOptions{TailLines: ptr(int64(1))}); got != "second\n" {
		t.Errorf("tailLines=1: %q", got)
	}
	if _, err := kl.Terminated(ctx, ns.Name, "logger", 0, "Completed", ""); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("follow after the container ended: %q, %v; want the end of the stream", rest, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestNodeHeartbeatIsSteady: kwok renews each node's Lease, as a kubelet
// does, so the node lifecycle controller never takes a node for lost: a
// node (kwok's, and one whose kubelet is the test) stays Ready while its
// Lease is renewed twice. Without the renewals every node went NotReady
// and Ready again about a minute in.
func TestNodeHeartbeatIsSteady(t *testing.T) {
	c := kubetest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := []*corev1.Node{c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: "NVIDIA-L4"}), c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})}
	leases := c.AdminClient.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	for _, n := range nodes {
		var renewals []time.Time
		var since time.Time
		for len(renewals) < 3 {
			l, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if err == nil && l.Spec.RenewTime != nil && (len(renewals) == 0 || l.Spec.RenewTime.After(renewals[len(renewals)-1])) {
				renewals = append(renewals, l.Spec.RenewTime.Time)
				if d := l.Spec.LeaseDurationSeconds; d == nil || *d != kubetest.NodeLeaseSeconds {
					t.Errorf("node %s: lease duration %v, want %d s", n.Name, d, kubetest.NodeLeaseSeconds)
				}
			}
			got, err := c.AdminClient.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type != corev1.NodeReady {
					continue
				}
				if since.IsZero() {
					since = cond.LastTransitionTime.Time
				}
				// A blip between two looks moves the transition time.
				if cond.Status != corev1.ConditionTrue || !cond.LastTransitionTime.Time.Equal(since) {
					t.Fatalf("node %s: Ready %s since %v (%s), was Ready since %v, while its lease is renewed", n.Name, cond.Status, cond.LastTransitionTime, cond.Message, since)
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("node %s: lease renewed at %v only: %v", n.Name, renewals, ctx.Err())
			case <-time.After(time.Second):
			}
		}
	}
}
