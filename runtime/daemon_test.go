package runtime_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth/internal/dockertest"
	"berth/runtime"
	"berth/store"
)

// sockProxy forwards a unix socket to the Docker daemon and can go down
// like a restarting daemon: connections cut, new ones refused.
type sockProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newSockProxy(t *testing.T, target string) *sockProxy {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &sockProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *sockProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("unix", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close() }()
	}
}

// cut closes every connection and refuses new ones until up.
func (p *sockProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *sockProxy) up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// TestDaemonRestart: when the daemon goes away the event stream ends; the
// Supervisor re-subscribes with back-off, reconciles, notices the worker
// that died meanwhile and replaces it. (Not parallel: it points
// DOCKER_HOST at a proxy.)
func TestDaemonRestart(t *testing.T) {
	dockertest.Require(t)
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	if !strings.HasPrefix(host, "unix://") {
		t.Skipf("DOCKER_HOST %s is not a unix socket", host)
	}
	direct, err := client.New(client.WithHost(host))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	proxy := newSockProxy(t, strings.TrimPrefix(host, "unix://"))
	t.Setenv("DOCKER_HOST", "unix://"+proxy.ln.Addr().String())

	e := newEnv(t)
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.WorkersMin = 1 })
	s := e.start()
	e.eventually("a warm worker", func() bool { return len(e.readyWorkers(ep.ID)) == 1 })
	first := e.readyWorkers(ep.ID)[0]

	proxy.cut()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	// The die event is emitted while Berth cannot see it: the test's own
	// subscription (active once Events returns) sees it before the proxy
	// comes back up.
	died := direct.Events(ctx, client.EventsListOptions{Filters: client.Filters{}.
		Add("type", "container").Add("event", "die").Add("container", first.ContainerID)})
	if _, err := direct.ContainerKill(ctx, first.ContainerID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-died.Messages:
	case err := <-died.Err:
		t.Fatalf("no die event of the killed worker: %v", err)
	}
	proxy.up()

	e.eventually("a replacement", func() bool {
		ws := e.readyWorkers(ep.ID)
		return len(ws) == 1 && ws[0].WorkerID != first.WorkerID
	})
	if st := s.Status(ep.ID); !strings.Contains(st.LastError, "exited with code 137") {
		t.Fatalf("status %+v", st)
	}
	var left []string
	for _, c := range e.containers(runtime.KindWorker) {
		left = append(left, c.Labels[runtime.LabelWorker])
	}
	sort.Strings(left)
	// The killed worker's container is kept (a crash), and one replacement runs.
	if len(left) != 2 || !slices.Contains(left, first.WorkerID) {
		t.Fatalf("containers of workers %v", left)
	}
}

// TestFlashBootDaemonReconnect: a frozen worker resumed behind Berth's
// back while the daemon cannot be reached (as after a daemon restart with
// live-restore) is found running at the reconcile that follows the
// reconnection: it counts as idle again, not frozen, and serves the next
// job without a thaw. (Not parallel: it points DOCKER_HOST at a proxy.)
func TestFlashBootDaemonReconnect(t *testing.T) {
	dockertest.Require(t)
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	if !strings.HasPrefix(host, "unix://") {
		t.Skipf("DOCKER_HOST %s is not a unix socket", host)
	}
	direct, err := client.New(client.WithHost(host))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	proxy := newSockProxy(t, strings.TrimPrefix(host, "unix://"))
	t.Setenv("DOCKER_HOST", "unix://"+proxy.ln.Addr().String())

	e, clock, _ := flashEnv(t)
	tm := e.putTemplate(nil)
	ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.Flashboot, ep.WorkersMax = true, 1 })
	s := e.start()
	e.waitCompleted(ep.ID, e.run(ep.ID, `{"echo": "cold"}`))
	e.workerIn(ep.ID, runtime.StateIdle)
	w := e.idleUntilFrozen(ep.ID, clock)
	e.eventually("paused", func() bool { return e.paused(w.ContainerID) })

	proxy.cut()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := direct.ContainerUnpause(ctx, w.ContainerID, client.ContainerUnpauseOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy.up()
	// The re-subscription waits out its back-off on the fake clock.
	e.eventually("the resumed worker idle again", func() bool {
		clock.Advance(500 * time.Millisecond)
		ws := s.Workers(ep.ID)
		return len(ws) == 1 && ws[0].State == runtime.StateIdle && ws[0].WorkerID == w.WorkerID
	})
	for _, l := range e.q().Workers(ep.ID) {
		if l.Frozen {
			t.Fatalf("the queue still has %s frozen", l.WorkerID)
		}
	}
	if out := jsonString(e.waitCompleted(ep.ID, e.run(ep.ID, `{"echo": "resumed"}`))); out != "resumed" {
		t.Fatalf("output %q", out)
	}
	if st := s.Status(ep.ID); st.Attempts != 1 {
		t.Fatalf("%d containers launched", st.Attempts)
	}
}
