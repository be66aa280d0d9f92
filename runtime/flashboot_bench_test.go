package runtime_test

import (
	"slices"
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/runtime"
	"berth/store"
)

// BenchmarkFlashBoot measures /runsync end to end (HTTP request to result)
// on an endpoint whose only worker is frozen (FlashBoot), against a cold
// start of the same image in the same run (a fresh scaled-to-zero endpoint
// per sample: container created and started, worker start-up, job). One
// iteration is one sample of each. "go" is Berth's Go test worker;
// "python" is a stdlib-only Python worker (testdata/pyworker) in an image
// of Debian packages made with debootstrap (skipped, with the reason, when
// that is not possible here).
//
//	BERTH_REQUIRE_DOCKER=1 go test -run '^$' -bench FlashBoot -benchtime 15x ./runtime/
func BenchmarkFlashBoot(b *testing.B) {
	b.Run("go", func(b *testing.B) { benchFlashBoot(b, "") })
	b.Run("python", func(b *testing.B) {
		benchFlashBoot(b, dockertest.BuildDebianPythonImage(b, "../testdata/pyworker/pyworker.py"))
	})
}

func benchFlashBoot(b *testing.B, image string) {
	e, clock, _ := flashEnv(b)
	s := e.start()
	tm := e.putTemplate(func(t *store.Template) {
		if image != "" {
			t.ImageName = image
		}
	})
	runsync := func(epID, want string) time.Duration {
		var res struct{ Status, Output string }
		t0 := time.Now()
		e.call("POST", "/v2/"+epID+"/runsync?wait=60000", `{"input": {"echo": "`+want+`"}}`, &res)
		d := time.Since(t0)
		if res.Status != "COMPLETED" || res.Output != want {
			b.Fatalf("runsync: %+v", res)
		}
		return d
	}
	flash := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.Flashboot, ep.WorkersMax = true, 1 })
	runsync(flash.ID, "first") // its worker's cold start, not measured

	var cold, frozen []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ep := e.putEndpoint(tm.ID, func(ep *store.Endpoint) { ep.WorkersMax = 1 })
		b.StartTimer()
		cold = append(cold, runsync(ep.ID, "cold"))
		b.StopTimer()
		e.deleteEndpoint(ep.ID)
		s.Notify("")
		e.eventually("the cold worker removed", func() bool { return len(e.running(ep.ID)) == 0 })

		// Idle time passes until the autoscaler has frozen the worker
		// (TestFlashBoot checks the exact idleTimeout).
		e.workerIn(flash.ID, "idle")
		e.eventually("frozen and paused", func() bool {
			clock.Advance(6 * time.Second)
			s.Notify(flash.ID)
			ws := s.Workers(flash.ID)
			if len(ws) == 1 && ws[0].State == runtime.StateFrozen && e.paused(ws[0].ContainerID) {
				return true
			}
			return false
		})
		b.StartTimer()
		frozen = append(frozen, runsync(flash.ID, "warm"))
	}
	b.StopTimer()
	pct := func(ds []time.Duration, p float64) float64 {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return float64(ds[int(float64(len(ds)-1)*p)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(frozen, 0.5), "frozen-p50-ms")
	b.ReportMetric(pct(frozen, 0.95), "frozen-p95-ms")
	b.ReportMetric(pct(cold, 0.5), "cold-p50-ms")
	b.ReportMetric(pct(cold, 0.95), "cold-p95-ms")
	b.ReportMetric(pct(frozen, 0.5)/pct(cold, 0.5), "frozen/cold")
	b.ReportMetric(0, "ns/op")
}
