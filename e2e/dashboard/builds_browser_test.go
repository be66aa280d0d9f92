package dashboard_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/moby/moby/client"

	"berth/app"
	"berth/gpu"
	"berth/internal/dockertest"
	"berth/internal/hubtest"
)

// dashBuild is the builds API's view of a build.
type dashBuild struct {
	ID, Status, ImageName string
	Error                 *string
	ReleaseVersion        *int
}

// contextTar is an uncompressed tar of files (name → content).
func contextTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// submitBuild uploads a build of endpoint ep through Berth's API.
func (b *berth) submitBuild(ep string, files map[string]string) dashBuild {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.base+"/v2/serverless/"+ep+"/builds", bytes.NewReader(contextTar(b.t, files)))
	req.Header.Set("Authorization", "Bearer "+b.key)
	req.Header.Set("Content-Type", "application/x-tar")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var bd dashBuild
	if res.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &bd) != nil {
		b.t.Fatalf("POST builds: %d %s", res.StatusCode, raw)
	}
	return bd
}

// waitBuild polls the build until cond holds (bounded).
func (b *berth) waitBuild(ep, id string, cond func(dashBuild) bool) dashBuild {
	b.t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var bd dashBuild
		b.call("GET", "/v2/serverless/"+ep+"/builds/"+id, nil, &bd)
		if cond(bd) {
			return bd
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("build %s: %+v", id, bd)
		}
		time.Sleep(100 * time.Millisecond) // polling the record, bounded by the deadline
	}
}

