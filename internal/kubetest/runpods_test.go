package kubetest_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"berth/internal/kubetest"
)

// TestRequestsAttributesImpersonatedCalls: the audit log names the
// ServiceAccount a client impersonates, with verb and resource, and a
// watch once, as it starts.
func TestRequestsAttributesImpersonatedCalls(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ns.Client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := ns.Client.CoreV1().Pods(ns.Name).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if _, err := ns.Client.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the ServiceAccount lists secrets of another namespace")
	}
	want := map[string]int{"list pods 200": 1, "watch pods 0": 1, "list secrets 403": 1}
	var got map[string]int
	deadline := time.Now().Add(30 * time.Second)
	for {
		reqs, err := c.Requests()
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]int{}
		for _, r := range reqs {
			if r.User == ns.ServiceAccountUser() {
				got[r.Verb+" "+r.Resource+" "+strconv.Itoa(r.Code)]++
			}
		}
		if equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the audit log is written after the answer
	}
	if !equal(got, want) {
		t.Fatalf("requests of %s: %v, want %v", ns.ServiceAccountUser(), got, want)
	}
}

func equal(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRunPodsRunsTheProgramAsThePodsKubelet: a Pod bound to a TestKubelet
// node runs the program with the Pod's env (its output is the Pod's log),
// is Running, then Succeeded or Failed with the exit code; deleting a
// running Pod sends SIGTERM and removes it once the program exited. The
// ServiceAccount kubeconfig authenticates as the manifests' account.
func TestRunPodsRunsTheProgramAsThePodsKubelet(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	node := c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.sh")
	script := "#!/bin/sh\necho \"hello $GREETING\"\ntrap 'echo term; exit 0' TERM\n[ \"$MODE\" = exit3 ] && exit 3\nwhile true; do sleep 0.05; done\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []string
	deleted := make(chan struct{}) // the runner's last word on "runs"
	var once sync.Once
	r, err := c.RunPods(kubetest.RunPodsConfig{Namespace: ns.Name, Program: prog, Events: func(l string) {
		mu.Lock()
		events = append(events, l)
		mu.Unlock()
		if l == "runs deleted" {
			once.Do(func() { close(deleted) })
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mk := func(name, mode string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, NodeName: node.Name, TerminationGracePeriodSeconds: ptr(int64(30)),
			Containers: []corev1.Container{{Name: "main", Image: "example.invalid/x:1",
				Env: []corev1.EnvVar{{Name: "GREETING", Value: name}, {Name: "MODE", Value: mode}}}}}}
		if _, err := ns.Client.CoreV1().Pods(ns.Name).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("runs", "loop")
	mk("fails", "exit3")
	if _, err := c.WaitPod(ctx, ns.Name, "runs", time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }); err != nil {
		t.Fatal(err)
	}
	p, err := c.WaitPod(ctx, ns.Name, "fails", time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Status.ContainerStatuses[0].State.Terminated; st == nil || st.ExitCode != 3 {
		t.Fatalf("fails: %+v", p.Status.ContainerStatuses)
	}

	// The ServiceAccount's kubeconfig reads the running Pod's log.
	kc := filepath.Join(dir, "berth.kubeconfig")
	if err := c.WriteServiceAccountKubeconfig(ctx, ns, kc, time.Hour); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(cfg)
	var log string
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log, "hello runs") && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := sa.CoreV1().Pods(ns.Name).GetLogs("runs", &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		log = string(b)
	}
	if !strings.Contains(log, "hello runs") {
		t.Fatalf("log of runs: %q", log)
	}

	if err := ns.Client.CoreV1().Pods(ns.Name).Delete(ctx, "runs", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitPodGone(ctx, ns.Name, "runs", time.Minute); err != nil {
		t.Fatal(err)
	}
	// The runner reports the deletion once its own call returned, which
	// may be after the watch above saw the Pod go.
	select {
	case <-deleted:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(events, "\n")
	for _, want := range []string{"for Pod runs on node " + node.Name, "runs exited 0", "runs deleted", "fails exited 3"} {
		if !strings.Contains(all, want) {
			t.Errorf("runner events lack %q:\n%s", want, all)
		}
	}
}

// TestRunPodsRefusesWhatAKubeletCouldNotRun: the runner gives a Pod its
// secretKeyRef values from the Secret, and refuses — Waiting with
// CreateContainerConfigError, as a kubelet — a Pod whose Secret does not
// exist or whose memory-backed emptyDir (a /dev/shm) has no sizeLimit.
func TestRunPodsRefusesWhatAKubeletCouldNotRun(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	node := c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	prog := filepath.Join(t.TempDir(), "prog.sh")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho \"hello $GREETING\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := c.RunPods(kubetest.RunPodsConfig{Namespace: ns.Name, Program: prog})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.AdminClient.CoreV1().Secrets(ns.Name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "greeting"},
		Data: map[string][]byte{"G": []byte("from-secret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fromSecret := func(name string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "G"}}}}
	}
	shm := func(limit string) []corev1.Volume {
		d := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
		if limit != "" {
			q := resource.MustParse(limit)
			d.SizeLimit = &q
		}
		return []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: d}}}
	}
	for _, tc := range []struct {
		name    string
		env     []corev1.EnvVar
		volumes []corev1.Volume
		refused string // the Waiting message; "" when it runs
	}{
		{"secret-env", fromSecret("greeting"), shm("1Gi"), ""},
		{"no-secret", fromSecret("missing"), nil, `secret "missing" not found`},
		{"unbounded-shm", nil, shm(""), "without sizeLimit"},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, NodeName: node.Name, Volumes: tc.volumes,
			Containers: []corev1.Container{{Name: "main", Image: "example.invalid/x:1", Env: tc.env}}}}
		if _, err := c.AdminClient.CoreV1().Pods(ns.Name).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := c.WaitPod(ctx, ns.Name, tc.name, time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Waiting != nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var w *corev1.ContainerStateWaiting
		if len(got.Status.ContainerStatuses) > 0 {
			w = got.Status.ContainerStatuses[0].State.Waiting
		}
		switch {
		case tc.refused == "" && got.Status.Phase != corev1.PodSucceeded:
			t.Errorf("%s: %s %+v, want it run", tc.name, got.Status.Phase, w)
		case tc.refused != "" && (w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, tc.refused)):
			t.Errorf("%s: %s %+v, want CreateContainerConfigError %q", tc.name, got.Status.Phase, w, tc.refused)
		}
	}
	b, err := c.AdminClient.CoreV1().Pods(ns.Name).GetLogs("secret-env", &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(b), "hello from-secret") {
		t.Errorf("log of secret-env: %q, %v: want the Secret's value", b, err)
	}
}
