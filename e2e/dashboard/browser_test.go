package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/moby/moby/client"

	"berth/app"
	"berth/gpu"
	"berth/internal/apptest"
	"berth/internal/dockertest"
	"berth/internal/proctest"
)

// EnvShots names a folder the browser test also writes its screenshots to
// (to refresh the ones in docs/); they always go to the test's temp dir.
const EnvShots = "BERTH_DASHBOARD_SHOTS"

// chromium finds Debian's chromium (or another Chrome). Without one the
// test is skipped, or fails when BERTH_REQUIRE_DOCKER=1 (CI installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(dockertest.EnvRequire) == "1" {
		t.Fatalf("no chromium on PATH (%s=1 is set): apt-get install chromium", dockertest.EnvRequire)
	}
	t.Skip("no chromium on PATH; apt-get install chromium (or set BERTH_REQUIRE_DOCKER=1 to make this a failure)")
	return ""
}

// berth is a running Berth binary on a temporary data folder.
type berth struct {
	t        *testing.T
	app      *apptest.Berth // in-process (startApp); nil for the built binary
	base     string
	key      string
	proc     *proctest.Berth // the built binary; nil in-process
	instance string          // the runtime's container label value for this data folder
}

func startBerth(t *testing.T, docker *client.Client) *berth {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	b := &berth{t: t, key: "dashboard-test-" + dockertest.Unique(""), instance: app.Instance(data)}
	// Registered first, so it runs after the process stopped: Berth leaves
	// its containers running for the next start to adopt; remove this
	// instance's.
	t.Cleanup(func() { apptest.RemoveContainers(t, data) })
	b.proc = proctest.Start(t, proctest.Options{Data: data, Key: b.key, Args: []string{"--rate-limits=off"}})
	b.base = b.proc.Base
	return b
}

func (b *berth) call(method, path string, body, out any) {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+b.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		b.t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
}

// browser starts a headless chromium (as root in CI: no sandbox).
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return ctx
}

// shots saves screenshots to the test's temp dir (and $BERTH_DASHBOARD_SHOTS).
type shots struct{ dir string }

func (s shots) save(name string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		// The pointer away from the page: no hover style in the picture.
		if _, err := chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 0, 0)(ctx, tg); err != nil {
			return chromedp.Void{}, err
		}
		png, err := chromedp.CaptureScreenshot()(ctx, tg)
		if err != nil {
			return chromedp.Void{}, err
		}
		dirs := []string{s.dir}
		if d := os.Getenv(EnvShots); d != "" {
			dirs = append(dirs, d)
		}
		for _, d := range dirs {
			if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
				return chromedp.Void{}, err
			}
		}
		return chromedp.Void{}, nil
	}
}

// until waits for a JavaScript condition to hold.
func until(expr string, timeout time.Duration) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(timeout))
}

// dark switches prefers-color-scheme to dark (or back to the default).
func dark(on bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		p := emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}}
		if on {
			p.Features[0].Value = "dark"
		}
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, p)
		return err
	})
}

func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

