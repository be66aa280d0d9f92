package docker

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/runtime"
)

const testProg = "berth/runtime/testdata/testprog"

// waitTimeout bounds every wait on the daemon in these tests.
const waitTimeout = 30 * time.Second

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newDocker connects to the test daemon or skips (see dockertest.Require).
func newDocker(t *testing.T) *Docker {
	t.Helper()
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := Connect(ctx, slog.New(slog.NewTextHandler(tWriter{t}, nil)))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// spec returns a ContainerSpec for the test program in the given mode.
func spec(image, instance, mode string) ContainerSpec {
	return ContainerSpec{
		Image:    image,
		Cmd:      []string{mode},
		Instance: instance,
		Labels:   map[string]string{runtime.LabelKind: runtime.KindWorker},
	}
}

// create creates a container and removes it when the test ends.
func create(t *testing.T, d *Docker, s ContainerSpec) CreateResult {
	t.Helper()
	res, err := d.Create(testCtx(t), s)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := d.Remove(ctx, res.ID, true); err != nil {
			t.Errorf("Remove %s: %v", res.ID, err)
		}
	})
	return res
}

func start(t *testing.T, d *Docker, id string) {
	t.Helper()
	if err := d.Start(testCtx(t), id); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

func waitExit(t *testing.T, ch <-chan WaitResult) WaitResult {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("wait channel closed without a result")
		}
		if r.Err != nil {
			t.Fatalf("Wait: %v", r.Err)
		}
		return r
	case <-time.After(waitTimeout):
		t.Fatal("container did not exit in time")
	}
	return WaitResult{}
}

// waitForLine follows the container's logs until a line equals want.
func waitForLine(t *testing.T, d *Docker, id, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rc, err := d.Logs(ctx, id, true, 0, time.Time{})
	if err != nil {
		t.Fatalf("Logs: %v", err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		if sc.Text() == want {
			return
		}
	}
	t.Fatalf("log line %q never came: %v", want, sc.Err())
}

func readLogs(t *testing.T, d *Docker, id string, follow bool) string {
	t.Helper()
	rc, err := d.Logs(testCtx(t), id, follow, 0, time.Time{})
	if err != nil {
		t.Fatalf("Logs: %v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read logs: %v", err)
	}
	return string(b)
}
