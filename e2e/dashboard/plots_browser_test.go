package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jonboulle/clockwork"

	"berth/internal/apptest"
	"berth/worker"
)

// travelClock is the real clock moved forward by a settable offset: the
// test lives through an hour of an endpoint's activity in seconds, every
// timer and ticker still running in real time.
type travelClock struct {
	clockwork.Clock
	offset atomic.Int64
}

func (c *travelClock) Now() time.Time                  { return c.Clock.Now().Add(time.Duration(c.offset.Load())) }
func (c *travelClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *travelClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
func (c *travelClock) skip(d time.Duration)            { c.offset.Add(int64(d)) }

// TestDashboardPlots: an endpoint's page draws its last hour and day —
// jobs per minute by outcome, queue depth, delay and execution time,
// workers by state, cold starts — from GET /v1/endpoints/ID/metrics. Berth
// (in process, package app) lives through 40 minutes of real jobs run by a
// host worker, a minute of its clock at a time; the page's bars add up to
// the jobs run, its latency lines are drawn, and the day view counts the
// same jobs in five-minute bars.
func TestDashboardPlots(t *testing.T) {
	if testing.Short() {
		t.Skip("runs chromium")
	}
	exe := chromium(t)
	const key = "plots-key"
	clk := &travelClock{Clock: clockwork.NewRealClock()}
	cfg := apptest.Config(t, key)
	cfg.Clock = clk
	cfg.Series.SampleEvery = 20 * time.Millisecond
	cfg.Queue.WorkerTimeout = 24 * time.Hour // the clock's jumps are no silence of the worker
	b := startApp(t, cfg)
	var tpl, ep struct{ ID string }
	b.call("POST", "/v1/templates", map[string]any{"name": "sdxl", "imageName": "sdxl:1", "isServerless": true}, &tpl)
	b.call("POST", "/v1/endpoints", map[string]any{"name": "sdxl-turbo", "templateId": tpl.ID, "computeType": "CPU"}, &ep)

	b.hostWorker(ep.ID, func(ctx context.Context, j *worker.Job) (any, error) {
		var in struct {
			MS   int
			Fail bool
		}
		json.Unmarshal(j.Input, &in)
		select { // the job's work
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
		case <-ctx.Done():
		}
		if in.Fail {
			return nil, errors.New("out of memory")
		}
		return "ok", nil
	})

	// 40 minutes: a wave of traffic, a job in eight failing, the work
	// taking 10–60 ms.
	type counts struct{ Completed, Failed int }
	read := func() (c counts) {
		var v struct{ Buckets []counts }
		b.call("GET", "/v1/endpoints/"+ep.ID+"/metrics?window=day", nil, &v)
		for _, x := range v.Buckets {
			c.Completed += x.Completed
			c.Failed += x.Failed
		}
		return c
	}
	var want counts
	n := 0
	for minute := range 40 {
		jobs := 2 + int(5+5*math.Sin(float64(minute)/5))
		for range jobs {
			n++
			fail := n%8 == 0
			b.call("POST", "/v2/"+ep.ID+"/run", map[string]any{"input": map[string]any{"ms": 10 + 50*(n%5)/4, "fail": fail}}, nil)
			if fail {
				want.Failed++
			} else {
				want.Completed++
			}
		}
		for deadline := time.Now().Add(time.Minute); read() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("minute %d: series count %+v, want %+v", minute, read(), want)
			}
		}
		clk.skip(time.Minute)
	}

	bctx := browser(t, exe)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 5*time.Minute)
	defer cancel()
	sh := shots{dir: t.TempDir()}
	t.Logf("screenshots in %s", sh.dir)
	// sumBars adds the data-n of a chart's bars of one kind.
	sumBars := func(plot, kind string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#plots svg[data-plot=%q] rect.bar.%s')].reduce((a, r) => a + Number(r.dataset.n), 0)`, plot, kind)
	}
	drawn := func(bars int) string {
		return fmt.Sprintf(`(() => {
			const q = (s) => document.querySelectorAll('#plots ' + s).length;
			return %s === %d && %s === %d && q('svg[data-plot="jobs"] rect.bar.completed') >= %d &&
				q('svg[data-plot="delay"] path.line.p50') === 1 && q('svg[data-plot="delay"] path.line.p95') === 1 &&
				q('svg[data-plot="execution"] path.line.p95') === 1 && q('svg[data-plot="queue"] path.line.queue') === 1 &&
				q('svg[data-plot="workers"] rect.bar') > 0 && q('svg[data-plot="cold"]') === 1; })()`,
			sumBars("jobs", "completed"), want.Completed, sumBars("jobs", "failed"), want.Failed, bars)
	}
	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 1000),
		chromedp.Navigate(b.base+"/"),
		visible("#key-input"),
		chromedp.SendKeys(chromedp.CSS("#key-input"), key),
		chromedp.Click(chromedp.CSS("#key-submit")),
		chromedp.Navigate(b.base+"/#/endpoint/"+ep.ID),
		// The hour: a bar a minute (the first minutes' jobs each in their
		// own bar), lines for the latencies, the worker sampled.
		until(drawn(35), time.Minute),
		sh.save("desktop-endpoint-plots"),
		// The day: the same jobs in five-minute bars.
		chromedp.Click(chromedp.CSS(`#plot-window button[data-window="day"]`)),
		until(`document.querySelector('#plot-window button.on').dataset.window === 'day'`, time.Minute),
		until(drawn(8), time.Minute),
		// A phone: one chart a row, the window kept, nothing wider than
		// the screen.
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(b.base+"/#/"),
		chromedp.Navigate(b.base+"/#/endpoint/"+ep.ID),
		until(drawn(8), time.Minute),
		until(`document.documentElement.scrollWidth <= window.innerWidth + 1`, time.Minute),
		sh.save("phone-endpoint-plots"),
	)
	if err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("%v\npage text:\n%s", err, body)
	}
	// A bar's title says what it counts.
	title, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#plots svg[data-plot="jobs"] rect.bar.completed title').textContent`))
	if err != nil || !regexp.MustCompile(`^\d\d:\d\d–\d\d:\d\d: \d+ completed`).MatchString(title) {
		t.Errorf("a bar's title: %q (%v)", title, err)
	}
	bars, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#plots svg[data-plot="jobs"] rect.bar.completed').length`))
	t.Logf("day view: %d five-minute bars of completed jobs; %d completed, %d failed in all", bars, want.Completed, want.Failed)
	if bars > 10 {
		t.Errorf("40 minutes drawn as %d five-minute bars", bars)
	}
}
