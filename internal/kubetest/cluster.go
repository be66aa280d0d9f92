// Package kubetest runs a real Kubernetes control plane for tests: etcd,
// kube-apiserver, kube-scheduler and kube-controller-manager built from
// the Go module proxy (.ci/kube-binaries), with kwok as the kubelet of
// fake nodes — GPU nodes with nvidia.com/gpu allocatable and NVIDIA GPU
// Feature Discovery labels, and CPU-only nodes.
//
// One cluster serves a test package (Main + Shared); each test gets its
// own namespace carrying the RBAC of deploy/kubernetes and a rest.Config
// impersonating that ServiceAccount (Namespace), so code under test has
// exactly the permissions the manifests grant. Set-up and acting as the
// kubelet use the admin config (Cluster.Admin, Kubelet).
//
// Node and pod IPs are loopback addresses (127.0.0.1, 127.16.0.0/16): code
// under test that dials a pod IP stays on the machine, and a test can serve
// a pod's port itself on that IP. Kubernetes refuses loopback addresses in
// EndpointSlices, so Services list no endpoints for these pods.
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
//
//	func TestX(t *testing.T) {
//		c := kubetest.Shared(t)                     // skips without the binaries (fails under BERTH_REQUIRE_DOCKER=1)
//		ns := c.Namespace(t)                        // ns.Name, ns.Config (as the berth ServiceAccount), ns.Client
//		c.AddNode(t, kubetest.NodeSpec{GPUs: 2, GPUProduct: "NVIDIA-GeForce-RTX-4090", GPUMemoryMiB: 24564})
//		...
//	}
package kubetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Cluster is a running control plane with kwok.
type Cluster struct {
	// Admin is a system:masters identity: for a test's own set-up and for
	// acting as the kubelet. Code under test gets Namespace(t).Config.
	Admin *rest.Config
	// AdminClient is a clientset for Admin.
	AdminClient kubernetes.Interface
	// StartupTime is how long Start took, binaries to a usable cluster;
	// StartupPhases says where it went.
	StartupTime   time.Duration
	StartupPhases string

	dir     string
	sp      *spawner
	kubelet *kubeletServer // pods/log of every node
	mu      sync.Mutex
	procs   []*process // in start order; stopped in reverse
	seq     atomic.Int64

	rbacOnce sync.Once
	rbac     *rbacObjects
	rbacErr  error

	stopOnce sync.Once
	stopErr  error
}

// StartTimeout bounds Start; BERTH_KUBE_START_TIMEOUT overrides it. It is
// generous because the tests run with -race on a loaded 2-core machine,
// where the API server alone has been seen to need tens of seconds.
func StartTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("BERTH_KUBE_START_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 5 * time.Minute
}

// Start starts a cluster of the test's own, stopped when the test ends.
// Most tests share their package's cluster instead (Shared).
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	dir := Require(tb)
	c, err := start(dir)
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("kubetest: %v", err)
		}
	})
	tb.Logf("kubetest: cluster started in %s (%s)", c.StartupTime.Round(time.Millisecond), c.StartupPhases)
	return c
}

// StartCluster starts a cluster for a program that is not a test (the
// kubedev command): the binaries must be in BinDir. The caller stops it.
func StartCluster() (*Cluster, error) {
	dir, err := findBinaries()
	if err != nil {
		return nil, err
	}
	return start(dir)
}

var shared struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	c       *Cluster
	err     error
}

// Main runs the package's tests (m.Run) and then stops the cluster Shared
// started, if any, and runs after (what the package's tests left for the
// end: a binary built once for all of them); it exits with the tests'
// code. Call it from TestMain.
func Main(m *testing.M, after ...func()) {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	defer func() {
		for _, f := range after {
			f()
		}
		os.Exit(code)
	}()
	shared.mu.Lock()
	c := shared.c
	shared.mu.Unlock()
	if c != nil {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubetest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
}

// Shared returns the package's cluster, starting it on first use (so a
// package's tests that need none do not pay for it). The package's
// TestMain must call Main, which stops it after the last test.
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	dir := Require(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		tb.Fatal("kubetest.Shared needs the package's TestMain to call kubetest.Main(m), which stops the cluster")
	}
	if !shared.started {
		shared.started = true
		shared.c, shared.err = start(dir)
		if shared.err == nil {
			tb.Logf("kubetest: shared cluster started in %s (%s)", shared.c.StartupTime.Round(time.Millisecond), shared.c.StartupPhases)
		}
	}
	if shared.err != nil {
		tb.Fatalf("kubetest: %v", shared.err)
	}
	return shared.c
}

