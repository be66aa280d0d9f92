package runtime_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"berth/app"
	"berth/gpu"
	"berth/queue"
	"berth/runtime"
	"berth/store"
)

// putPod stores a pod's record: the pods the runtime keeps at a restart
// are those with one.
func (e *env) putPod(id string) {
	e.t.Helper()
	if err := e.db().Write(store.Put(store.Pods, id, store.Pod{ID: id, DesiredStatus: "RUNNING"})); err != nil {
		e.t.Fatal(err)
	}
}

// greet dials a published port and reads the testprog's greeting.
func greet(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err == nil && line == "hello\n" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no greeting on port %d: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// firstPodLogLine follows a pod's log until its first line arrives.
func firstPodLogLine(t *testing.T, s *runtime.Supervisor, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	rc, err := s.PodLogs(ctx, id, true, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	if !sc.Scan() {
		t.Fatalf("pod %s logged nothing within %s: %v", id, waitLong, sc.Err())
	}
	return sc.Text()
}

func TestPods(t *testing.T) {
	t.Parallel()
	const uuid = "GPU-99999999-0000-4000-8000-000000000001"
	e := newEnv(t, fakeGPUs(uuid), func(c *app.Config) { c.Runtime.PodStopGrace = time.Second })
	prog := buildImage(t, testProg)
	s := e.start()
	alloc := e.gpus()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLong)
	defer cancel()

	tm := e.putTemplate(func(t *store.Template) {
		t.ImageName, t.DockerStartCmd, t.Ports = prog, []string{"serve"}, []string{"8888/http"}
		t.Env = map[string]string{"FROM_TEMPLATE": "1"}
	})
	id := queue.NewID(14)
	e.putPod(id)
	st, err := s.CreatePod(ctx, runtime.PodSpec{ID: id, TemplateID: tm.ID, ComputeType: "CPU", VolumeGB: 1, Env: map[string]string{"X": "y"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod: %+v", st)
	if st.DesiredStatus != runtime.PodRunning || st.PortMappings["8888"] == 0 || st.PublicIP == "" || st.VolumeDir == "" || st.GPUCount != 0 {
		t.Fatalf("pod state %+v", st)
	}
	greet(t, st.PortMappings["8888"])
	if _, err := s.CreatePod(ctx, runtime.PodSpec{ID: id, Image: prog}); !errors.Is(err, runtime.ErrPodExists) {
		t.Fatalf("second create: %v", err)
	}
	// The port answering does not mean Docker's log driver has delivered
	// the line printed before it: follow the log until the line comes.
	if first := firstPodLogLine(t, s, id); first != "ready" {
		t.Fatalf("pod log's first line %q, want ready", first)
	}
	// Something on the pod volume survives stop, start and reset.
	marker := filepath.Join(st.VolumeDir, "marker")
	if err := os.WriteFile(marker, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}

	st, err = s.StopPod(ctx, id)
	if err != nil || st.DesiredStatus != runtime.PodExited || len(st.PortMappings) != 0 {
		t.Fatalf("stop: %+v %v", st, err)
	}
	stoppedCID := st.ContainerID
	st, err = s.StartPod(ctx, id)
	if err != nil || st.DesiredStatus != runtime.PodRunning || st.ContainerID != stoppedCID {
		t.Fatalf("start: %+v %v", st, err)
	}
	greet(t, st.PortMappings["8888"])
	before := st.StartedAt
	st, err = s.RestartPod(ctx, id)
	if err != nil || st.DesiredStatus != runtime.PodRunning || !st.StartedAt.After(before) {
		t.Fatalf("restart: %+v %v", st, err)
	}
	oldCID := st.ContainerID
	st, err = s.ResetPod(ctx, runtime.PodSpec{ID: id, Image: prog, Cmd: []string{"serve"}, Ports: []string{"8888/http,22/tcp"}, ComputeType: "CPU", VolumeGB: 1})
	if err != nil || st.ContainerID == oldCID || st.DesiredStatus != runtime.PodRunning || st.PortMappings["22"] == 0 {
		t.Fatalf("reset: %+v %v", st, err)
	}
	greet(t, st.PortMappings["8888"])
	if b, err := os.ReadFile(marker); err != nil || string(b) != "kept" {
		t.Fatalf("volume after reset: %q %v", b, err)
	}

	// EnsurePod: a running pod of the same version is left alone, a
	// stopped one started, another version recreated.
	spec := runtime.PodSpec{ID: id, Version: 0, Image: prog, Cmd: []string{"serve"}, Ports: []string{"8888/http"}, ComputeType: "CPU", VolumeGB: 1}
	if st2, err := s.EnsurePod(ctx, spec); err != nil || st2.ContainerID != st.ContainerID || st2.DesiredStatus != runtime.PodRunning {
		t.Fatalf("ensure (running): %+v %v", st2, err)
	}
	if _, err := s.StopPod(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st2, err := s.EnsurePod(ctx, spec); err != nil || st2.ContainerID != st.ContainerID || st2.DesiredStatus != runtime.PodRunning {
		t.Fatalf("ensure (stopped): %+v %v", st2, err)
	}
	spec.Version = 2
	st, err = s.EnsurePod(ctx, spec)
	if err != nil || st.ContainerID == oldCID || st.Version != 2 || st.DesiredStatus != runtime.PodRunning {
		t.Fatalf("ensure (new version): %+v %v", st, err)
	}
	greet(t, st.PortMappings["8888"])
	if _, err := s.EnsurePod(ctx, runtime.PodSpec{ID: queue.NewID(14), Image: "berth-test/does-not-exist:" + id, ComputeType: "CPU"}); !errors.Is(err, runtime.ErrImage) {
		t.Fatalf("pod of a missing image: %v", err)
	}

	// A GPU pod gets the exact device; this daemon cannot start it, and the
	// GPU is given back.
	_, err = s.CreatePod(ctx, runtime.PodSpec{ID: queue.NewID(14), Image: prog, Cmd: []string{"serve"}, GPUCount: 1})
	if !errors.Is(err, runtime.ErrNoGPURuntime) {
		t.Fatalf("GPU pod: %v", err)
	}
	if alloc.Snapshot()[0].Holder != "" {
		t.Fatalf("GPU held after the failed start: %+v", alloc.Snapshot())
	}
	if _, err := alloc.Allocate("other", nil, 1); err != nil {
		t.Fatal(err)
	}
	if _, err = s.CreatePod(ctx, runtime.PodSpec{ID: queue.NewID(14), Image: prog, GPUCount: 1}); !errors.Is(err, gpu.ErrNoCapacity) {
		t.Fatalf("GPU pod on a full machine: %v", err)
	}
	alloc.Release("other")

	// Reconcile: a restarted Berth adopts the pod and removes the
	// container of a pod whose record is gone.
	other := queue.NewID(14)
	e.putPod(other)
	if _, err := s.CreatePod(ctx, runtime.PodSpec{ID: other, Image: prog, Cmd: []string{"serve"}, ComputeType: "CPU"}); err != nil {
		t.Fatal(err)
	}
	e.eventually("the other pod's run recorded", func() bool { open, _ := e.usage(store.UsagePod); return open[other] == 1 })
	e.stop()
	if err := e.db().Write(store.Delete(store.Pods, other)); err != nil {
		t.Fatal(err)
	}
	_, closedBefore := e.usage(store.UsagePod)
	s = e.start()
	if _, err := s.PodState(ctx, other); !errors.Is(err, runtime.ErrUnknownPod) {
		t.Fatalf("deleted pod's container: %v", err)
	}
	st, err = s.PodState(ctx, id)
	if err != nil || st.DesiredStatus != runtime.PodRunning {
		t.Fatalf("adopted pod: %+v %v", st, err)
	}
	// Billing's records: the adopted pod's run is open once, the removed
	// one's closed.
	open, closed := e.usage(store.UsagePod)
	if open[id] != 1 || open[other] != 0 || closed[other] != closedBefore[other]+1 {
		t.Fatalf("usage after adoption: open %v, closed %v (before %v)", open, closed, closedBefore)
	}
	pods, err := s.ListPods(ctx)
	if err != nil || len(pods) != 1 || pods[0].ID != id {
		t.Fatalf("pods %+v %v", pods, err)
	}

	if err := s.RemovePod(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PodState(ctx, id); !errors.Is(err, runtime.ErrUnknownPod) {
		t.Fatalf("state after remove: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(st.VolumeDir)); !os.IsNotExist(err) {
		t.Fatalf("pod dir after remove: %v", err)
	}
	if err := s.RemovePod(ctx, id); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	if n := len(e.containers("")); n != 0 {
		t.Fatalf("%d containers left", n)
	}
	// Billing's records: every run closed — the pod's six (created,
	// started, restarted, reset, started by EnsurePod, recreated at its
	// new version, which the adoption continued) and the other pod's one.
	if open, closed := e.usage(store.UsagePod); len(open) != 0 || closed[id] != 6 || closed[other] != 1 {
		t.Fatalf("usage: open %v, closed %v", open, closed)
	}
}
