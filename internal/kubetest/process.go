package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// spawner starts every child process from one goroutine locked to its OS
// thread, with a parent-death signal: when the test binary dies without
// running its cleanups (a -timeout panic, SIGKILL), the kernel kills etcd,
// the API server and the rest with it, so no run leaks processes or ports.
// Pdeathsig fires when the thread that forked exits, which is why that
// thread must live as long as the children: it exits only on close, after
// they are stopped.
type spawner struct {
	reqs chan func()
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan func())}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		for f := range s.reqs {
			f()
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

func (s *spawner) close() { close(s.reqs) }

// process is one running component; its output goes to DIR/NAME.log.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // its exit status, once done
}

func startProcess(sp *spawner, dir, name, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "# %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	if err := sp.start(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to terminate (SIGTERM) and kills it when it has not
// exited within grace.
func (p *process) stop(grace time.Duration) error {
	if p == nil || p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within %s of SIGTERM: killed", p.name, grace)
}

// tail returns the last lines of the process's log, for error messages.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// portInUse reports whether the process died because a port it was given
// was taken in the meantime (freePort cannot hold a port for a child).
func (p *process) portInUse() bool {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Contains(b, []byte("address already in use"))
}

// freePort returns a loopback port nobody listens on now. Another process
// may take it before the child binds it; callers retry on "address already
// in use".
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freePorts(n int) ([]int, error) {
	// Hold all listeners until every port is chosen, so they differ.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// healthClient returns an HTTP client for readiness probes: TLS verified
// against the cluster's CA when one is given, with a client certificate
// when one is given (the API server's /readyz needs no authentication, but
// answers authenticated clients the same way).
func healthClient(caPEM []byte, cert *tls.Certificate) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{}
	if caPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		tr.TLSClientConfig.RootCAs = pool
	} else {
		// Components serving a self-signed certificate of their own
		// (scheduler, controller-manager): only their health is read.
		tr.TLSClientConfig.InsecureSkipVerify = true
	}
	if cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	tr.DisableKeepAlives = true
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// errExited is returned by waitHealthy when the process died first.
var errExited = errors.New("exited before it was ready")

// waitHealthy polls url until it answers 200, the process exits, or ctx
// ends. This is a condition with a deadline, not a sleep: the interval only
// paces the polls.
func waitHealthy(ctx context.Context, p *process, client *http.Client, url string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s %w (%v); its log ends:\n%s", p.name, errExited, p.err, p.tail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w (last answer: %s); its log ends:\n%s", p.name, url, ctx.Err(), last, p.tail(30))
		case <-tick.C:
		}
	}
}
