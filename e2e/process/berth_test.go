package process_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The binaries these tests run as processes are built once per test run:
// each go build links for seconds, tens of seconds on a busy machine.
var (
	binDir string
	builds sync.Map // import path → func() (string, error)
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBin builds the main package pkg (an import path: "berth",
// "berth/testdata/echoworker") once per test run and returns the binary.
func buildBin(t testing.TB, pkg string) string {
	t.Helper()
	f, _ := builds.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
		bin := filepath.Join(binDir, strings.ReplaceAll(pkg, "/", "_"))
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %w\n%s", pkg, err, out)
		}
		return bin, nil
	}))
	bin, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// berthBin returns the berth binary (built without -race: a raced process
// is capped at 8,128 goroutines, and these tests measure the real one).
func berthBin(t testing.TB) string { return buildBin(t, "berth") }

// environ is this process's environment without the developer's own
// BERTH_* settings (every serve flag has one) and NOTIFY_SOCKET, so a
// process runs with the flags and variables its test gives.
func environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BERTH_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runBerth runs the binary with args to its end and returns its output and
// exit code. env is added to the environment.
func runBerth(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBin(t), args...)
	cmd.Env = environ(env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out), 0
}

// serveOpts is how a berth serve process is started.
type serveOpts struct {
	Addr string   // --addr; "" a free loopback port
	Data string   // --data; "" a new directory
	Key  string   // BERTH_API_KEY; "" unset
	Args []string // further flags
	Env  []string // further environment
}

// berth is one `berth serve` process of a test, started again on the same
// address and data directory by each Start: Kill ends it as a crash does
// (SIGKILL), Stop as systemd does (SIGTERM, a clean close). The test's end
// stops it, and shows every run's output if the test failed.
type berth struct {
	t    *testing.T
	o    serveOpts
	Addr string // host:port
	Base string // http://Addr
	Logs *syncBuffer

	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has ended
}

// startBerth starts `berth serve` with o and waits until it serves.
func startBerth(t *testing.T, o serveOpts) *berth {
	t.Helper()
	if o.Addr == "" {
		o.Addr = freeAddr(t)
	}
	if o.Data == "" {
		o.Data = filepath.Join(t.TempDir(), "data")
	}
	b := &berth{t: t, o: o, Addr: o.Addr, Base: "http://" + o.Addr, Logs: &syncBuffer{}}
	t.Cleanup(func() {
		b.Stop()
		if t.Failed() {
			t.Logf("berth serve's output:\n%s", b.Logs.String())
		}
	})
	b.Start()
	return b
}

// freeAddr is a loopback address no listener holds now: for a process
// that must be told its address before it starts (and keeps it when it
// restarts).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Start runs the process (again) and returns once it accepts connections:
// serve tells systemd's notify socket READY=1 then, and the test listens
// there as systemd would — no polling of the port.
func (b *berth) Start() {
	t := b.t
	t.Helper()
	if b.cmd != nil && !b.ended() {
		t.Fatal("berth serve is still running")
	}
	// Its own short directory: a socket's path is at most 108 bytes.
	dir, err := os.MkdirTemp("", "berth-notify-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	env := append(b.o.Env, "NOTIFY_SOCKET="+sock)
	if b.o.Key != "" {
		env = append(env, "BERTH_API_KEY="+b.o.Key)
	}
	cmd := exec.Command(berthBin(t), append([]string{"serve", "--addr", b.Addr, "--data", b.o.Data}, b.o.Args...)...)
	cmd.Env = environ(env...)
	cmd.Stdout, cmd.Stderr = b.Logs, b.Logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	b.cmd, b.exited = cmd, exited

	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				ready <- err
				return
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if line == "READY=1" {
					ready <- nil
					return
				}
			}
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("notify socket: %v", err)
		}
	case <-exited:
		t.Fatalf("berth serve ended before it served (%v):\n%s", cmd.ProcessState, b.Logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("berth serve not ready within 2 minutes:\n%s", b.Logs.String())
	}
}

func (b *berth) ended() bool {
	select {
	case <-b.exited:
		return true
	default:
		return false
	}
}

// Pid is the running process's id.
func (b *berth) Pid() int { return b.cmd.Process.Pid }

// Kill ends the process with SIGKILL (no shutdown code runs) and waits
// until it has ended.
func (b *berth) Kill() {
	b.t.Helper()
	if err := b.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		b.t.Fatal(err)
	}
	<-b.exited
}

// Stop ends the process with SIGTERM, as systemd does, and waits until it
// has ended; one that takes more than a minute fails the test and is
// killed. A no-op once it ended.
func (b *berth) Stop() {
	b.t.Helper()
	if b.cmd == nil || b.ended() {
		return
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(time.Minute):
		b.t.Error("berth serve did not stop within a minute of SIGTERM")
		b.Kill()
	}
}

// syncBuffer is a bytes.Buffer a process's output and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
