package main

// The tests of serve.go itself, run in-process through the unexported
// serve (its sd_notify messages, its logs, the key it shows): the tests
// that run the built binary as a user does are in e2e/process.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/app"
	"berth/cli"
)

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

// `berth serve --log-format json` logs JSON lines with the component of
// each package, and tells systemd it is ready (sd_notify READY=1 on
// NOTIFY_SOCKET) once it accepts connections.
func TestServeJSONLogsAndReadiness(t *testing.T) {
	dir := t.TempDir()
	conn := notifySocket(t, dir)
	var stderr syncBuffer
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	getenv := func(k string) string { return map[string]string{"BERTH_API_KEY": "serve-test-key"}[k] }
	root := cli.New(cli.Options{Version: "test", Stderr: &stderr, Stdout: &stderr, Getenv: getenv,
		Serve: func(ctx context.Context, o cli.ServeOptions) error {
			o.Ready = func(addr string) { ready <- addr }
			return serve(ctx, o)
		}})
	root.SetArgs([]string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--log-format", "json", "--log-level", "debug"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	waitServing(t, ready, done, &stderr)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "READY=1") {
		t.Fatalf("sd_notify: %q %v", buf[:n], err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}

	seen := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON log line: %q", sc.Text())
		}
		seen[line["msg"].(string)] = line
	}
	if l := seen["berth serving"]; l == nil || l["level"] != "INFO" || l["addr"] == nil {
		t.Errorf("no serving line: %v", seen)
	}
	if l := seen["queue loaded"]; l == nil || l["component"] != "queue" {
		t.Errorf("queue line without its component: %v", l)
	}
	if seen["shutting down"] == nil {
		t.Errorf("no shutdown line")
	}
}

// waitServing waits until serve accepts (ready), failing the test with its
// output if it ends or is not ready within a minute.
func waitServing(t *testing.T, ready chan string, done chan error, out *syncBuffer) {
	t.Helper()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve ended: %v\n%s", err, out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve not ready\n%s", out.String())
	}
}

// notifySocket is systemd's notify socket for a test: NOTIFY_SOCKET names
// it (in dir) until the test ends, and the test reads what serve sends.
func notifySocket(t *testing.T, dir string) *net.UnixConn {
	t.Helper()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	return conn
}

// serve's settings with no flag — the key, the Pod's own name, the load
// balancer's — are read with the flags (cli's serve command) and reach
// app.Config; a BERTH_LB_TIMEOUT that is not a positive duration stops the
// start (exit 2) naming it, rather than being taken as the default.
func TestServeSettingsFromTheEnvironment(t *testing.T) {
	env := map[string]string{"BERTH_API_KEY": "k1", "BERTH_LB_DOMAIN": "lb.example", "BERTH_LB_TIMEOUT": "90s",
		"POD_NAME": "berth-0", "POD_NAMESPACE": "ns1"}
	var got app.Config
	var out bytes.Buffer
	code := cli.Main([]string{"serve", "--runtime", "kubernetes", "--advertise-url", "http://berth.test:8081"}, cli.Options{
		Stdout: &out, Stderr: &out, Getenv: func(k string) string { return env[k] },
		Serve: func(_ context.Context, o cli.ServeOptions) error { got = serveConfig(o); return nil }})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	k := got.Backend.Kubernetes()
	if got.APIKey != "k1" || got.LB.Domain != "lb.example" || got.LB.Timeout != 90*time.Second || k == nil || k.SelfPod != "berth-0" || k.SelfNamespace != "ns1" {
		t.Errorf("config: key %q, LB %q %s, kubernetes %+v", got.APIKey, got.LB.Domain, got.LB.Timeout, k)
	}
	for _, bad := range []string{"5", "soon", "-1m", "0s"} {
		env["BERTH_LB_TIMEOUT"] = bad
		out.Reset()
		code := cli.Main([]string{"serve"}, cli.Options{Stdout: &out, Stderr: &out, Getenv: func(k string) string { return env[k] },
			Serve: func(context.Context, cli.ServeOptions) error { t.Fatal("served"); return nil }})
		if code != cli.ExitUsage || !strings.Contains(out.String(), "BERTH_LB_TIMEOUT") || !strings.Contains(out.String(), bad) {
			t.Errorf("BERTH_LB_TIMEOUT=%s: exit %d: %s", bad, code, out.String())
		}
	}
}