func start(binDir string) (c *Cluster, err error) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout())
	defer cancel()
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{dir: dir, sp: newSpawner()}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	bin := func(name string) string { return filepath.Join(binDir, name) }

	ca, err := newAuthority()
	if err != nil {
		return c, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.certPEM, 0o600); err != nil {
		return c, err
	}
	saKey, saPub, err := writeServiceAccountKey(dir)
	if err != nil {
		return c, err
	}
	servingCert, servingKey, err := ca.writeKeyPair(dir, "apiserver", "kube-apiserver", nil,
		"127.0.0.1", "localhost", "10.96.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local")
	if err != nil {
		return c, err
	}
	adminCert, adminKey, err := ca.writeKeyPair(dir, "admin", "kubetest-admin", []string{"system:masters"})
	if err != nil {
		return c, err
	}
	// The API server calls kubelets (pods/log) with a client certificate
	// and checks theirs: both from the cluster's CA (see kubeletServer).
	kubeletClientCert, kubeletClientKey, err := ca.writeKeyPair(dir, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"kubeadm:cluster-admins"})
	if err != nil {
		return c, err
	}
	kubeletCert, kubeletKey, err := ca.writeKeyPair(dir, "kubelet", "kubelet", nil, "127.0.0.1")
	if err != nil {
		return c, err
	}

	// etcd, with data on the temp dir and fsync off: the cluster lives for
	// one test binary.
	etcd, etcdURL, err := c.startRetrying(ctx, func() (*process, string, error) {
		ports, err := freePorts(2)
		if err != nil {
			return nil, "", err
		}
		client, peer := "http://"+hostPort(ports[0]), "http://"+hostPort(ports[1])
		p, err := startProcess(c.sp, dir, "etcd", bin("etcd"),
			"--name=kubetest", "--data-dir="+filepath.Join(dir, "etcd"),
			"--listen-client-urls="+client, "--advertise-client-urls="+client,
			"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
			"--initial-cluster=kubetest="+peer, "--unsafe-no-fsync=true", "--log-level=warn")
		if err != nil {
			return nil, "", err
		}
		return p, client, waitHealthy(ctx, p, healthClient(nil, nil), client+"/readyz")
	})
	if err != nil {
		return c, err
	}
	_ = etcd
	phase := func(name string) {
		c.StartupPhases += fmt.Sprintf("%s %s, ", name, time.Since(began).Round(10*time.Millisecond))
	}
	phase("etcd")

	adminPair, err := tls.LoadX509KeyPair(adminCert, adminKey)
	if err != nil {
		return c, err
	}
	audit, err := auditFlags(dir)
	if err != nil {
		return c, err
	}
	_, apiURL, err := c.startRetrying(ctx, func() (*process, string, error) {
		port, err := freePort()
		if err != nil {
			return nil, "", err
		}
		url := "https://" + hostPort(port)
		p, err := startProcess(c.sp, dir, "kube-apiserver", bin("kube-apiserver"), append(audit,
			"--etcd-servers="+etcdURL,
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
			// The kubernetes Service's endpoints would have to be a
			// non-loopback address; nothing in a test reaches the API
			// server through it.
			"--endpoint-reconciler-type=none",
			"--tls-cert-file="+servingCert, "--tls-private-key-file="+servingKey,
			"--client-ca-file="+caFile,
			"--authorization-mode=Node,RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
			"--service-cluster-ip-range=10.96.0.0/16",
			"--allow-privileged=true", // as kubeadm and k3s
			"--kubelet-client-certificate="+kubeletClientCert, "--kubelet-client-key="+kubeletClientKey,
			"--kubelet-certificate-authority="+caFile,
			// A node's InternalIP (127.0.0.1), never its name: no DNS.
			"--kubelet-preferred-address-types=InternalIP",
			"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
			"--profiling=false", "--v=1")...)
		if err != nil {
			return nil, "", err
		}
		// /readyz: every post-start hook done (bootstrap RBAC roles,
		// priority classes, the kubernetes Service), not merely serving.
		return p, url, waitHealthy(ctx, p, healthClient(ca.certPEM, &adminPair), url+"/readyz")
	})
	if err != nil {
		return c, err
	}

	phase("kube-apiserver")
	c.Admin = &rest.Config{
		Host:            apiURL,
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile, CertFile: adminCert, KeyFile: adminKey},
		QPS:             200, Burst: 400, // the test's own set-up is not what is measured
		UserAgent: "kubetest-admin",
	}
	if c.AdminClient, err = kubernetes.NewForConfig(c.Admin); err != nil {
		return c, err
	}
	if c.kubelet, err = startKubeletServer(c.AdminClient, ca, kubeletCert, kubeletKey); err != nil {
		return c, err
	}

	// The other components, each as its own identity (bootstrap RBAC
	// grants their roles), started together.
	kubeconfig := func(name, cn string, orgs ...string) (string, error) {
		cert, key, err := ca.writeKeyPair(dir, name, cn, orgs)
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, name+".kubeconfig")
		return path, writeKubeconfig(path, apiURL, caFile, cert, key)
	}
	schedKC, err := kubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return c, err
	}
	kcmKC, err := kubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return c, err
	}
	// kwok writes node and pod status, leases and deletes pods: the
	// kubelet's powers without the Node authorizer's per-node scoping.
	kwokKC, err := kubeconfig("kwok", "kwok", "system:masters")
	if err != nil {
		return c, err
	}
	stages, err := kwokStages()
	if err != nil {
		return c, err
	}
	kwokConfig := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(kwokConfig, []byte(stages), 0o600); err != nil {
		return c, err
	}

	starters := []func() (*process, string, error){
		func() (*process, string, error) {
			port, err := freePort()
			if err != nil {
				return nil, "", err
			}
			p, err := startProcess(c.sp, dir, "kube-scheduler", bin("kube-scheduler"),
				"--kubeconfig="+schedKC, "--authentication-kubeconfig="+schedKC, "--authorization-kubeconfig="+schedKC,
				"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
				"--cert-dir="+filepath.Join(dir, "scheduler-certs"), "--leader-elect=false", "--v=1")
			if err != nil {
				return nil, "", err
			}
			return p, "", waitHealthy(ctx, p, healthClient(nil, nil), "https://"+hostPort(port)+"/readyz")
		},
		func() (*process, string, error) {
			port, err := freePort()
			if err != nil {
				return nil, "", err
			}
			// All default controllers, as in a real cluster: the
			// serviceaccount controller (each namespace's default
			// ServiceAccount, which Pod admission requires), the
			// garbage collector (owner references), the
			// PersistentVolume binder, StatefulSets (deploy/kubernetes),
			// namespace deletion, pod GC and node lifecycle. Each
			// controller runs as its own ServiceAccount, as kubeadm does.
			p, err := startProcess(c.sp, dir, "kube-controller-manager", bin("kube-controller-manager"),
				"--kubeconfig="+kcmKC, "--authentication-kubeconfig="+kcmKC, "--authorization-kubeconfig="+kcmKC,
				"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
				"--cert-dir="+filepath.Join(dir, "kcm-certs"), "--leader-elect=false",
				"--use-service-account-credentials=true",
				"--service-account-private-key-file="+saKey, "--root-ca-file="+caFile,
				"--controllers=*", "--v=1")
			if err != nil {
				return nil, "", err
			}
			return p, "", waitHealthy(ctx, p, healthClient(nil, nil), "https://"+hostPort(port)+"/healthz")
		},
		func() (*process, string, error) {
			port, err := freePort()
			if err != nil {
				return nil, "", err
			}
			p, err := startProcess(c.sp, dir, "kwok", bin("kwok"),
				"--kubeconfig="+kwokKC, "--config="+kwokConfig,
				"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
				// Node and pod addresses on loopback: nothing a test does
				// (the API server reaching a kubelet, Berth a pod IP) can
				// leave the machine, and a test can serve a pod's port
				// itself on the pod's IP.
				"--cidr=127.16.0.0/16", "--node-ip=127.0.0.1",
				// The nodes' heartbeat: kwok renews each node's Lease every
				// 10 s, as a kubelet does. Without it (kwok's default)
				// nothing renews a node after its first status, so the node
				// lifecycle controller marked every node NotReady about a
				// minute in, and kwok Ready again: a blip per node.
				"--node-lease-duration-seconds="+strconv.Itoa(NodeLeaseSeconds),
				"--server-address="+hostPort(port))
			if err != nil {
				return nil, "", err
			}
			return p, "", waitHealthy(ctx, p, healthClient(nil, nil), "http://"+hostPort(port)+"/healthz")
		},
	}
	errs := make([]error, len(starters))
	var wg sync.WaitGroup
	for i, s := range starters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = c.startRetrying(ctx, s)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	phase("scheduler+controller-manager+kwok")

	// The controller-manager is working once the default namespace has
	// its default ServiceAccount.
	if err := waitFor(ctx, "the default ServiceAccount (controller-manager)", func(ctx context.Context) (bool, error) {
		_, err := c.AdminClient.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return c, fmt.Errorf("%w; controller-manager log ends:\n%s", err, c.proc("kube-controller-manager").tail(30))
	}
	phase("default ServiceAccount")
	c.StartupPhases = strings.TrimSuffix(c.StartupPhases, ", ")
	c.StartupTime = time.Since(began)
	return c, nil
}

