package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"berth/app"
	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/internal/kubetest"
	"berth/internal/proctest"
	"berth/runtime"
)

const (
	apiKey = "kube-e2e-key"
	// waitLong bounds every wait on the cluster or Berth: generous, as the
	// tests run with -race on a loaded 2-core machine.
	waitLong = 2 * time.Minute
	// container is the one container of Berth's Pods.
	container = "main"
	// unboundClass starts the name of a storage class the test
	// provisioner leaves alone: its claims stay Pending.
	unboundClass = "unbound-"
)

func TestMain(m *testing.M) { kubetest.Main(m, proctest.RemoveBuilds) }

// build returns the binary of the Go package pkg, built once per test
// binary (internal/proctest).
func build(t testing.TB, pkg string) string { return proctest.Build(t, pkg, false) }

func echoworker(t testing.TB) string { return build(t, "berth/testdata/echoworker") }

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// kenv is one test's world: the shared cluster, a namespace of its own
// with deploy/kubernetes' RBAC, and a Berth (package app) on a data
// directory and a port that stay the same across restarts (the advertised
// URL, which the worker Pods were given, must keep reaching it).
type kenv struct {
	t   *testing.T
	ctx context.Context
	c   *kubetest.Cluster
	ns  *kubetest.Namespace
	kl  *kubetest.Kubelet

	dataDir     string
	selfPod     string      // Berth's own Pod (POD_NAME), "" outside the cluster
	class       string      // --storage-class, "" for none
	podTemplate string      // --kube-pod-template, "" for none
	registry    string      // --registry HOST[/PREFIX], "" for none
	regAuth     string      // --registry-auth NAME, "" for none
	logs        *logBuffer  // Berth's log is written here too when not nil
	models      *app.Models // the model cache's settings, nil for the defaults
	modelsImage string      // --models-image
	// claimDirs are host directories standing for claims (by name): a
	// Pod runPodWith runs that mounts one gets it bind-mounted at its
	// mountPath (read-only when the mount says so) in a private mount
	// namespace, as a kubelet mounts the claim's volume.
	claimDirs map[string]string
	addr      string // 127.0.0.1:PORT: the API
	workAddr  string // 127.0.0.1:PORT2: --worker-addr, the worker protocol only
	advertise string // http://localhost:PORT2: --advertise-url
	berth     *apptest.Berth
	app       *app.App
	base      string

	mu    sync.Mutex
	procs []*workerProc
}

func newEnv(t *testing.T) *kenv {
	t.Helper()
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var ports [2]int
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	// Workers reach Berth on the worker listener alone, as in
	// deploy/kubernetes (--worker-addr, Service berth-worker).
	e := &kenv{t: t, ctx: ctx, c: c, ns: ns, kl: c.Kubelet(), dataDir: t.TempDir(),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), workAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		advertise: "http://localhost:" + strconv.Itoa(ports[1])}
	e.provisioner()
	return e
}

// provisioner is the cluster's volume provisioner for the namespace's
// claims, which the test cluster lacks: each claim gets a
// PersistentVolume of its size, access modes and class, bound to it by
// the controller-manager's binder, as a dynamic provisioner's would be.
// The volumes go when the test ends. A claim of a class named
// unboundClass… is left alone (a class no provisioner serves).
func (e *kenv) provisioner() {
	claims := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name)
	pvs := e.c.AdminClient.CoreV1().PersistentVolumes()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	var made []string
	e.t.Cleanup(func() {
		cancel()
		<-done
		for _, name := range made {
			if err := pvs.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				e.t.Errorf("delete volume %s: %v", name, err)
			}
		}
	})
	provision := func(c *corev1.PersistentVolumeClaim) {
		if c.Spec.VolumeName != "" || c.DeletionTimestamp != nil {
			return
		}
		if c.Spec.StorageClassName != nil && strings.HasPrefix(*c.Spec.StorageClassName, unboundClass) {
			return // a class this provisioner does not serve
		}
		name := "pv-" + string(c.UID)
		if slices.Contains(made, name) {
			return
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: c.Spec.Resources.Requests[corev1.ResourceStorage]},
				AccessModes:                   c.Spec.AccessModes,
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: c.Namespace, Name: c.Name, UID: c.UID},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/" + name}},
			},
		}
		if c.Spec.StorageClassName != nil {
			pv.Spec.StorageClassName = *c.Spec.StorageClassName
		}
		if _, err := pvs.Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			if ctx.Err() == nil {
				e.t.Errorf("provision a volume for claim %s: %v", c.Name, err)
			}
			return
		}
		made = append(made, name)
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			l, err := claims.List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for i := range l.Items {
				provision(&l.Items[i])
			}
			w, err := claims.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				if c, ok := ev.Object.(*corev1.PersistentVolumeClaim); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					provision(c)
				}
			}
			w.Stop()
		}
	}()
}

