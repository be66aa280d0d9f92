package app_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/app"
	"berth/gpu"
	"berth/internal/apptest"
)

type cleanEnv struct {
	t     *testing.T
	a     *apptest.Berth
	clock *clockwork.FakeClock
}

func newCleanEnv(t *testing.T) *cleanEnv {
	clock := clockwork.NewFakeClock()
	a := start(t, app.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quiet, Clock: clock, APIKey: "k",
		Backend: app.DockerOff, DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }})
	t.Cleanup(func() { stop(t, a) })
	return &cleanEnv{t: t, a: a, clock: clock}
}

func (e *cleanEnv) call(method, path, body string, want int) string {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.a.URL()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		e.t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	return string(b)
}

func (e *cleanEnv) endpoint() string {
	e.t.Helper()
	tpl := e.call("POST", "/v1/templates", `{"name":"t-`+fmt.Sprint(time.Now().UnixNano())+`","imageName":"x:1","isServerless":true}`, 200)
	id := between(tpl, `"id":"`, `"`)
	ep := e.call("POST", "/v1/endpoints", `{"templateId":"`+id+`","workersMax":0}`, 200)
	return between(ep, `"id":"`, `"`)
}

func between(s, a, b string) string {
	i := strings.Index(s, a) + len(a)
	return s[i : i+strings.Index(s[i:], b)]
}

// waitMetric waits for a line of /metrics to appear.
func (e *cleanEnv) waitMetric(line string) {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if strings.Contains(e.call("GET", "/metrics", "", 200), line) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("never on /metrics: %s\n%s", line, grep(e.call("GET", "/metrics", "", 200), "berth_cleaner"))
		}
	}
}

// A deleted endpoint's per-endpoint series go from /metrics, and the worker
// identities the operator's key made on the fly are forgotten an hour after
// their last request, by the cleaner on the App's clock.
func TestDeletedEndpointSeriesAndIdleWorkersGo(t *testing.T) {
	e := newCleanEnv(t)
	ep, other := e.endpoint(), e.endpoint()
	for _, id := range []string{ep, other} {
		job := between(e.call("POST", "/v2/"+id+"/run", `{"input":{}}`, 200), `"id":"`, `"`)
		e.call("GET", "/v2/"+id+"/job-take/w-"+id, "", 200)
		e.call("POST", "/v2/"+id+"/job-done/w-"+id+"/"+job, `{"output":1}`, 200)
	}
	for i := range 50 {
		e.call("GET", fmt.Sprintf("/v2/%s/ping/op-%d", other, i), "", 200)
	}
	e.waitMetric(`berth_job_delay_seconds_count{endpoint="` + ep + `"} 1`)
	e.call("DELETE", "/v1/endpoints/"+ep, "", 204)
	m := e.call("GET", "/metrics", "", 200)
	if strings.Contains(m, `endpoint="`+ep+`"`) {
		t.Fatalf("a deleted endpoint's series are still served:\n%s", grep(m, ep))
	}
	if !strings.Contains(m, `berth_job_delay_seconds_count{endpoint="`+other+`"} 1`) {
		t.Fatalf("the other endpoint's series went too")
	}
	if n := len(e.a.Queue().Workers(other)); n != 51 {
		t.Fatalf("%d workers, want 51", n)
	}
	// An hour and a minute later the cleaner has forgotten them.
	for range 61 {
		e.clock.Advance(time.Minute)
	}
	for deadline := time.Now().Add(30 * time.Second); len(e.a.Queue().Workers("")) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers left", len(e.a.Queue().Workers("")))
		}
	}
	e.waitMetric(`berth_cleaner_removed_total{task="workers"} 5`) // 51, or 52 with the deleted endpoint's
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
