package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteServiceAccountKubeconfig writes a kubeconfig that authenticates as
// the namespace's ServiceAccount with a bound token (TokenRequest, valid
// for ttl), the CA embedded and the namespace as its context's default:
// what a program outside the cluster (berth serve --kubeconfig) uses to be
// exactly the manifests' ServiceAccount, as in-cluster config would make it.
func (c *Cluster) WriteServiceAccountKubeconfig(ctx context.Context, ns *Namespace, path string, ttl time.Duration) error {
	secs := int64(ttl.Seconds())
	tr, err := c.AdminClient.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, ns.ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of ServiceAccount %s/%s: %w", ns.Name, ns.ServiceAccount, err)
	}
	ca, err := os.ReadFile(c.Admin.CAFile)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.Admin.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos[ns.ServiceAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: ns.ServiceAccount, Namespace: ns.Name}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}

// WriteAdminKubeconfig writes a self-contained kubeconfig (certificates
// embedded) for the admin identity, for kubectl.
func (c *Cluster) WriteAdminKubeconfig(path, namespace string) error {
	read := func(f string) []byte {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil
		}
		return b
	}
	ca, cert, key := read(c.Admin.CAFile), read(c.Admin.CertFile), read(c.Admin.KeyFile)
	if ca == nil || cert == nil || key == nil {
		return errors.New("admin kubeconfig: the cluster's certificates are gone")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.Admin.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin", Namespace: namespace}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}

// RunPodsConfig configures RunPods.
type RunPodsConfig struct {
	Namespace string
	// Program runs for every Pod, whatever the Pod's image: the stand-in
	// for its one container (e.g. a build of testdata/echoworker).
	Program string
	// Env comes before the Pod's container env [PATH only].
	Env []string
	// PodIP is the Pod's reported IP [127.0.0.1: the program serves on
	// this machine].
	PodIP string
	// Events, when set, hears what the runner does, one line each
	// ("started berth-x (pid 12)", "berth-x exited 0", …).
	Events func(line string)
	// Output, when set, also gets every process's output (it always goes
	// to the Pod's log, pods/log).
	Output io.Writer
}

// PodRunner is the kubelet of the Pods of one namespace bound to a
// TestKubelet node (or carrying KubeletAnnotation): it runs a local
// program for each with the Pod's environment (secretKeyRef read from
// its Secret; a missing Secret, or an shm volume without a size limit, is
// CreateContainerConfigError: see ContainerEnv, CheckRunnable), as a kubelet runs the
// Pod's container, and reports it — Running once started, Succeeded or
// Failed with the exit code when it exits; a Pod being deleted gets
// SIGTERM, SIGKILL after its grace period, and is removed once the
// program has exited. The program's output is the Pod's log.
type PodRunner struct {
	c      *Cluster
	cfg    RunPodsConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	pods map[string]*runPod
}

type runPod struct {
	cmd         *exec.Cmd
	done        chan struct{}
	terminating bool
}

// RunPods starts a PodRunner on the namespace; Close stops it and kills
// the programs still running.
func (c *Cluster) RunPods(cfg RunPodsConfig) (*PodRunner, error) {
	if cfg.Namespace == "" || cfg.Program == "" {
		return nil, errors.New("RunPods: Namespace and Program are required")
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=" + os.Getenv("PATH")}
	}
	if cfg.PodIP == "" {
		cfg.PodIP = "127.0.0.1"
	}
	if cfg.Events == nil {
		cfg.Events = func(string) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &PodRunner{c: c, cfg: cfg, ctx: ctx, cancel: cancel, pods: map[string]*runPod{}}
	f := informers.NewSharedInformerFactoryWithOptions(c.AdminClient, 0, informers.WithNamespace(cfg.Namespace))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.sync(o) },
		UpdateFunc: func(_, o any) { r.sync(o) },
	}); err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		<-ctx.Done()
		f.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		r.Close()
		return nil, errors.New("RunPods: pods not listed")
	}
	return r, nil
}

func ours(p *corev1.Pod) bool {
	_, annotated := p.Annotations[KubeletAnnotation]
	return annotated || strings.HasPrefix(p.Spec.NodeName, TestKubeletPrefix)
}