// TestDashboardInBrowser loads the dashboard in headless chromium against a
// running Berth with a worker container: sign in with the key, submit a job
// from the page and see its output, open the worker's logs and see a line
// appear live, and take screenshots of the main views at desktop and phone
// width.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Berth and a worker image, runs chromium")
	}
	exe := chromium(t)
	docker := dockertest.Require(t)
	img := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	prog := dockertest.BuildGoImage(t, "berth/runtime/testdata/testprog")
	b := startBerth(t, docker)

	var tpl, ep struct{ ID string }
	b.call("POST", "/v1/templates", map[string]any{"name": "echo-worker", "imageName": img, "isServerless": true}, &tpl)
	b.call("POST", "/v1/endpoints", map[string]any{"name": "echo", "templateId": tpl.ID, "computeType": "CPU",
		"workersMin": 1, "workersMax": 2, "idleTimeout": 60}, &ep)

	bctx := browser(t, exe)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, outside any timeout
		t.Fatalf("start chromium: %v", err)
	}
	// Deadlines here only bound a failure: a loaded machine (the CI's
	// contention, other tests) can make chromium take minutes.
	ctx, cancel := context.WithTimeout(bctx, 15*time.Minute)
	defer cancel()
	sh := shots{dir: t.TempDir()}
	t.Logf("screenshots in %s", sh.dir)

	pageText := func() string { // also once ctx has ended
		tctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		s, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		return s
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		began := time.Now()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s (after %s): %v\npage text:\n%s", what, time.Since(began).Round(time.Millisecond), err, pageText())
		}
		t.Logf("%s: %s", what, time.Since(began).Round(time.Millisecond))
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}

	// The key is asked for once, kept in sessionStorage, never in the URL
	// or a cookie. A wrong key is refused on the form.
	do("sign in",
		chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(b.base+"/"),
		visible("#key-input"),
		sh.save("desktop-signin"),
		chromedp.SendKeys(chromedp.CSS("#key-input"), "wrong-key"),
		chromedp.Click(chromedp.CSS("#key-submit")),
		until(`document.getElementById('key-error')?.textContent.includes('refused')`, 2*time.Minute),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('key-input').value = ''`),
		chromedp.SendKeys(chromedp.CSS("#key-input"), b.key),
		chromedp.Click(chromedp.CSS("#key-submit")),
		visible(`#endpoints .endpoint-card[data-endpoint="`+ep.ID+`"]`),
	)
	loc, cookies, stored := eval(`location.href`), eval(`document.cookie`), eval(`sessionStorage.getItem('berth.apiKey')`)
	if strings.Contains(loc, b.key) || cookies != "" || stored != b.key {
		t.Fatalf("the key must live in sessionStorage only: location %q, cookies %q, sessionStorage %q", loc, cookies, stored)
	}

	// The endpoint's worker container comes up and shows idle.
	card := `#endpoints .endpoint-card[data-endpoint="` + ep.ID + `"]`
	do("worker idle on the overview",
		until(fmt.Sprintf(`document.querySelector(%q)?.textContent.includes('1 idle')`, card), 5*time.Minute))

	// Submit a job from the page and watch it finish with its output.
	do("submit a job",
		chromedp.Click(chromedp.CSS(card)),
		visible("#run-input"),
		chromedp.SetValue(chromedp.CSS("#run-input"), `{"echo": {"greeting": "hello from the dashboard"}, "sleep_ms": 300}`),
		chromedp.Click(chromedp.CSS("#run-submit")),
		visible(`#job-watch .watch[data-status="COMPLETED"]`),
	)
	output := eval(`document.getElementById('job-output').textContent`)
	var got map[string]string
	if err := json.Unmarshal([]byte(output), &got); err != nil || got["greeting"] != "hello from the dashboard" {
		t.Fatalf("job output on the page: %q (%v)", output, err)
	}
	// The job list shows it completed too.
	do("job list", visible(`#jobs tr[data-status="COMPLETED"]`), sh.save("desktop-endpoint"))
	// The plots: the worker container launched for the endpoint is a cold
	// start, the job a completed bar.
	do("plots", until(`(() => {
		const n = (s) => [...document.querySelectorAll('#plots ' + s)].reduce((a, r) => a + Number(r.dataset.n), 0);
		return n('svg[data-plot="cold"] rect.bar.cold') >= 1 && n('svg[data-plot="jobs"] rect.bar.completed') >= 1; })()`, 2*time.Minute))

	// A streaming job shows its chunks while it runs (peeked: the job
	// still returns them all at the end).
	do("a streaming job",
		chromedp.SetValue(chromedp.CSS("#run-input"), `{"stream": ["first chunk", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"], "stream_delay_ms": 1500}`),
		chromedp.Click(chromedp.CSS("#run-submit")),
		until(`(() => { const w = document.querySelector('#job-watch .watch[data-status="IN_PROGRESS"] #job-stream');
			return w !== null && w.textContent.includes('first chunk'); })()`, 3*time.Minute),
		sh.save("desktop-endpoint-streaming"),
		visible(`#job-watch .watch[data-status="COMPLETED"]`),
	)
	if out := eval(`document.getElementById('job-output').textContent`); !strings.Contains(out, "eighth") {
		t.Fatalf("streaming job's output on the page: %q", out)
	}

	// Open the worker's logs; a job submitted afterwards logs a line that
	// appears while the page follows.
	do("worker logs", chromedp.Click(chromedp.CSS(`#workers a.logs-link`)), visible(`#log-state.ok`))
	var ref struct{ ID string }
	b.call("POST", "/v2/"+ep.ID+"/run", map[string]any{"input": map[string]any{"echo": "late line"}}, &ref)
	do("a log line appears live",
		until(fmt.Sprintf(`document.getElementById('log-output')?.textContent.includes(%q)`, ref.ID), 3*time.Minute),
		sh.save("desktop-logs"),
	)

	// The other views render their records; a pod's HTTP port is a link to
	// the host port Docker mapped, and its logs follow like a worker's.
	var pod struct {
		ID           string
		PortMappings map[string]int
	}
	b.call("POST", "/v1/pods", map[string]any{"name": "web", "imageName": prog, "dockerStartCmd": []string{"serve"},
		"ports": []string{"8888/http"}, "computeType": "CPU"}, &pod)
	b.call("GET", "/v1/pods/"+pod.ID, nil, &pod)
	if pod.PortMappings["8888"] == 0 {
		t.Fatalf("pod %s has no port mapping for 8888: %+v", pod.ID, pod)
	}
	b.call("POST", "/v1/networkvolumes", map[string]any{"name": "models", "size": 50, "dataCenterId": "BERTH-LOCAL"}, nil)
	link := fmt.Sprintf(`[data-pod=%q] a.port-link[href="http://127.0.0.1:%d/"]`, pod.ID, pod.PortMappings["8888"])
	do("pods", chromedp.Navigate(b.base+"/#/pods"), visible(link), sh.save("desktop-pods"))
	do("pod logs", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-pod=%q] a.logs-link`, pod.ID))),
		until(`document.getElementById('log-output')?.textContent.includes('ready')`, 3*time.Minute))
	do("templates", chromedp.Navigate(b.base+"/#/templates"), visible(`tr[data-template="`+tpl.ID+`"]`), sh.save("desktop-templates"))
	do("volumes", chromedp.Navigate(b.base+"/#/volumes"), visible(`tr[data-volume]`), sh.save("desktop-volumes"))
	do("gpus", chromedp.Navigate(b.base+"/#/gpus"), visible(`main .panel`), sh.save("desktop-gpus"))

	// An endpoint that may not start workers: its jobs wait, the overview
	// says why and how long the oldest has waited.
	var held struct{ ID string }
	b.call("POST", "/v1/endpoints", map[string]any{"name": "image-gen", "templateId": tpl.ID, "workersMax": 0,
		"gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}}, &held)
	for range 2 {
		b.call("POST", "/v2/"+held.ID+"/run", map[string]any{"input": map[string]any{"prompt": "a boat at its berth"}}, nil)
	}
	heldCard := `#endpoints .endpoint-card[data-endpoint="` + held.ID + `"]`
	do("queued jobs on the overview",
		chromedp.Navigate(b.base+"/#/"),
		until(fmt.Sprintf(`(() => { const c = document.querySelector(%q);
			return c !== null && c.textContent.includes('workersMax is 0') && /oldest\s*\d/i.test(c.innerText); })()`, heldCard), 3*time.Minute),
		sh.save("desktop-endpoints"))
	// Cancel one of them from its row.
	do("cancel a queued job",
		chromedp.Navigate(b.base+"/#/endpoint/"+held.ID),
		chromedp.Click(chromedp.CSS(`#jobs tr[data-status="IN_QUEUE"]`)),
		chromedp.Click(chromedp.CSS(`#jobs tr.detail .job-cancel`)),
		visible(`#jobs tr[data-status="CANCELLED"]`),
		until(`document.querySelectorAll('#jobs tr[data-status="IN_QUEUE"]').length === 1`, 2*time.Minute))
	do("dark", dark(true), chromedp.Navigate(b.base+"/#/endpoint/"+ep.ID), visible(`#jobs tr[data-status="COMPLETED"]`),
		sh.save("desktop-endpoint-dark"), dark(false))

	// Phone width: the same pages, one column, no sideways scroll.
	do("phone",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(b.base+"/#/"),
		visible(card+` .metrics`),
		sh.save("phone-endpoints"),
		chromedp.Navigate(b.base+"/#/endpoint/"+ep.ID),
		visible(`#jobs tr[data-status="COMPLETED"]`),
		sh.save("phone-endpoint"),
		dark(true),
		chromedp.Navigate(b.base+"/#/"),
		visible(card+` .metrics`),
		sh.save("phone-endpoints-dark"),
		chromedp.Navigate(b.base+"/#/endpoint/"+ep.ID),
		visible(`#jobs tr[data-status="COMPLETED"]`),
	)
	if wide := eval(`String(document.documentElement.scrollWidth > window.innerWidth + 1)`); wide != "false" {
		t.Errorf("the endpoint page is wider than a phone's screen")
	}
}