// start starts a Berth on the kubernetes runtime, as berth serve
// --runtime kubernetes --namespace NS --advertise-url URL would, with
// short intervals for the tests. Stop (or the test's end) stops it; its
// Pods stay, for the next start to adopt.
func (e *kenv) start() {
	e.t.Helper()
	if err := e.tryStart(); err != nil {
		e.t.Fatal(err)
	}
}

// tryStart is start returning the start's error (Berth not running).
func (e *kenv) tryStart() error {
	e.t.Helper()
	var w io.Writer = io.Discard
	if testing.Verbose() {
		w = tWriter{e.t}
	}
	if e.logs != nil {
		w = io.MultiWriter(w, e.logs)
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	k := app.Kubernetes{REST: e.ns.Config, Namespace: e.ns.Name, AdvertiseURL: e.advertise, WorkerAddr: e.workAddr,
		StorageClass: e.class, PodTemplate: e.podTemplate, ModelsImage: e.modelsImage}
	if e.selfPod != "" {
		k.SelfPod, k.SelfNamespace = e.selfPod, e.ns.Name
	}
	cfg := app.Config{DataDir: e.dataDir, Addr: e.addr, Logger: log, APIKey: apiKey, Backend: app.OnKubernetes(k)}
	cfg.Builds.Registry, cfg.Builds.RegistryAuth = e.registry, e.regAuth
	if e.models != nil {
		cfg.Models = *e.models
	}
	cfg.HTTP.PingInterval = 2 * time.Second
	// Workers ping every 2 s; one silent for 6 s is lost.
	cfg.Queue.WorkerTimeout = 6 * time.Second
	cfg.Runtime.TickInterval, cfg.Runtime.ResyncInterval = 100*time.Millisecond, 2*time.Second
	cfg.Runtime.BackoffBase, cfg.Runtime.BackoffMax = 200*time.Millisecond, 2*time.Second
	cfg.LB.Domain, cfg.LB.ProbeInterval, cfg.LB.UnhealthyAfter = "lb.test", 200*time.Millisecond, 3*time.Second
	b, err := apptest.TryStart(e.t, cfg)
	if err != nil {
		return err
	}
	e.berth, e.app, e.base = b, b.App, b.URL()
	return nil
}

// stop stops the running Berth, its file checked (its Pods keep running).
func (e *kenv) stop() {
	if e.berth != nil {
		e.berth.Stop()
		e.berth, e.app = nil, nil
	}
}

// call makes an API call with the operator key and decodes a JSON reply
// into out (when not nil); it fails the test unless the status is want.
func (e *kenv) call(method, path string, body any, want int, out any) []byte {
	e.t.Helper()
	return apitest.Call(e.ctx, e.t, e.base, apiKey, method, path, body, out, want)
}

// eventually polls cond (API reads, cheap) until it holds or waitLong
// passes; last describes the state for the failure message.
func (e *kenv) eventually(what string, cond func() bool, last func() string) {
	e.t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			if last != nil {
				msg = ": " + last()
			}
			e.t.Fatalf("timed out waiting for %s%s", what, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Management objects through the v1 API.

type idOnly struct {
	ID string `json:"id"`
}

func (e *kenv) template(body map[string]any) string {
	e.t.Helper()
	b := map[string]any{"name": "tpl-" + strconv.FormatInt(time.Now().UnixNano(), 36), "isServerless": true}
	for k, v := range body {
		b[k] = v
	}
	var tpl idOnly
	e.call("POST", "/v1/templates", b, 200, &tpl)
	return tpl.ID
}

func (e *kenv) endpoint(body map[string]any) string {
	e.t.Helper()
	var ep idOnly
	e.call("POST", "/v1/endpoints", body, 200, &ep)
	return ep.ID
}

// epStatus is the runtime's status of an endpoint, as GET
// /v1/endpoints/{id} shows it.
type epStatus struct {
	Workers struct {
		Initializing, Idle, Running, Throttled, Unhealthy, Draining int
	}
	Desired                    int
	Unhealthy                  bool
	Reason, Warning, LastError string
	Failures, Crashes          int
	Attempts                   int
}

func (e *kenv) status(ep string) epStatus {
	e.t.Helper()
	var v struct{ Status epStatus }
	e.call("GET", "/v1/endpoints/"+ep, nil, 200, &v)
	return v.Status
}

// health is GET /v2/{id}/health.
type health struct {
	Jobs struct {
		Completed, Failed, InProgress, InQueue, Retried int
	}
	Workers struct {
		Idle, Running, Initializing, Ready, Throttled, Unhealthy int
	}
	Reason string
}

func (e *kenv) health(ep string) health {
	e.t.Helper()
	var h health
	e.call("GET", "/v2/"+ep+"/health", nil, 200, &h)
	return h
}

type jobStatus struct {
	ID, Status, WorkerID, Error string
	Output                      json.RawMessage
}

func (e *kenv) run(ep string, input any) string {
	e.t.Helper()
	var j jobStatus
	e.call("POST", "/v2/"+ep+"/run", map[string]any{"input": input}, 200, &j)
	return j.ID
}

func (e *kenv) job(ep, id string) jobStatus {
	e.t.Helper()
	var j jobStatus
	e.call("GET", "/v2/"+ep+"/status/"+id, nil, 200, &j)
	return j
}

// waitJob waits until the job is in a final state and returns it.
func (e *kenv) waitJob(ep, id string) jobStatus {
	e.t.Helper()
	var j jobStatus
	e.eventually("job "+id+" to finish", func() bool {
		j = e.job(ep, id)
		return slices.Contains([]string{"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}, j.Status)
	}, func() string { return fmt.Sprintf("%+v; endpoint %+v", j, e.status(ep)) })
	return j
}

// Pods, as the cluster (admin) sees them.

func (e *kenv) pods(ep string) []corev1.Pod {
	e.t.Helper()
	sel := runtime.LabelManaged + "=true"
	if ep != "" {
		sel += "," + runtime.LabelEndpoint + "=" + ep
	}
	l, err := e.c.AdminClient.CoreV1().Pods(e.ns.Name).List(e.ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		e.t.Fatal(err)
	}
	slices.SortFunc(l.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return l.Items
}

func podNames(ps []corev1.Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+"("+string(p.Status.Phase)+")")
	}
	return out
}

// newPod waits for a Pod of the endpoint whose name is not in seen, bound
// to a node when bound is true, and returns it.
func (e *kenv) newPod(ep string, seen []string, bound bool) corev1.Pod {
	e.t.Helper()
	var got corev1.Pod
	e.eventually("a new Pod of endpoint "+ep, func() bool {
		for _, p := range e.pods(ep) {
			if !slices.Contains(seen, p.Name) && p.DeletionTimestamp == nil && (!bound || p.Spec.NodeName != "") {
				got = p
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("pods %v; endpoint %+v", podNames(e.pods(ep)), e.status(ep)) })
	return got
}

// workerProc is a worker Pod the test is the kubelet of: echoworker runs
// as a local process with the Pod's environment (its output the
// container's log, for pods/log); the Pod is reported Running, and then
// what the process does — its exit (Terminated with its code) and, once
// the Pod's deletion is asked, SIGTERM, SIGKILL after the deletion's grace,
// the container's end and the end of the deletion, as a kubelet does.
type workerProc struct {
	pod  string
	cmd  *exec.Cmd
	done chan struct{} // the kubelet loop ended
	exit chan int      // the process's exit code, once
}

// exitCode waits for the worker's process to end and returns its exit
// code.
func (w *workerProc) exitCode(t testing.TB) int {
	t.Helper()
	select {
	case code := <-w.exit:
		return code
	case <-time.After(waitLong):
		t.Fatalf("the worker of pod %s still runs after %s", w.pod, waitLong)
		return 0
	}
}

// runPod acts as the kubelet of the Pod (see workerProc): it waits until
// the Pod is bound to a node, starts echoworker and reports it Running.
// extraEnv adds to the Pod's environment (e.g. ECHOWORKER_… behaviour).
func (e *kenv) runPod(name string, extraEnv ...string) *workerProc {
	e.t.Helper()
	return e.runPodWith(name, echoworker(e.t), "127.0.0.1", extraEnv...)
}

// runPodWith is runPod running bin, the Pod's IP reported as podIP.
func (e *kenv) runPodWith(name, bin, podIP string, extraEnv ...string) *workerProc {
	e.t.Helper()
	p, err := e.c.WaitPod(e.ctx, e.ns.Name, name, waitLong, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	if err != nil {
		e.t.Fatal(err)
	}
	// A kubelet refuses what it cannot run (CreateContainerConfigError):
	// here the test fails, as Berth made such a Pod.
	if err := kubetest.CheckRunnable(p); err != nil {
		e.t.Fatalf("pod %s: %v", name, err)
	}
	var env, args []string
	var mounts []corev1.VolumeMount
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		cenv, err := kubetest.ContainerEnv(e.ctx, e.c.AdminClient, p, c)
		if err != nil {
			e.t.Fatalf("pod %s: %v", name, err)
		}
		env = append(env, cenv...)
		args, mounts = c.Args, c.VolumeMounts // bin stands for the image's entrypoint
	}
	env = append(env, extraEnv...)
	cmd := exec.Command(bin, args...)
	if script := e.mountScript(p, mounts); script != "" {
		cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", bin}, args...)...)
	}
	cmd.Env = env
	logw := e.kl.Log(e.ns.Name, name, container)
	cmd.Stdout, cmd.Stderr = logw, logw
	// Killed with the test binary, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	w := &workerProc{pod: name, cmd: cmd, done: make(chan struct{}), exit: make(chan int, 1)}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		w.exit <- cmd.ProcessState.ExitCode()
		close(exited)
	}()
	ctx, cancel := context.WithCancel(e.ctx)
	e.t.Cleanup(func() {
		cancel()
		<-w.done
	})
	if _, err := e.kl.Running(ctx, e.ns.Name, name, podIP); err != nil {
		_ = cmd.Process.Kill()
		e.t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		defer func() {
			_ = cmd.Process.Kill()
			<-exited
		}()
		e.kubelet(ctx, name, cmd, exited)
	}()
	e.mu.Lock()
	e.procs = append(e.procs, w)
	e.mu.Unlock()
	return w
}

// pullFails acts as the kubelet of a Pod whose image cannot be pulled: once
// the Pod is bound it reports ErrImagePull, then ImagePullBackOff, and
// finishes the Pod's deletion when it is asked.
func (e *kenv) pullFails(name string) {
	e.t.Helper()
	if _, err := e.c.WaitPod(e.ctx, e.ns.Name, name, waitLong, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }); err != nil {
		e.t.Fatal(err)
	}
	msg := "pull access denied for registry.example.com/team/missing, repository does not exist or may require 'docker login'"
	for _, reason := range []string{"ErrImagePull", "ImagePullBackOff"} {
		if _, err := e.kl.Waiting(e.ctx, e.ns.Name, name, reason, msg); err != nil && !apierrors.IsNotFound(errors.Unwrap(err)) {
			e.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		e.kubelet(ctx, name, nil, nil)
	}()
}

// kubelet follows the Pod (a watch) and the process (nil: none runs) until
// the Pod is gone or ctx ends.
func (e *kenv) kubelet(ctx context.Context, name string, cmd *exec.Cmd, exited <-chan struct{}) {
	pods := e.c.AdminClient.CoreV1().Pods(e.ns.Name)
	var grace <-chan time.Time
	deleting, reported := false, cmd == nil
	onDeletion := func(p *corev1.Pod) {
		if deleting || p.DeletionTimestamp == nil {
			return
		}
		deleting = true
		if cmd == nil {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		secs := int64(30)
		if p.DeletionGracePeriodSeconds != nil {
			secs = *p.DeletionGracePeriodSeconds
		}
		grace = time.After(time.Duration(secs) * time.Second)
	}
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return
			}
			if err != nil {
				continue
			}
			rv = p.ResourceVersion
			onDeletion(p)
			if deleting && reported {
				_ = e.kl.FinishDeletion(ctx, e.ns.Name, name)
			}
		}
		wt, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: rv})
		if err != nil {
			rv = ""
			continue
		}
		for open := true; open; {
			select {
			case <-ctx.Done():
				wt.Stop()
				return
			case ev, ok := <-wt.ResultChan():
				if !ok {
					open = false
					break
				}
				switch ev.Type {
				case watch.Deleted:
					wt.Stop()
					return
				case watch.Error:
					rv, open = "", false
					continue
				}
				if p, ok := ev.Object.(*corev1.Pod); ok {
					rv = p.ResourceVersion
					onDeletion(p)
				}
			case <-grace:
				grace = nil
				_ = cmd.Process.Kill()
			case <-exited:
				exited = nil
				if !reported {
					reported = true
					code := int32(cmd.ProcessState.ExitCode())
					if code < 0 { // killed by a signal
						code = 137
					}
					reason := "Completed"
					if code != 0 {
						reason = "Error"
					}
					if _, err := e.kl.Terminated(ctx, e.ns.Name, name, code, reason, ""); err != nil && !apierrors.IsNotFound(errors.Unwrap(err)) && ctx.Err() == nil {
						e.t.Logf("kubelet: report pod %s terminated: %v", name, err)
					}
				}
			}
			if deleting && reported {
				_ = e.kl.FinishDeletion(ctx, e.ns.Name, name)
			}
		}
		wt.Stop()
	}
}

// logBuffer holds Berth's log for a test to read (written concurrently).
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mountScript is the shell script that bind-mounts, in the Pod's private
// mount namespace, each claim of e.claimDirs the container mounts at its
// mountPath (then read-only when the mount or the volume says so) and
// execs the program: "" when it mounts none. Mount points missing on this
// machine are made (empty directories, removed when the test ends).
func (e *kenv) mountScript(p *corev1.Pod, mounts []corev1.VolumeMount) string {
	var b strings.Builder
	for _, m := range mounts {
		for _, v := range p.Spec.Volumes {
			if v.Name != m.Name || v.PersistentVolumeClaim == nil || e.claimDirs[v.PersistentVolumeClaim.ClaimName] == "" {
				continue
			}
			e.mountPoint(m.MountPath)
			fmt.Fprintf(&b, "/usr/bin/mount --bind '%s' '%s' && ", e.claimDirs[v.PersistentVolumeClaim.ClaimName], m.MountPath)
			if m.ReadOnly || v.PersistentVolumeClaim.ReadOnly {
				fmt.Fprintf(&b, "/usr/bin/mount -o remount,bind,ro '%s' && ", m.MountPath)
			}
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + `exec "$@"`
}

// mountPoint makes dir (and its missing parents) on this machine, removed
// (when empty) at the test's end.
func (e *kenv) mountPoint(dir string) {
	var made []string
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		for _, d := range made {
			_ = os.Remove(d)
		}
	})
}
