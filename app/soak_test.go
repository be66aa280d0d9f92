package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/app"
	"berth/gpu"
	"berth/internal/apptest"
)

// BenchmarkSoak runs Berth (the composition, without Docker) on a fake
// clock through simulated days of churn, all through its HTTP API, and
// reports its memory at the end of each day: b.N is the number of days.
// Every simulated hour two endpoints are created and the two oldest
// deleted (six live), each live endpoint's jobs are taken by ten worker
// ids never seen again (the operator's key registers them on the fly),
// every job streams four 16 KiB chunks nobody reads and finishes with a
// 4 KiB output, twenty more jobs expire unread in the queue, and three
// worker-env identities are made and never used. The clock then moves an
// hour in ten-minute steps (timers, retention and the cleaner run on it).
// Memory must not follow the days.
//
//	go test -run '^$' -bench Soak -benchtime 14x -timeout 2h ./app
func BenchmarkSoak(b *testing.B) {
	clock := clockwork.NewFakeClock()
	cfg := app.Config{DataDir: b.TempDir(), Addr: "127.0.0.1:0", Logger: quiet, Clock: clock, APIKey: "soak",
		Backend: app.DockerOff, DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }}
	a := apptest.Start(b, cfg)
	s := &soak{b: b, base: a.URL(), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	chunk, _ := json.Marshal(map[string]string{"output": strings.Repeat("c", 16<<10)})
	output := `{"output":"` + strings.Repeat("o", 4<<10) + `"}`

	var live []string
	var first, last mem
	b.ResetTimer()
	for day := 0; day < b.N; day++ {
		for hour := 0; hour < 24; hour++ {
			for range 2 {
				live = append(live, s.endpoint())
			}
			for len(live) > 6 {
				s.call("DELETE", "/v1/endpoints/"+live[0], "", 204, nil)
				live = live[1:]
			}
			for _, ep := range live {
				for range 10 {
					var r struct{ ID string }
					s.call("POST", "/v2/"+ep+"/run", `{"input":{"n":1}}`, 200, &r)
					w := "w" + strconv.FormatInt(s.seq(), 36)
					var j struct{ ID string }
					s.call("GET", "/v2/"+ep+"/job-take/"+w, "", 200, &j)
					for range 4 {
						s.call("POST", "/v2/"+ep+"/job-stream/"+w+"/"+j.ID, string(chunk), 200, nil)
					}
					s.call("POST", "/v2/"+ep+"/job-done/"+w+"/"+j.ID, output, 200, nil)
				}
			}
			for range 20 { // never taken: they expire
				s.call("POST", "/v2/"+live[len(live)-1]+"/run", `{"input":{"n":2},"policy":{"ttl":600000}}`, 200, nil)
			}
			for range 3 {
				s.call("GET", "/v1/endpoints/"+live[0]+"/worker-env", "", 200, nil)
			}
			for range 6 {
				clock.Advance(10 * time.Minute)
				s.call("GET", "/v2/"+live[0]+"/health", "", 200, nil) // lets the fired timers run
			}
		}
		m := measure(a.App)
		b.Logf("day %2d: heap %5.1f MiB, RSS %5.1f MiB, goroutines %d, workers %d, berth.db %.1f MiB",
			day+1, m.heap, m.rss, m.goroutines, len(a.Queue().Workers("")), m.file)
		if day == 0 {
			first = m
		}
		last = m
	}
	b.StopTimer()
	b.ReportMetric(first.heap, "heap-MiB-day1")
	b.ReportMetric(last.heap, "heap-MiB-last")
	b.ReportMetric(first.rss, "RSS-MiB-day1")
	b.ReportMetric(last.rss, "RSS-MiB-last")
	b.ReportMetric(float64(len(a.Queue().Workers(""))), "workers-left")
}

type soak struct {
	b      *testing.B
	base   string
	client *http.Client
	n      int64
}

func (s *soak) seq() int64 { s.n++; return s.n }

func (s *soak) call(method, path, body string, want int, out any) {
	req, _ := http.NewRequest(method, s.base+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer soak")
	req.Header.Set("Content-Type", "application/json")
	res, err := s.client.Do(req)
	if err != nil {
		s.b.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		s.b.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			s.b.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

func (s *soak) endpoint() string {
	var tpl, ep struct{ ID string }
	s.call("POST", "/v1/templates", fmt.Sprintf(`{"name":"soak-%d","imageName":"soak:1","isServerless":true}`, s.seq()), 200, &tpl)
	s.call("POST", "/v1/endpoints", `{"templateId":"`+tpl.ID+`","workersMax":0}`, 200, &ep)
	return ep.ID
}

type mem struct {
	heap, rss, file float64
	goroutines      int
}

// measure is the live heap after a full collection, the process's
// resident set (MiB) and berth.db's size.
func measure(a *app.App) mem {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := mem{heap: float64(ms.HeapAlloc) / (1 << 20), goroutines: runtime.NumGoroutine()}
	if raw, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(raw)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			m.rss = float64(pages*int64(os.Getpagesize())) / (1 << 20)
		}
	}
	if fi, err := os.Stat(a.Store().Path()); err == nil {
		m.file = float64(fi.Size()) / (1 << 20)
	}
	return m
}