func TestServeBadLogFlags(t *testing.T) {
	for _, args := range [][]string{{"serve", "--log-format", "xml"}, {"serve", "--log-level", "loud"}, {"serve", "--rate-limits", "maybe"}} {
		var out bytes.Buffer
		code := cli.Main(args, cli.Options{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" },
			Serve: func(context.Context, cli.ServeOptions) error { t.Fatal("served"); return nil }})
		if code != cli.ExitUsage || !strings.Contains(out.String(), args[1]) {
			t.Errorf("%v: exit %d: %s", args, code, out.String())
		}
	}
}

// serveCmd runs `berth serve` in-process with args and no environment
// variable (cli's Getenv: no BERTH_API_KEY): ready is its address once it accepts, done its
// result. cancel stops it.
func serveCmd(t *testing.T, stderr *syncBuffer, args ...string) (ready chan string, done chan error, cancel context.CancelFunc) {
	t.Helper()
	ready, done = make(chan string, 1), make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	root := cli.New(cli.Options{Version: "test", Stderr: stderr, Stdout: stderr, Getenv: func(string) string { return "" },
		Serve: func(ctx context.Context, o cli.ServeOptions) error {
			o.Ready = func(addr string) { ready <- addr }
			return serve(ctx, o)
		}})
	root.SetArgs(append([]string{"serve"}, args...))
	go func() { done <- root.ExecuteContext(ctx) }()
	return ready, done, cancel
}

var shownKeyRe = regexp.MustCompile(`shown only this once[^\n]*\n\n\s+(berth_[0-9a-f]+)\n`)

// A first start that fails (its port in use) does not use up the one
// showing of the generated API key: it shows none and stores none; the
// next start that serves shows a key, which the API then takes; the start
// after that shows none.
func TestServeFailedFirstStartKeepsTheKeyToShow(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock")) // no containers needed
	data := filepath.Join(t.TempDir(), "data")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	var first syncBuffer
	_, done, cancel := serveCmd(t, &first, "--addr", taken.Addr().String(), "--data", data)
	defer cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("serve on a taken port: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve on a taken port did not fail")
	}
	if strings.Contains(first.String(), "berth_") {
		t.Fatalf("a failed start showed a key:\n%s", first.String())
	}

	var second syncBuffer
	ready, done, cancel := serveCmd(t, &second, "--addr", "127.0.0.1:0", "--data", data)
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve ended: %v\n%s", err, second.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve not ready\n%s", second.String())
	}
	m := shownKeyRe.FindStringSubmatch(second.String())
	if m == nil {
		cancel()
		t.Fatalf("the first start that serves showed no key:\n%s", second.String())
	}
	for key, want := range map[string]int{m[1]: http.StatusOK, "berth_wrong": http.StatusUnauthorized} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/endpoints", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET /v1/endpoints with %s: %d, want %d", key, res.StatusCode, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}

	var third syncBuffer
	ready, done, cancel = serveCmd(t, &third, "--addr", "127.0.0.1:0", "--data", data)
	waitServing(t, ready, done, &third)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if strings.Contains(third.String(), "berth_") || !strings.Contains(third.String(), "using the stored API keys") {
		t.Errorf("a later start:\n%s", third.String())
	}
}

// `berth serve --apply FILE` under systemd (Type=notify) tells systemd the
// start is still under way (EXTEND_TIMEOUT_USEC) while the file is
// applied — a first build may take longer than the unit's start timeout —
// and READY=1 only after it.
func TestServeApplyExtendsTheStartTimeout(t *testing.T) {
	dir := t.TempDir()
	conn := notifySocket(t, dir)
	file := filepath.Join(dir, "berth.json")
	if err := os.WriteFile(file, []byte(`{"templates": [{"name": "t", "imageName": "me/echo:1", "isServerless": true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	ready, done, cancel := serveCmd(t, &stderr, "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--apply", file)
	defer cancel()
	waitServing(t, ready, done, &stderr)
	var got []string
	buf := make([]byte, 256)
	for !strings.Contains(strings.Join(got, " "), "READY=1") {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("sd_notify after %q: %v", got, err)
		}
		got = append(got, string(buf[:n]))
	}
	if len(got) < 2 || got[0] != "EXTEND_TIMEOUT_USEC=120000000" || got[len(got)-1] != "READY=1" {
		t.Fatalf("notifications %q: want EXTEND_TIMEOUT_USEC=120000000 while applying, then READY=1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}