// sync acts on a Pod's change (informer callbacks are sequential).
func (r *PodRunner) sync(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" || !ours(p) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.pods[p.Name]
	switch {
	case p.DeletionTimestamp != nil:
		if rp == nil {
			rp = &runPod{done: make(chan struct{})}
			close(rp.done) // never started here
			r.pods[p.Name] = rp
		}
		if rp.terminating {
			return
		}
		rp.terminating = true
		grace := time.Duration(0)
		if p.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
		}
		r.wg.Add(1)
		go r.terminate(p.Name, rp, grace)
	case rp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed:
		rp = &runPod{done: make(chan struct{})}
		r.pods[p.Name] = rp
		if err := r.start(p, rp); err != nil {
			close(rp.done)
			r.cfg.Events(fmt.Sprintf("%s: %v", p.Name, err))
			reason := "CreateContainerError"
			var ce *ConfigError
			if errors.As(err, &ce) {
				reason = "CreateContainerConfigError"
			}
			r.report(p.Name, func(ctx context.Context) error {
				_, err := r.c.Kubelet().Waiting(ctx, r.cfg.Namespace, p.Name, reason, err.Error())
				return err
			})
		}
	}
}

// start runs the program for p (r.mu held).
func (r *PodRunner) start(p *corev1.Pod, rp *runPod) error {
	if len(p.Spec.Containers) != 1 {
		return fmt.Errorf("%d containers: the runner runs Pods of one", len(p.Spec.Containers))
	}
	ctr := p.Spec.Containers[0]
	if err := CheckRunnable(p); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	podEnv, err := ContainerEnv(ctx, r.c.AdminClient, p, ctr)
	cancel()
	if err != nil {
		return err
	}
	env := append(append([]string(nil), r.cfg.Env...), podEnv...)
	out := r.c.Kubelet().Log(r.cfg.Namespace, p.Name, ctr.Name)
	if r.cfg.Output != nil {
		out = io.MultiWriter(out, &prefixWriter{w: r.cfg.Output, prefix: p.Name + " | "})
	}
	cmd := exec.Command(r.cfg.Program)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, out, out
	if err := r.c.sp.start(cmd); err != nil {
		return err
	}
	rp.cmd = cmd
	r.cfg.Events(fmt.Sprintf("started %s (%s, pid %d) for Pod %s on node %s", r.cfg.Program, ctr.Image, cmd.Process.Pid, p.Name, p.Spec.NodeName))
	name := p.Name
	r.report(name, func(ctx context.Context) error {
		_, err := r.c.Kubelet().Running(ctx, r.cfg.Namespace, name, r.cfg.PodIP)
		return err
	})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		r.cfg.Events(fmt.Sprintf("%s exited %d", name, code))
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		r.report(name, func(ctx context.Context) error {
			_, err := r.c.Kubelet().Terminated(ctx, r.cfg.Namespace, name, int32(code), reason, "")
			return err
		})
		// Done once the exit is reported: a deletion (terminate) is
		// finished only then, so the Pod's watchers see how it ended
		// before it goes, as a kubelet reports it.
		close(rp.done)
	}()
	return nil
}

// terminate stops a Pod's program as a kubelet does on deletion (SIGTERM,
// SIGKILL after the grace) and then removes the Pod.
func (r *PodRunner) terminate(name string, rp *runPod, grace time.Duration) {
	defer r.wg.Done()
	if rp.cmd != nil {
		_ = rp.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-rp.done:
		case <-t.C:
			_ = rp.cmd.Process.Kill()
			<-rp.done
		case <-r.ctx.Done():
			_ = rp.cmd.Process.Kill()
			<-rp.done
		}
		t.Stop()
	}
	r.report(name, func(ctx context.Context) error { return r.c.Kubelet().FinishDeletion(ctx, r.cfg.Namespace, name) })
	r.cfg.Events(name + " deleted")
	r.mu.Lock()
	delete(r.pods, name)
	r.mu.Unlock()
}

// report writes a Pod's status; a Pod already gone is not an error.
func (r *PodRunner) report(name string, f func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	if err := f(ctx); err != nil && !apierrors.IsNotFound(err) && r.ctx.Err() == nil {
		r.cfg.Events(fmt.Sprintf("%s: status: %v", name, err))
	}
}

// Close stops the runner: programs still running are killed (their Pods
// keep the status last written).
func (r *PodRunner) Close() {
	r.cancel()
	r.mu.Lock()
	for _, rp := range r.pods {
		if rp.cmd != nil {
			select {
			case <-rp.done:
			default:
				_ = rp.cmd.Process.Kill()
			}
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// prefixWriter prefixes each line.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []byte
	for _, c := range b {
		if !p.mid {
			out = append(out, p.prefix...)
		}
		out = append(out, c)
		p.mid = c != '\n'
	}
	_, err := p.w.Write(out)
	return len(b), err
}