// startRetrying runs one component's start, again with new ports when it
// died because a port was taken between freePort and its bind.
func (c *Cluster) startRetrying(ctx context.Context, start func() (*process, string, error)) (*process, string, error) {
	for attempt := 1; ; attempt++ {
		p, url, err := start()
		if p != nil {
			c.addProc(p)
		}
		if err == nil || p == nil || attempt == 3 || !errors.Is(err, errExited) || !p.portInUse() || ctx.Err() != nil {
			return p, url, err
		}
		c.removeProc(p)
		_ = os.Rename(p.logPath, fmt.Sprintf("%s.%d", p.logPath, attempt))
	}
}

func (c *Cluster) addProc(p *process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = append(c.procs, p)
}

func (c *Cluster) removeProc(p *process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, q := range c.procs {
		if q == p {
			c.procs = append(c.procs[:i], c.procs[i+1:]...)
			return
		}
	}
}

func (c *Cluster) proc(name string) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return &process{name: name, logPath: filepath.Join(c.dir, name+".log")}
}

// Dir is the cluster's working directory: certificates, kubeconfigs and
// each component's log (NAME.log). It is removed by Stop.
func (c *Cluster) Dir() string { return c.dir }

// Kubeconfig writes a kubeconfig for the admin identity (for a process
// under test that reads KUBECONFIG, or for a human with kubectl while a
// test is paused) and returns its path; it lives as long as the cluster.
func (c *Cluster) Kubeconfig() (string, error) {
	path := filepath.Join(c.dir, "admin.kubeconfig")
	return path, writeKubeconfig(path, c.Admin.Host, c.Admin.CAFile, c.Admin.CertFile, c.Admin.KeyFile)
}

// Stop stops every component (SIGTERM, then SIGKILL after a grace) in
// reverse start order and removes the working directory. It is safe to
// call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		procs := append([]*process(nil), c.procs...)
		c.mu.Unlock()
		var errs []error
		// kwok, the controller-manager and the scheduler together; then
		// the API server; then etcd.
		var tail []*process
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, p := range procs {
			if p.name == "etcd" || p.name == "kube-apiserver" {
				tail = append(tail, p)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.stop(20 * time.Second); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for i := len(tail) - 1; i >= 0; i-- {
			if err := tail[i].stop(30 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		c.sp.close()
		if c.kubelet != nil {
			if err := c.kubelet.close(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// waitFor polls cond (a condition with ctx's deadline, paced, not a sleep)
// until it holds, fails, or ctx ends.
func waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), lastErr)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
