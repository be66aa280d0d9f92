package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/runtime"
)

func TestRunLogsWaitInspect(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	inst := dockertest.Unique("inst-")
	s := spec(img, inst, "echo")
	s.Name = dockertest.Unique("berth-test-echo-")
	s.Env = []string{"MSG=hello world", "EXIT=3"}
	s.Labels[runtime.LabelEndpoint] = "ep1"
	s.Labels[runtime.LabelWorker] = "w1"
	res := create(t, d, s)

	ctx := testCtx(t)
	wait := d.Wait(ctx, res.ID)
	start(t, d, res.ID)
	if r := waitExit(t, wait); r.ExitCode != 3 {
		t.Fatalf("exit code %d, want 3", r.ExitCode)
	}

	logs := readLogs(t, d, res.ID, false)
	for _, want := range []string{"stdout: hello world\n", "stderr: line\n"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("logs %q lack %q", logs, want)
		}
	}
	var parsed int
	for _, line := range strings.SplitAfter(logs, "\n") {
		if ll, ok := runtime.ParseLogLine([]byte(line)); ok {
			parsed++
			if ll.RequestID != "job-1" || ll.Message != "from handler" || ll.Level != "INFO" {
				t.Fatalf("parsed %+v", ll)
			}
		}
	}
	if parsed != 1 {
		t.Fatalf("%d runpod JSON lines in %q, want 1", parsed, logs)
	}
	// Following a stopped container's logs ends at its end.
	if got := readLogs(t, d, res.ID, true); got != logs {
		t.Fatalf("follow logs %q != %q", got, logs)
	}
	// tail picks the last lines only.
	rc, err := d.Logs(ctx, res.ID, false, 1, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(rc)
	var tail []string
	for sc.Scan() {
		tail = append(tail, sc.Text())
	}
	rc.Close()
	if len(tail) != 1 {
		t.Fatalf("tail 1 gave %q", tail)
	}

	info, err := d.Inspect(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != res.ID || info.Name != s.Name || info.Image != img {
		t.Fatalf("identity: %+v", info)
	}
	if info.State != "exited" || info.Running || info.ExitCode != 3 {
		t.Fatalf("state %q running %v exit %d", info.State, info.Running, info.ExitCode)
	}
	// Not ordered: for a fast exit Docker may record FinishedAt before StartedAt.
	if info.StartedAt.IsZero() || info.FinishedAt.IsZero() {
		t.Fatalf("times %v .. %v", info.StartedAt, info.FinishedAt)
	}
	// since after the last line gives nothing; before the start gives all.
	for since, want := range map[time.Time]string{
		info.FinishedAt.Add(time.Second): "",
		info.StartedAt.Add(-time.Second): logs,
	} {
		rc, err := d.Logs(ctx, res.ID, false, 0, since)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(b) != want {
			t.Fatalf("logs since %v: %q, %v; want %q", since, b, err, want)
		}
	}
	for k, v := range map[string]string{runtime.LabelManaged: "true", runtime.LabelDataDir: inst, runtime.LabelKind: runtime.KindWorker,
		runtime.LabelEndpoint: "ep1", runtime.LabelWorker: "w1"} {
		if info.Labels[k] != v {
			t.Fatalf("label %s = %q, want %q", k, info.Labels[k], v)
		}
	}
}

func TestListByInstance(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	instA, instB := dockertest.Unique("inst-a-"), dockertest.Unique("inst-b-")
	a1 := create(t, d, spec(img, instA, "echo"))
	a2 := create(t, d, spec(img, instA, "echo"))
	b1 := create(t, d, spec(img, instB, "echo"))

	ctx := testCtx(t)
	// One of A's has run and exited: List must include stopped containers.
	wait := d.Wait(ctx, a2.ID)
	start(t, d, a2.ID)
	waitExit(t, wait)

	ids := func(inst string) []string {
		list, err := d.List(ctx, inst)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range list {
			out = append(out, c.ID)
		}
		slices.Sort(out)
		return out
	}
	wantA := []string{a1.ID, a2.ID}
	slices.Sort(wantA)
	if got := ids(instA); !slices.Equal(got, wantA) {
		t.Fatalf("List(A) = %v, want %v", got, wantA)
	}
	if got := ids(instB); !slices.Equal(got, []string{b1.ID}) {
		t.Fatalf("List(B) = %v, want %v", got, []string{b1.ID})
	}
	if got := ids(dockertest.Unique("inst-none-")); len(got) != 0 {
		t.Fatalf("List(other) = %v", got)
	}
	if _, err := d.List(ctx, ""); err == nil {
		t.Fatal("List with no instance accepted")
	}
}

func TestKillAndNotFound(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	ctx := testCtx(t)

	res := create(t, d, spec(img, dockertest.Unique("inst-"), "ignore"))
	if err := d.Kill(ctx, res.ID); err != nil {
		t.Fatalf("Kill of a created container: %v", err)
	}
	wait := d.Wait(ctx, res.ID)
	start(t, d, res.ID)
	if err := d.Kill(ctx, res.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if r := waitExit(t, wait); r.ExitCode != 137 {
		t.Fatalf("exit code %d after kill", r.ExitCode)
	}
	if err := d.Remove(ctx, res.ID, false); err != nil {
		t.Fatalf("Remove: %v", err)
	}

	_, err := d.Inspect(ctx, res.ID)
	if !IsNotFound(err) {
		t.Fatalf("Inspect of a removed container: %v, want not found", err)
	}
	if err := d.Remove(ctx, res.ID, true); err != nil {
		t.Fatalf("Remove of a removed container: %v", err)
	}
	if err := d.Start(ctx, res.ID); !IsNotFound(err) {
		t.Fatalf("Start of a removed container: %v, want not found", err)
	}
	r := <-d.Wait(ctx, res.ID)
	if r.Err == nil || !IsNotFound(r.Err) {
		t.Fatalf("Wait on a removed container: %+v, want not found", r)
	}
	if _, err := d.Create(ctx, ContainerSpec{Image: "berth-test/no-such-image:x", Instance: "i"}); !IsNotFound(err) {
		t.Fatalf("Create from a missing image: %v, want not found", err)
	}
}

func TestNameConflict(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	s := spec(img, dockertest.Unique("inst-"), "echo")
	s.Name = dockertest.Unique("berth-test-dup-")
	create(t, d, s)
	_, err := d.Create(testCtx(t), s)
	if !IsConflict(err) {
		t.Fatalf("second create with the same name: %v, want conflict", err)
	}
}

func TestPublishedPorts(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	s := spec(img, dockertest.Unique("inst-"), "serve")
	s.Labels[runtime.LabelKind] = runtime.KindPod
	s.Ports = []string{"8888/http", "22/tcp"}
	s.PublishPorts = true
	res := create(t, d, s)
	start(t, d, res.ID)
	waitForLine(t, d, res.ID, "ready")

	info, err := d.Inspect(testCtx(t), res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Running {
		t.Fatalf("not running: %+v", info)
	}
	for _, p := range []string{"8888/tcp", "22/tcp"} {
		if info.HostPorts[p] <= 0 {
			t.Fatalf("no host port for %s: %v", p, info.HostPorts)
		}
	}
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", info.HostPorts["8888/tcp"]), 5*time.Second)
	if err != nil {
		t.Fatalf("dial published port: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "hello\n" {
		t.Fatalf("greeting %q, %v", line, err)
	}

	// Unpublished: exposed only, no host port.
	s2 := spec(img, s.Instance, "echo")
	s2.Ports = []string{"8888/http"}
	res2 := create(t, d, s2)
	info2, err := d.Inspect(testCtx(t), res2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(info2.HostPorts) != 0 {
		t.Fatalf("unpublished container has host ports %v", info2.HostPorts)
	}
}

func TestGPUDeviceRequests(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	uuids := []string{"GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"}

	for _, cdi := range []bool{false, true} {
		t.Run(fmt.Sprintf("cdi=%v", cdi), func(t *testing.T) {
			s := spec(img, dockertest.Unique("inst-"), "echo")
			s.GPUUUIDs = uuids
			s.UseCDI = cdi
			s.Labels[runtime.LabelGPUs] = strings.Join(uuids, ",")
			ctx := testCtx(t)
			res, err := d.Create(ctx, s)
			if err != nil {
				if cdi {
					t.Skipf("daemon refuses a CDI device request at create: %v", err)
				}
				t.Fatalf("Create: %v", err)
			}
			t.Cleanup(func() { _ = d.Remove(context.Background(), res.ID, true) })

			info, err := d.Inspect(ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(info.GPUDeviceIDs, uuids) {
				t.Fatalf("GPUDeviceIDs %v, want %v", info.GPUDeviceIDs, uuids)
			}
			if info.Labels[runtime.LabelGPUs] != strings.Join(uuids, ",") {
				t.Fatalf("gpus label %q", info.Labels[runtime.LabelGPUs])
			}
			err = d.Start(ctx, res.ID)
			if err == nil {
				t.Skip("daemon started a container on fake GPU UUIDs")
			}
			if !IsNoGPURuntime(err) {
				t.Fatalf("start error not recognised by IsNoGPURuntime: %v", err)
			}
			t.Logf("start error: %v", err)
		})
	}

	// CreateAndStart removes what it could not start.
	s := spec(img, dockertest.Unique("inst-"), "echo")
	s.GPUUUIDs = uuids
	ctx := testCtx(t)
	_, err := d.CreateAndStart(ctx, s)
	if !IsNoGPURuntime(err) {
		t.Fatalf("CreateAndStart: %v", err)
	}
	if list, err := d.List(ctx, s.Instance); err != nil || len(list) != 0 {
		t.Fatalf("left behind after failed start: %v %v", list, err)
	}
}

func TestCrashAndOOM(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	inst := dockertest.Unique("inst-")

	t.Run("crash", func(t *testing.T) {
		res := create(t, d, spec(img, inst, "crash"))
		ctx := testCtx(t)
		wait := d.Wait(ctx, res.ID)
		start(t, d, res.ID)
		if r := waitExit(t, wait); r.ExitCode != 2 {
			t.Fatalf("exit code %d, want 2 (Go panic)", r.ExitCode)
		}
		info, err := d.Inspect(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.ExitCode != 2 || info.OOMKilled {
			t.Fatalf("inspect: exit %d oom %v", info.ExitCode, info.OOMKilled)
		}
	})
	t.Run("oom", func(t *testing.T) {
		s := spec(img, inst, "oom")
		s.Memory = 32 << 20
		res := create(t, d, s)
		ctx := testCtx(t)
		wait := d.Wait(ctx, res.ID)
		start(t, d, res.ID)
		r := waitExit(t, wait)
		info, err := d.Inspect(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("oom: exit %d, OOMKilled %v, warnings %v", info.ExitCode, info.OOMKilled, res.Warnings)
		if r.ExitCode == 0 || info.ExitCode != r.ExitCode {
			t.Fatalf("exit code wait=%d inspect=%d, want equal and nonzero", r.ExitCode, info.ExitCode)
		}
	})
}

func TestEvents(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	inst, other := dockertest.Unique("inst-"), dockertest.Unique("inst-other-")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	evs, errc := d.Events(ctx, inst)

	// Another instance's container runs first; the stream is ordered, so
	// had it been delivered it would come before ours.
	so := spec(img, other, "echo")
	ro := create(t, d, so)
	wo := d.Wait(ctx, ro.ID)
	start(t, d, ro.ID)
	waitExit(t, wo)

	s := spec(img, inst, "echo")
	s.Env = []string{"EXIT=5"}
	res := create(t, d, s)
	start(t, d, res.ID)

	var sawStart bool
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("event stream closed: %v", <-errc)
			}
			if ev.ContainerID != res.ID {
				t.Fatalf("event for a container not of this instance: %+v", ev)
			}
			if ev.Attributes[runtime.LabelDataDir] != inst || ev.Time.IsZero() {
				t.Fatalf("event %+v", ev)
			}
			switch ev.Action {
			case "start":
				sawStart = true
			case "die":
				if !sawStart {
					t.Fatal("die before start")
				}
				if ev.ExitCode != 5 {
					t.Fatalf("die exit code %d, want 5", ev.ExitCode)
				}
				cancel()
				// Cancelling ends the stream without an error.
				for range evs {
				}
				if err, ok := <-errc; ok {
					t.Fatalf("error after cancel: %v", err)
				}
				return
			}
		case err := <-errc:
			t.Fatalf("event stream error: %v", err)
		case <-ctx.Done():
			t.Fatal("no die event in time")
		}
	}
}

// TestEventsDaemonGone uses a fake daemon that ends the event stream, as
// a daemon restart does: the error must arrive on the channel.
func TestEventsDaemonGone(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		switch {
		case r.URL.Path == "/_ping":
			_, _ = io.WriteString(w, "OK")
		case strings.HasSuffix(r.URL.Path, "/info"):
			_, _ = io.WriteString(w, `{"ServerVersion":"20.10-fake","Driver":"overlay2"}`)
		case strings.HasSuffix(r.URL.Path, "/events"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"Type":"container","Action":"die","Actor":{"ID":"abc","Attributes":{"exitCode":"1","name":"x"}},"timeNano":1}`+"\n")
			// Returning ends the stream, like a daemon shutting down.
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	t.Setenv("DOCKER_API_VERSION", "")

	d, err := Connect(context.Background(), slog.New(slog.NewTextHandler(tWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.APIVersion() != "1.41" || d.Info().StorageDriver != "overlay2" || d.CDIEnabled() {
		t.Fatalf("info %+v", d.Info())
	}
	ctx := testCtx(t)
	evs, errc := d.Events(ctx, "inst")
	select {
	case ev := <-evs:
		if ev.Action != "die" || ev.ContainerID != "abc" || ev.ExitCode != 1 || ev.Name != "x" {
			t.Fatalf("event %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("no event")
	}
	select {
	case err := <-errc:
		if err == nil || !errors.Is(err, io.EOF) {
			t.Fatalf("stream end: %v, want an EOF error", err)
		}
	case <-ctx.Done():
		t.Fatal("no error after the stream ended")
	}
	if _, ok := <-evs; ok {
		t.Fatal("events channel still open")
	}

	// An empty instance is refused rather than matching everything.
	_, errc = d.Events(ctx, "")
	if err := <-errc; err == nil {
		t.Fatal("Events without instance: no error")
	}
}

func TestDiskLimit(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	s := spec(img, dockertest.Unique("inst-"), "echo")
	s.Name = dockertest.Unique("berth-test-disk-")
	s.ContainerDiskGB = 5
	res := create(t, d, s)
	t.Logf("storage driver %q: disk limit applied = %v", d.Info().StorageDriver, res.DiskLimitApplied)
	if d.Info().StorageDriver == "fuse-overlayfs" && res.DiskLimitApplied {
		t.Fatal("fuse-overlayfs cannot limit size, yet DiskLimitApplied")
	}
	// The answer is remembered; a second create agrees.
	s.Name = ""
	res2 := create(t, d, s)
	if res2.DiskLimitApplied != res.DiskLimitApplied {
		t.Fatalf("second create: applied=%v, first %v", res2.DiskLimitApplied, res.DiskLimitApplied)
	}
	wait := d.Wait(testCtx(t), res2.ID)
	start(t, d, res2.ID)
	waitExit(t, wait)
}

func TestCreateValidation(t *testing.T) {
	d := &Docker{}
	ctx := context.Background()
	if _, err := d.Create(ctx, ContainerSpec{Instance: "i"}); err == nil {
		t.Error("no image accepted")
	}
	if _, err := d.Create(ctx, ContainerSpec{Image: "x"}); err == nil {
		t.Error("no instance accepted")
	}
	if _, err := d.Create(ctx, ContainerSpec{Image: "x", Instance: "i", Ports: []string{"80/sctp"}}); err == nil {
		t.Error("bad port accepted")
	}
}

func TestBuildConfig(t *testing.T) {
	s := ContainerSpec{
		Image: "img", Instance: "inst", Labels: map[string]string{runtime.LabelKind: runtime.KindPod, runtime.LabelManaged: "false"},
		Ports: []string{"8888/http", "22/tcp", "53/udp"}, PublishPorts: true,
		GPUUUIDs: []string{"GPU-a", "GPU-b"}, StopTimeout: 1500 * time.Millisecond,
		VolumeMounts: []VolumeMount{{Source: "/data", Target: "/runpod-volume"}},
	}
	cfg, hc, err := buildConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Labels[runtime.LabelManaged] != "true" || cfg.Labels[runtime.LabelDataDir] != "inst" || cfg.Labels[runtime.LabelKind] != runtime.KindPod {
		t.Fatalf("labels %v", cfg.Labels)
	}
	if *cfg.StopTimeout != 2 {
		t.Fatalf("stop timeout %d", *cfg.StopTimeout)
	}
	var ports []string
	for p := range cfg.ExposedPorts {
		ports = append(ports, p.String())
	}
	slices.Sort(ports)
	if !slices.Equal(ports, []string{"22/tcp", "53/udp", "8888/tcp"}) {
		t.Fatalf("exposed %v", ports)
	}
	for p, b := range hc.PortBindings {
		if len(b) != 1 || b[0].HostPort != "" || b[0].HostIP.String() != "0.0.0.0" {
			t.Fatalf("binding for %s: %+v", p, b)
		}
	}
	dr := hc.DeviceRequests
	if len(dr) != 1 || dr[0].Driver != "nvidia" || dr[0].Count != 0 ||
		!slices.Equal(dr[0].DeviceIDs, s.GPUUUIDs) || len(dr[0].Capabilities) != 1 || dr[0].Capabilities[0][0] != "gpu" {
		t.Fatalf("device requests %+v", dr)
	}
	if len(hc.Mounts) != 1 || hc.Mounts[0].Type != "bind" || hc.Mounts[0].Target != "/runpod-volume" {
		t.Fatalf("mounts %+v", hc.Mounts)
	}

	s.UseCDI = true
	_, hc, _ = buildConfig(s)
	dr = hc.DeviceRequests
	if len(dr) != 1 || dr[0].Driver != "cdi" || dr[0].Count != 0 ||
		!slices.Equal(dr[0].DeviceIDs, []string{"nvidia.com/gpu=GPU-a", "nvidia.com/gpu=GPU-b"}) {
		t.Fatalf("CDI device requests %+v", dr)
	}
}

func TestIsNoGPURuntime(t *testing.T) {
	for msg, want := range map[string]bool{
		`Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]]`: true,
		`could not select device driver "cdi" with capabilities: []`:                                     true,
		`Unknown runtime specified nvidia`:                                                               true,
		`failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=GPU-x`:                    true,
		`No such container: abc`: false,
	} {
		if got := IsNoGPURuntime(errors.New(msg)); got != want {
			t.Errorf("IsNoGPURuntime(%q) = %v", msg, got)
		}
	}
	if IsNoGPURuntime(nil) {
		t.Error("nil is a GPU error")
	}
	if !IsNoGPURuntime(fmt.Errorf("start: %w", errors.New(`could not select device driver "nvidia"`))) {
		t.Error("wrapped error not recognised")
	}
}

func TestStorageOptError(t *testing.T) {
	for msg, want := range map[string]bool{
		"Error response from daemon: --storage-opt is not supported":                      true,
		"--storage-opt is supported only for overlay over xfs with 'pquota' mount option": true,
		"Error response from daemon: No such image: x":                                    false,
		`could not select device driver "nvidia" with capabilities: [[gpu]]`:              false,
	} {
		if got := isStorageOptError(errors.New(msg)); got != want {
			t.Errorf("isStorageOptError(%q) = %v", msg, got)
		}
	}
}

func TestParsePort(t *testing.T) {
	for in, want := range map[string]string{"8888/http": "8888/tcp", "22/tcp": "22/tcp", "8080": "8080/tcp",
		"53/udp": "53/udp", "443/HTTPS": "443/tcp"} {
		p, err := parsePort(in)
		if err != nil || p.String() != want {
			t.Errorf("parsePort(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "http", "0/tcp", "70000/tcp", "80/sctp"} {
		if _, err := parsePort(in); err == nil {
			t.Errorf("parsePort(%q) accepted", in)
		}
	}
}

func TestParseDockerTime(t *testing.T) {
	if !parseDockerTime("0001-01-01T00:00:00Z").IsZero() || !parseDockerTime("").IsZero() {
		t.Fatal("never-time not zero")
	}
	got := parseDockerTime("2026-11-02T10:11:12.123456789Z")
	if got.Year() != 2026 || got.Nanosecond() != 123456789 {
		t.Fatalf("parsed %v", got)
	}
}

// TestConcurrentRemove: the supervisor's exit handling, reconcile and an
// operator's delete may remove one container at once; every caller sees
// success, none an "already in progress" error.
func TestConcurrentRemove(t *testing.T) {
	t.Parallel()
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, testProg)
	res := create(t, d, spec(img, dockertest.Unique("inst-"), "serve"))
	start(t, d, res.ID)
	ctx := testCtx(t)
	errs := make(chan error, 8)
	for i := 0; i < cap(errs); i++ {
		go func() { errs <- d.Remove(ctx, res.ID, true) }()
	}
	for i := 0; i < cap(errs); i++ {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Remove: %v", err)
		}
	}
	if _, err := d.Inspect(ctx, res.ID); !IsNotFound(err) {
		t.Fatalf("container still there: %v", err)
	}
}