// TestDashboardGPUs shows GPUs with their holders, on the GPU page and on
// the endpoint whose worker holds one. This machine's GPUs (usually none
// in CI) cannot show that, so the server is Berth in process (package app)
// with a fixed GPU list, one held by a worker of the endpoint.
func TestDashboardGPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs chromium")
	}
	exe := chromium(t)
	const key = "gpu-test-key"
	devs := []gpu.Device{
		{Index: 0, UUID: "GPU-0a1b2c3d", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564, PCIBusID: "00000000:01:00.0"},
		{Index: 1, UUID: "GPU-4e5f6a7b", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564, PCIBusID: "00000000:02:00.0"},
	}
	cfg := apptest.Config(t, key)
	cfg.DiscoverGPUs = func() ([]gpu.Device, error) { return devs, nil }
	b := startApp(t, cfg)
	var tpl, ep struct{ ID string }
	b.call("POST", "/v1/templates", map[string]any{"name": "sdxl", "imageName": "sdxl:latest", "isServerless": true}, &tpl)
	b.call("POST", "/v1/endpoints", map[string]any{"name": "sdxl", "templateId": tpl.ID, "gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}}, &ep)
	// A worker of the endpoint (attached with worker-env) holding GPU 0, as
	// the runtime's allocator records a worker container's GPUs.
	var wenv map[string]string
	b.call("GET", "/v1/endpoints/"+ep.ID+"/worker-env", nil, &wenv)
	worker := wenv["RUNPOD_POD_ID"]
	if err := b.app.GPUs().Restore(worker, []string{"GPU-0a1b2c3d"}); err != nil {
		t.Fatal(err)
	}
	srv := struct{ URL string }{b.base}

	bctx := browser(t, exe)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 10*time.Minute)
	defer cancel()
	sh := shots{dir: t.TempDir()}
	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(srv.URL+"/"),
		visible("#key-input"),
		chromedp.SendKeys(chromedp.CSS("#key-input"), key),
		chromedp.Click(chromedp.CSS("#key-submit")),
		// The endpoint's card names the GPU its worker holds.
		until(fmt.Sprintf(`(() => { const c = document.querySelector('.endpoint-card[data-endpoint=%q]');
			return c !== null && c.textContent.includes('#0 NVIDIA GeForce RTX 4090'); })()`, ep.ID), 3*time.Minute),
		chromedp.Navigate(srv.URL+"/#/gpus"),
		// GPU 0: in use by the endpoint's worker, linked; GPU 1: free.
		visible(`[data-gpu="GPU-0a1b2c3d"] .pill.run`),
		visible(fmt.Sprintf(`[data-gpu="GPU-0a1b2c3d"] a[href="#/endpoint/%s"]`, ep.ID)),
		visible(`[data-gpu="GPU-4e5f6a7b"] .pill.ok`),
		until(`document.querySelector('[data-gpu="GPU-0a1b2c3d"]')?.textContent.includes('`+worker+`')`, time.Minute),
		sh.save("desktop-gpus"),
	)
	if err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("%v\npage text:\n%s", err, body)
	}
}