// TestDashboardBuildsAndModels: an endpoint's page shows its builds made
// through Berth's API by the Docker daemon — one completed (its release
// v2, GIT_BUILD, linked to it), one failed (its error naming the step),
// one running — and follows the running build's log live until it is
// cancelled from the page; a new endpoint made from the page with the
// Model field shows its model's download failing (a gated model, no
// token), and the field edited on the endpoint's page refuses a bad
// reference and then shows the download's progress, then complete. Desktop
// and phone widths.
func TestDashboardBuildsAndModels(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images, runs chromium")
	}
	exe := chromium(t)
	docker := dockertest.Require(t)
	base := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	prog := dockertest.BuildGoImage(t, "berth/runtime/testdata/testprog")

	hub := hubtest.New(t)
	hub.Add(hubtest.Repo{ID: "acme/gated-model", Gated: true, Files: []hubtest.File{{Path: "config.json", Data: []byte(`{}`)}}})
	weights := make([]byte, 3_000_000)
	rand.Read(weights)
	hub.Add(hubtest.Repo{ID: "acme/tiny-model", Files: []hubtest.File{{Path: "config.json", Data: []byte(`{"hidden_size":8}`)},
		{Path: "model.safetensors", Data: weights, LFS: true}}})
	reached, release := hub.Hold(weights, 1_000_000)
	defer release()

	const key = "builds-test-key"
	b := startApp(t, app.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", APIKey: key, Backend: app.DockerRequired,
		RemoveContainersOnStop: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }, Models: app.Models{Endpoint: hub.URL, MinBackoff: time.Hour}})
	var tpl, ep struct{ ID string }
	b.call("POST", "/v1/templates", map[string]any{"name": "echo-worker", "imageName": base, "isServerless": true}, &tpl)
	b.call("POST", "/v1/endpoints", map[string]any{"name": "built", "templateId": tpl.ID, "computeType": "CPU",
		"workersMin": 0, "workersMax": 1}, &ep)
	t.Cleanup(func() { // before Berth stops (cleanups run last first): the images its builds made
		var list struct{ Builds []dashBuild }
		b.call("GET", "/v2/serverless/"+ep.ID+"/builds", nil, &list)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, bd := range list.Builds {
			if bd.Status == "COMPLETED" {
				docker.ImageRemove(ctx, bd.ImageName, client.ImageRemoveOptions{Force: true})
			}
		}
	})

	done := func(bd dashBuild) bool {
		return bd.Status == "COMPLETED" || bd.Status == "FAILED" || bd.Status == "CANCELLED"
	}
	good := b.submitBuild(ep.ID, map[string]string{"Dockerfile": "FROM " + base + "\nCOPY note.txt /note.txt\n", "note.txt": "built by Berth\n"})
	good = b.waitBuild(ep.ID, good.ID, done)
	if good.Status != "COMPLETED" || good.ReleaseVersion == nil {
		t.Fatalf("the good build: %+v", good)
	}
	bad := b.submitBuild(ep.ID, map[string]string{"Dockerfile": "FROM " + base + "\nCOPY missing.txt /missing.txt\n"})
	bad = b.waitBuild(ep.ID, bad.ID, done)
	if bad.Status != "FAILED" || bad.Error == nil || !strings.Contains(*bad.Error, "COPY missing.txt") {
		t.Fatalf("the failing build: %+v", bad)
	}
	// A long step: a line every 200 ms until cancelled.
	long := b.submitBuild(ep.ID, map[string]string{"Dockerfile": "FROM " + base + "\nCOPY --from=" + prog + " /app /testprog\nRUN [\"/testprog\", \"tick\"]\n"})
	b.waitBuild(ep.ID, long.ID, func(bd dashBuild) bool { return bd.Status == "BUILDING" })

	bctx := browser(t, exe)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 10*time.Minute)
	defer cancel()
	sh := shots{dir: t.TempDir()}
	t.Logf("screenshots in %s", sh.dir)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("%s: %v\npage text:\n%s", what, err, body)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	text := func(sel string) string { return fmt.Sprintf(`(document.querySelector(%q)?.textContent || '')`, sel) }
	row := func(id string) string { return `#builds tr[data-build="` + id + `"]` }

	do("sign in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(b.base+"/"),
		visible("#key-input"),
		chromedp.SendKeys(chromedp.CSS("#key-input"), key),
		chromedp.Click(chromedp.CSS("#key-submit")),
		visible(`#endpoints .endpoint-card[data-endpoint="`+ep.ID+`"]`))

	// The builds: status, source, image, release; the failure's step.
	do("builds and releases on the endpoint's page",
		chromedp.Navigate(b.base+"/#/endpoint/"+ep.ID),
		visible(row(good.ID)+`[data-status="COMPLETED"]`),
		until(text(row(good.ID))+`.includes(`+jsq(good.ImageName)+`) && `+text(row(good.ID))+`.includes('v2') && `+text(row(good.ID))+`.includes('upload')`, time.Minute),
		visible(row(bad.ID)+`[data-status="FAILED"]`),
		until(text(`#builds tr.build-error[data-build="`+bad.ID+`"]`)+`.includes('COPY missing.txt')`, time.Minute),
		visible(row(long.ID)+`[data-status="BUILDING"]`),
		until(text(`#releases tr[data-release="2"]`)+`.includes('GIT_BUILD') && `+text(`#releases tr[data-release="2"]`)+`.includes('current') && `+
			fmt.Sprintf(`document.querySelector('#releases tr[data-release="2"] a')?.getAttribute('href') === %q`, "#/build/"+ep.ID+"/"+good.ID), time.Minute),
		until(text(`#releases tr[data-release="1"]`)+`.includes('MANUAL')`, time.Minute),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('builds').scrollIntoView()`),
		sh.save("desktop-endpoint-builds"))

	// The running build's log, followed: new ticks appear while the page
	// shows it; then it is cancelled from the page.
	do("the running build's log", chromedp.Click(chromedp.CSS(row(long.ID)+` a.build-link`)),
		visible(`#build-status [data-status="BUILDING"]`),
		until(`/tick \d+/.test(`+text("#log-output")+`)`, 2*time.Minute))
	first := eval(`String(Math.max(...[...` + text("#log-output") + `.matchAll(/tick (\d+)/g)].map((m) => Number(m[1]))))`)
	do("the log follows", until(fmt.Sprintf(`%s.includes('tick %d')`, text("#log-output"), atoi(t, first)+10), 2*time.Minute),
		until(`/Step 3\/\d+ : RUN/.test(`+text("#log-output")+`)`, time.Minute),
		sh.save("desktop-build-log"))
	do("cancel from the page", chromedp.Click(chromedp.CSS("#build-cancel")),
		visible(`#build-status [data-status="CANCELLED"]`),
		until(text("#build-error")+`.includes('cancelled')`, time.Minute),
		until(text("#log-state")+`.includes('ended')`, time.Minute))
	if got := b.waitBuild(ep.ID, long.ID, done); got.Status != "CANCELLED" {
		t.Fatalf("the cancelled build: %+v", got)
	}

	// A new endpoint with the Model field: the gated model's download
	// fails without a token, and the page says so.
	gated := "https://huggingface.co/acme/gated-model"
	do("a new endpoint with a model",
		chromedp.Navigate(b.base+"/#/"),
		chromedp.Click(chromedp.CSS("#new-ep-open")),
		until(`document.querySelector('#new-ep-template option')?.value === `+jsq(tpl.ID), time.Minute),
		chromedp.SendKeys(chromedp.CSS("#new-ep-name"), "with-models"),
		chromedp.SetValue(chromedp.CSS("#new-ep-models"), gated),
		sh.save("desktop-new-endpoint"),
		chromedp.Click(chromedp.CSS("#new-ep-create")),
		until(`location.hash.startsWith('#/endpoint/')`, time.Minute),
		until(text("#models ul.models")+`.includes(`+jsq(gated)+`)`, time.Minute),
		until(text("#models-status .model-progress.bad")+`.includes('downloading acme/gated-model failed') && `+
			text("#models-status .model-progress")+`.includes('gated or private')`, 2*time.Minute))
	newID := strings.TrimPrefix(eval(`location.hash`), "#/endpoint/")
	var made struct{ ModelReferences []string }
	b.call("GET", "/v1/endpoints/"+newID, nil, &made)
	if len(made.ModelReferences) != 1 || made.ModelReferences[0] != gated {
		t.Fatalf("the endpoint made on the page: modelReferences %v", made.ModelReferences)
	}

	// Edited: a bad reference is refused naming the field; a good one
	// downloads, its progress shown, then complete.
	do("a bad reference", chromedp.SetValue(chromedp.CSS("#models-input"), "https://example.com/acme/x"),
		chromedp.Click(chromedp.CSS("#models-save")),
		until(text("#models-error")+`.includes('modelReferences')`, time.Minute))
	tiny := "https://huggingface.co/acme/tiny-model"
	do("a model downloading", chromedp.SetValue(chromedp.CSS("#models-input"), tiny),
		chromedp.Click(chromedp.CSS("#models-save")),
		until(text("#models ul.models")+`.includes(`+jsq(tiny)+`) && !`+text("#models ul.models")+`.includes('gated')`, time.Minute))
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the download never reached the held byte")
	}
	do("its progress", until(text("#models-status .model-progress")+`.includes('downloading acme/tiny-model: 1 MB of 3 MB')`, 2*time.Minute),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('models').scrollIntoView()`),
		sh.save("desktop-endpoint-models"))
	release()
	do("complete", until(text("#models-status")+`.includes('Complete in the cache')`, 2*time.Minute))

	// A phone: the builds as cards, the page no wider than the screen.
	do("phone",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(b.base+"/#/endpoint/"+ep.ID),
		visible(row(bad.ID)+`[data-status="FAILED"]`),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('builds').scrollIntoView()`),
		sh.save("phone-endpoint-builds"))
	if wide := eval(`String(document.documentElement.scrollWidth > window.innerWidth + 1)`); wide != "false" {
		t.Errorf("the endpoint page with builds is wider than a phone's screen")
	}
	do("phone build log", chromedp.Navigate(b.base+"/#/build/"+ep.ID+"/"+bad.ID),
		visible(`#build-status [data-status="FAILED"]`),
		until(`/Step 2\/\d+ : COPY missing.txt/.test(`+text("#log-output")+`)`, time.Minute),
		sh.save("phone-build-log"))
	if wide := eval(`String(document.documentElement.scrollWidth > window.innerWidth + 1)`); wide != "false" {
		t.Errorf("the build page is wider than a phone's screen")
	}
}

func jsq(s string) string { b, _ := json.Marshal(s); return string(b) }

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
