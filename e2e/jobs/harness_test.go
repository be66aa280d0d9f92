package jobs_test

import (
	"os"
	"os/exec"
	"testing"

	"berth/internal/apitest"
	"berth/internal/proctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.RemoveBuilds()
	os.Exit(code)
}

type resp = apitest.Resp

// testEnv is internal/apitest's job Env with the worker processes of its
// tests.
type testEnv struct{ *apitest.Env }

// newEnv starts a Berth for the job API's end-to-end tests (apitest.NewJobEnv).
func newEnv(t *testing.T, opts ...apitest.Option) *testEnv {
	t.Helper()
	return &testEnv{apitest.NewJobEnv(t, opts...)}
}

// workerProc is a running echoworker process.
type workerProc struct {
	id   string
	env  map[string]string
	cmd  *exec.Cmd
	logs *proctest.Buffer
}

// startWorker registers a worker of ep and runs testdata/echoworker with
// its environment (and extraEnv); the test's end kills it, and shows its
// output if the test failed.
func (e *testEnv) startWorker(ep string, extraEnv ...string) *workerProc {
	e.T.Helper()
	wenv := e.WorkerEnv(ep)
	w := &workerProc{id: wenv["RUNPOD_POD_ID"], env: wenv, logs: &proctest.Buffer{}}
	w.cmd = exec.Command(proctest.Build(e.T, "berth/testdata/echoworker", false))
	for k, v := range wenv {
		w.cmd.Env = append(w.cmd.Env, k+"="+v)
	}
	w.cmd.Env = append(w.cmd.Env, extraEnv...)
	w.cmd.Stdout, w.cmd.Stderr = w.logs, w.logs
	if err := w.cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		if e.T.Failed() {
			e.T.Logf("worker %s output:\n%s", w.id, w.logs.String())
		}
	})
	return w
}
