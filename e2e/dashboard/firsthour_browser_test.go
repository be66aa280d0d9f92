package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"berth/app"
	"berth/internal/apptest"
	"berth/worker"
)

// TestDashboardHostWorkerWithoutDocker: a new user's first hour without a
// Docker daemon (a DOCKER_HOST that does not answer). The endpoint's card
// says why no worker container starts, counts the worker attached from the
// host with `berth worker-env` (not "no workers"), and the endpoint's page
// still lists the job that worker ran once its /runsync result expired,
// marked so.
func TestDashboardHostWorkerWithoutDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs chromium")
	}
	exe := chromium(t)
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	const key = "first-hour-key"
	cfg := apptest.Config(t, key)
	cfg.Backend = app.DockerAuto
	cfg.Queue.SyncRetention = 100 * time.Millisecond // RunPod's minute, shortened
	b := startApp(t, cfg)
	var tpl, ep struct{ ID string }
	b.call("POST", "/v1/templates", map[string]any{"name": "hello", "imageName": "hello:1", "isServerless": true}, &tpl)
	b.call("POST", "/v1/endpoints", map[string]any{"name": "hello", "templateId": tpl.ID, "computeType": "CPU"}, &ep)

	// The host worker of the README's quick start.
	b.hostWorker(ep.ID, func(_ context.Context, j *worker.Job) (any, error) { return j.Input, nil })
	var job struct{ ID, Status string }
	b.call("POST", "/v2/"+ep.ID+"/runsync", map[string]any{"input": map[string]any{"hello": "world"}}, &job)
	if job.Status != "COMPLETED" {
		t.Fatalf("runsync: %+v", job)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		req, _ := http.NewRequest("GET", b.base+"/v1/endpoints/"+ep.ID+"/jobs/"+job.ID, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusNotFound {
			break // the result expired
		}
		if time.Now().After(deadline) {
			t.Fatalf("the result of %s did not expire", job.ID)
		}
	}

	bctx := browser(t, exe)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 5*time.Minute)
	defer cancel()
	sh := shots{dir: t.TempDir()}
	card := fmt.Sprintf(`document.querySelector('.endpoint-card[data-endpoint=%q]')`, ep.ID)
	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(b.base+"/"),
		visible("#key-input"),
		chromedp.SendKeys(chromedp.CSS("#key-input"), key),
		chromedp.Click(chromedp.CSS("#key-submit")),
		until(`(() => { const c = `+card+`; return c !== null && c.textContent.includes('1 idle') &&
			!c.textContent.includes('no workers') && c.textContent.includes('no container runtime'); })()`, time.Minute),
		sh.save("desktop-no-docker"),
		chromedp.Navigate(b.base+"/#/endpoint/"+ep.ID),
		until(fmt.Sprintf(`(() => { const r = document.querySelector('#jobs tr[data-job=%q]');
			return r !== null && r.dataset.status === 'COMPLETED' && r.textContent.includes('result expired'); })()`, job.ID), time.Minute),
		until(`document.querySelector('#workers') !== null && document.querySelector('#workers').textContent.includes('external')`, time.Minute),
	)
	if err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("%v\npage text:\n%s", err, body)
	}
}

// startApp starts a Berth of cfg (key cfg.APIKey) for the test, stopped
// when it ends.
func startApp(t *testing.T, cfg app.Config) *berth {
	t.Helper()
	a := apptest.Start(t, cfg)
	return &berth{t: t, app: a, base: a.URL(), key: cfg.APIKey}
}

// hostWorker runs handler as a worker on this host for endpoint ep (the
// README's worker-env path), stopped when the test ends.
func (b *berth) hostWorker(ep string, handler worker.Handler) {
	var wenv map[string]string
	b.call("GET", "/v1/endpoints/"+ep+"/worker-env", nil, &wenv)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		worker.Start(wctx, worker.Config{Env: func(k string) string { return wenv[k] }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Handler: handler})
	}()
}
