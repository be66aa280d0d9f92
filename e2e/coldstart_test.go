package e2e_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"berth/app"
	"berth/internal/dockertest"
	"berth/internal/hubtest"
	"berth/runtime/docker"
	"berth/store"
)

// BenchmarkModelColdStart: the cold start of a worker that loads a 1 GB
// model (4 made-up safetensors shards of 256 MB and a config.json, served
// by the local Hub stand-in), measured from the job's submission to its
// result, with no worker running before:
//
//   - cached: the model is already in Berth's cache (filled once, before
//     the timer: cache-fill-s and cache-fill-bytes); each op is a new
//     endpoint naming the same model, and the Hub serves it 0 bytes
//     (asserted with the Hub's byte counter: hub-bytes/op);
//   - self-download: the endpoint names no model; the worker fetches the
//     files from the same Hub into its container's disk, then reads them.
//
// Either way the worker (e2e/testdata/modelworker, a static Go binary)
// reads and hashes every byte before taking jobs; load-s/op is its own
// measure of that. BERTH_BENCH_MODEL_MB changes the model's size.
//
//	go test -run '^$' -bench BenchmarkModelColdStart -benchtime 3x ./e2e
func BenchmarkModelColdStart(b *testing.B) {
	const shards = 4
	total := int64(1024)
	if v := os.Getenv("BERTH_BENCH_MODEL_MB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < shards {
			b.Fatalf("BERTH_BENCH_MODEL_MB=%q: want a number of MB ≥ %d", v, shards)
		}
		total = n
	}
	hub := hubtest.New(b)
	files := []hubtest.File{{Path: "config.json", Data: []byte(`{"model_type":"bench","num_shards":4}`)}}
	for i := range shards {
		files = append(files, hubtest.File{Path: fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, shards),
			Gen: hubtest.Generate(uint64(i+1), total<<20/shards)})
	}
	repo := hub.Add(hubtest.Repo{ID: "acme/bench-1gb", Files: files})
	s := newStackWith(b, func(c *app.Config) {
		c.Models = app.Models{Endpoint: hub.URL}
		c.RateLimits = false
	})
	// The worker that downloads reaches the Hub as workers reach Berth:
	// host.docker.internal, on the bridge's gateway.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dock, err := docker.Connect(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	gw, err := dock.BridgeGateway(ctx)
	dock.Close()
	if err != nil {
		b.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(hub.ListenAlso(b, net.JoinHostPort(gw, "0")))
	containerHub := "http://host.docker.internal:" + port
	image := dockertest.BuildGoImage(b, "berth/e2e/testdata/modelworker")
	ref := "https://huggingface.co/" + repo.ID

	// The one download into the cache (an endpoint that wants no worker).
	start, before := time.Now(), hub.BytesSent()
	first := s.endpoint(image, nil, map[string]any{"workersMin": 0, "workersMax": 0, "modelReferences": []string{ref}})
	waitFor(b, 10*time.Minute, "the model in Berth's cache", func() bool {
		var v struct {
			Models []struct{ State, Error string }
		}
		s.call("GET", "/v1/endpoints/"+first.ID, nil, 200, &v)
		if len(v.Models) == 1 && v.Models[0].State == "failed" {
			b.Fatalf("the cache's download failed: %s", v.Models[0].Error)
		}
		return len(v.Models) == 1 && v.Models[0].State == "ready"
	})
	fill, fillBytes := time.Since(start), hub.BytesSent()-before

	run := func(b *testing.B, cached bool) {
		var elapsed, load time.Duration
		var fetched int64
		for range b.N {
			b.StopTimer()
			env := map[string]string{"MODEL_ID": repo.ID, "MODEL_REVISION": "main"}
			extra := map[string]any{"workersMin": 0, "workersMax": 1, "idleTimeout": 5}
			if cached {
				extra["modelReferences"] = []string{ref}
			} else {
				env["MODEL_HUB"] = containerHub
			}
			ep := s.endpoint(image, env, extra)
			before := hub.BytesSent()
			b.StartTimer()
			t0 := time.Now()
			out := coldJob(b, s, ep.ID)
			d := time.Since(t0)
			b.StopTimer()
			elapsed += d
			load += time.Duration(out.Seconds * float64(time.Second))
			got := hub.BytesSent() - before
			fetched += got
			if cached && got != 0 {
				b.Fatalf("a new endpoint naming the cached model made the Hub send %d bytes; want 0", got)
			}
			for _, f := range repo.Files {
				want := hubtest.Sha256(f.Data)
				if f.Gen != nil {
					want = f.Gen.Sha256()
				}
				if out.Files[f.Path] != want {
					b.Fatalf("the worker read %s with sha256 %s; the Hub served %s", f.Path, out.Files[f.Path], want)
				}
			}
			s.call("DELETE", "/v1/endpoints/"+ep.ID, nil, 204, nil)
			waitFor(b, 2*time.Minute, "the endpoint's worker to be gone", func() bool { return len(s.sup.Workers(ep.ID)) == 0 })
		}
		n := float64(b.N)
		b.ReportMetric(elapsed.Seconds()/n, "s/op")
		b.ReportMetric(load.Seconds()/n, "load-s/op")
		b.ReportMetric(float64(fetched)/n, "hub-bytes/op")
		if cached {
			b.ReportMetric(fill.Seconds(), "cache-fill-s")
			b.ReportMetric(float64(fillBytes), "cache-fill-bytes")
		}
	}
	b.Run("cached", func(b *testing.B) { run(b, true) })
	b.Run("self-download", func(b *testing.B) { run(b, false) })
}

// coldOutput is what modelworker answers: each file's sha256 and how
// long its load took.
type coldOutput struct {
	Files   map[string]string
	Bytes   int64
	Seconds float64
}

// coldJob runs one job on endpoint ep (whose worker starts for it) and
// returns the worker's answer.
func coldJob(b *testing.B, s *stack, ep string) coldOutput {
	var job struct{ ID string }
	s.call("POST", "/v2/"+ep+"/run", map[string]any{"input": map[string]any{}}, 200, &job)
	var done struct {
		Status, Error string
		Output        coldOutput
	}
	waitFor(b, 10*time.Minute, "the cold job", func() bool {
		s.call("GET", "/v2/"+ep+"/status/"+job.ID, nil, 200, &done)
		return store.JobStatus(done.Status).Terminal()
	})
	if done.Status != "COMPLETED" {
		b.Fatalf("job %s: %s", done.Status, done.Error)
	}
	return done.Output
}

// waitFor polls cond every 20 ms until it holds, failing after limit.
func waitFor(b *testing.B, limit time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
