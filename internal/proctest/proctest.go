// Package proctest runs Berth's binaries as processes, for the tests that
// run them as a user, systemd or a container does: each main package built
// once per test binary, `berth serve` started with its flags and
// environment and known to serve when it tells its notify socket READY=1
// (as systemd learns it: no polling of its port), killed as a crash does,
// stopped as systemd does, and started again on the same address and data.
// It is the one way the end-to-end suites start the binary.
package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The binaries are built once per test binary: each go build links for
// seconds, tens of seconds on a busy machine.
var (
	binDir = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "berth-test-bin-") })
	builds sync.Map // "pkg race" → func() (string, error)
)

// Build builds the main package pkg (an import path: "berth",
// "berth/testdata/echoworker") once per test binary and returns the
// binary; with race, under -race when this test binary runs with it (the
// build then shares the test's compiled packages, and the process is
// checked for races too). RemoveBuilds removes them.
func Build(tb testing.TB, pkg string, race bool) string {
	tb.Helper()
	race = race && raceEnabled
	f, _ := builds.LoadOrStore(fmt.Sprint(pkg, " ", race), sync.OnceValues(func() (string, error) {
		dir, err := binDir()
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_"))
		args := []string{"build", "-o", bin}
		if race {
			bin += "-race"
			args = []string{"build", "-race", "-o", bin}
		}
		if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
		return bin, nil
	}))
	bin, err := f.(func() (string, error))()
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// RemoveBuilds removes what Build made (TestMain, after m.Run).
func RemoveBuilds() {
	if dir, err := binDir(); err == nil {
		os.RemoveAll(dir)
	}
}

// Environ is this process's environment without the developer's own
// BERTH_* settings (every serve flag has one) and NOTIFY_SOCKET, so a
// process runs with the flags and variables its test gives.
func Environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BERTH_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Run runs the berth binary (without -race) with args to its end and
// returns its output and exit code. env is added to the environment.
func Run(t testing.TB, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Build(t, "berth", false), args...)
	cmd.Env = Environ(env...)
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

// Options is how a berth serve process is started.
type Options struct {
	Addr string   // --addr; "" a free loopback port
	Data string   // --data; "" a new directory
	Key  string   // BERTH_API_KEY; "" unset
	Args []string // further flags
	Env  []string // further environment
	Race bool     // built with -race when the test binary is (Build)
}

// Berth is one `berth serve` process of a test, started again on the same
// address and data directory by each Start: Kill ends it as a crash does
// (SIGKILL), Stop as systemd does (SIGTERM, a clean close). The test's end
// stops it, and shows every run's output if the test failed.
type Berth struct {
	t    testing.TB
	o    Options
	Addr string  // host:port
	Base string  // http://Addr
	Data string  // its data directory
	Logs *Buffer // every run's output

	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has ended
}

// Start starts `berth serve` with o and waits until it serves.
func Start(t testing.TB, o Options) *Berth {
	t.Helper()
	if o.Addr == "" {
		o.Addr = FreeAddr(t)
	}
	if o.Data == "" {
		o.Data = filepath.Join(t.TempDir(), "data")
	}
	b := &Berth{t: t, o: o, Addr: o.Addr, Base: "http://" + o.Addr, Data: o.Data, Logs: &Buffer{}}
	t.Cleanup(func() {
		b.Stop()
		if t.Failed() {
			t.Logf("berth serve's output:\n%s", b.Logs.String())
		}
	})
	b.Start()
	return b
}

// FreeAddr is a loopback address no listener holds now: for a process
// that must be told its address before it starts (and keeps it when it
// restarts).
func FreeAddr(t testing.TB) string {
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
func (b *Berth) Start() {
	t := b.t
	t.Helper()
	if b.cmd != nil && !b.Ended() {
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

	env := append(slices.Clone(b.o.Env), "NOTIFY_SOCKET="+sock)
	if b.o.Key != "" {
		env = append(env, "BERTH_API_KEY="+b.o.Key)
	}
	cmd := exec.Command(Build(t, "berth", b.o.Race), append([]string{"serve", "--addr", b.Addr, "--data", b.o.Data}, b.o.Args...)...)
	cmd.Env = Environ(env...)
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

// Ended reports whether the process has ended (killed, stopped, or on
// its own).
func (b *Berth) Ended() bool {
	select {
	case <-b.exited:
		return true
	default:
		return false
	}
}

// Pid is the running process's id.
func (b *Berth) Pid() int { return b.cmd.Process.Pid }

// Kill ends the process with SIGKILL (no shutdown code runs) and waits
// until it has ended.
func (b *Berth) Kill() {
	b.t.Helper()
	if err := b.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		b.t.Fatal(err)
	}
	<-b.exited
}

// Stop ends the process with SIGTERM, as systemd does, and waits until it
// has ended; one that takes more than a minute fails the test and is
// killed. A no-op once it ended.
func (b *Berth) Stop() {
	b.t.Helper()
	if b.cmd == nil || b.Ended() {
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

// Buffer is a bytes.Buffer a process's output and the test share.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
