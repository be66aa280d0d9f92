package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"berth/app"
	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/internal/kubetest"
	"berth/internal/proctest"
	"berth/runtime"
)

func TestMain(m *testing.M) { kubetest.Main(m, proctest.RemoveBuilds) }

const apiKey = "bench-key"

// rig is Berth as berth serve --runtime kubernetes composes it (package
// app, production intervals and client rate limits), running as the
// ServiceAccount of deploy/kubernetes in its own namespace, with a watch
// of its Pods that stamps when each was created, bound and running.
type rig struct {
	b    *testing.B
	c    *kubetest.Cluster
	ns   *kubetest.Namespace
	app  *app.App
	base string

	mu    sync.Mutex
	pods  map[string]*podTimes // by Pod name
	byEp  map[string][]string  // endpoint id → its Pods' names, in order seen
	count map[string]int       // created, bound, running, gone
	moved chan struct{}        // closed and replaced on every change
}

type podTimes struct {
	created, bound, running, gone time.Time
}

func newRig(b *testing.B) *rig {
	b.Helper()
	c := kubetest.Shared(b)
	ns := c.Namespace(b)
	r := &rig{b: b, c: c, ns: ns, pods: map[string]*podTimes{}, byEp: map[string][]string{}, count: map[string]int{},
		moved: make(chan struct{})}

	f := informers.NewSharedInformerFactoryWithOptions(c.AdminClient, 0, informers.WithNamespace(ns.Name))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.seen(o, false) },
		UpdateFunc: func(_, o any) { r.seen(o, false) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			r.seen(o, true)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	b.Cleanup(func() { close(stop); f.Shutdown() })
	cache.WaitForCacheSync(stop, inf.HasSynced)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := apptest.Config(b, apiKey)
	cfg.Logger, cfg.RemoveContainersOnStop = log, true
	cfg.DiscoverGPUs = nil // the cluster's, not the test's
	cfg.Backend = app.OnKubernetes(app.Kubernetes{REST: ns.Config, Namespace: ns.Name})
	a := apptest.Start(b, cfg)
	r.app, r.base = a.App, a.URL()
	return r
}

// seen stamps a Pod's first sighting in each state.
func (r *rig) seen(o any, deleted bool) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.pods[p.Name]
	if t == nil {
		t = &podTimes{created: now}
		r.pods[p.Name] = t
		r.count["created"]++
		ep := p.Labels[runtime.LabelEndpoint]
		r.byEp[ep] = append(r.byEp[ep], p.Name)
	}
	if t.bound.IsZero() && p.Spec.NodeName != "" {
		t.bound = now
		r.count["bound"]++
	}
	if t.running.IsZero() && p.Status.Phase == corev1.PodRunning {
		t.running = now
		r.count["running"]++
	}
	if t.gone.IsZero() && deleted {
		t.gone = now
		r.count["gone"]++
	}
	close(r.moved)
	r.moved = make(chan struct{})
}

// waitFor waits on the watch until cond holds (under r.mu), or fails.
func (r *rig) waitFor(what string, timeout time.Duration, cond func() bool) {
	r.b.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, moved := cond(), r.moved
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-moved:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			r.b.Fatalf("timed out after %s waiting for %s (pods: %v)", timeout, what, r.count)
		}
	}
}

// call makes an API call with the operator key and decodes the reply.
func (r *rig) call(method, path string, body any, out any) {
	r.b.Helper()
	apitest.Call(context.Background(), r.b, r.base, apiKey, method, path, body, out)
}

type idObj struct {
	ID string `json:"id"`
}

// berthRequests counts Berth's requests to the API server, by verb and
// resource, from the API server's audit log, after the first skip.
func (r *rig) berthRequests(skip int) (n int, counts map[string]int) {
	r.b.Helper()
	reqs, err := r.c.Requests()
	if err != nil {
		r.b.Fatal(err)
	}
	all := kubetest.By(reqs, r.ns.ServiceAccountUser())
	counts = map[string]int{}
	for _, q := range all[min(skip, len(all)):] {
		counts[q.Kind()]++
	}
	return len(all), counts
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s %d, ", k, m[k])
	}
	if sb.Len() == 0 {
		return "none"
	}
	return strings.TrimSuffix(sb.String(), ", ")
}

func pct(ds []time.Duration, p float64) float64 {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	i := int(float64(len(ds)-1) * p)
	return float64(ds[i].Microseconds()) / 1000
}

// buildEchoworker builds testdata/echoworker, the program the test's
// kubelet runs for each worker Pod.
func buildEchoworker(b *testing.B) string {
	return proctest.Build(b, "berth/testdata/echoworker", false)
}

// BenchmarkJobThroughPod measures a job on an endpoint with no worker (a
// fresh GPU endpoint each iteration) through its worker Pod: POST /runsync
// → the Pod created (by Berth) → bound to the GPU node (the scheduler) →
// the job taken by its worker (the test's kubelet starts
// testdata/echoworker with the Pod's env, which takes the job; the job's
// delayTime). Creation and binding are stamped by a watch of the Pods; p50
// and p99 over the iterations.
//
//	go test -run '^$' -bench JobThroughPod -benchtime 20x ./runtime/kube/bench/
func BenchmarkJobThroughPod(b *testing.B) {
	r := newRig(b)
	r.c.AddNode(b, kubetest.NodeSpec{GPUs: 2, GPUProduct: "NVIDIA-GeForce-RTX-4090", GPUMemoryMiB: 24564, TestKubelet: true})
	runner, err := r.c.RunPods(kubetest.RunPodsConfig{Namespace: r.ns.Name, Program: buildEchoworker(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(runner.Close)
	r.waitGPUs(2)
	var tpl idObj
	r.call("POST", "/v1/templates", map[string]any{"name": "bench", "imageName": "berth-bench/echoworker:1", "isServerless": true}, &tpl)
	skip, _ := r.berthRequests(0)

	var create, bind, start, total []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		var ep idObj
		r.call("POST", "/v1/endpoints", map[string]any{"name": fmt.Sprintf("bench-%d", i), "templateId": tpl.ID,
			"computeType": "GPU", "gpuTypeIds": []string{"NVIDIA GeForce RTX 4090"}, "gpuCount": 1,
			"workersMin": 0, "workersMax": 1, "idleTimeout": 5}, &ep)
		b.StartTimer()
		t0 := time.Now()
		var res struct {
			Status    string          `json:"status"`
			DelayTime int64           `json:"delayTime"`
			Output    json.RawMessage `json:"output"`
		}
		r.call("POST", "/v2/"+ep.ID+"/runsync", map[string]any{"input": map[string]any{"echo": i}}, &res)
		b.StopTimer()
		if res.Status != "COMPLETED" || string(res.Output) != fmt.Sprint(i) {
			b.Fatalf("job: %+v", res)
		}
		taken := t0.Add(time.Duration(res.DelayTime) * time.Millisecond)
		r.mu.Lock()
		names := r.byEp[ep.ID]
		var pt podTimes
		if len(names) == 1 {
			pt = *r.pods[names[0]]
		}
		r.mu.Unlock()
		if len(names) != 1 || pt.bound.IsZero() {
			b.Fatalf("endpoint %s: pods %v, times %+v", ep.ID, names, pt)
		}
		create = append(create, pt.created.Sub(t0))
		bind = append(bind, pt.bound.Sub(pt.created))
		start = append(start, taken.Sub(pt.bound))
		total = append(total, taken.Sub(t0))

		// Back to zero: the endpoint deleted, its worker drained and
		// its Pod gone.
		r.call("DELETE", "/v1/endpoints/"+ep.ID, nil, nil)
		r.waitFor("the worker Pod of "+ep.ID+" gone", 2*time.Minute, func() bool { return !r.pods[names[0]].gone.IsZero() })
		b.StartTimer()
	}
	b.StopTimer()
	_, counts := r.berthRequests(skip)
	b.Logf("Berth's requests to the API server over %d jobs: %s", b.N, formatCounts(counts))
	for _, s := range []struct {
		name string
		ds   []time.Duration
	}{{"create", create}, {"bind", bind}, {"start", start}, {"total", total}} {
		b.ReportMetric(pct(s.ds, 0.5), s.name+"-p50-ms")
		b.ReportMetric(pct(s.ds, 0.99), s.name+"-p99-ms")
	}
	b.ReportMetric(0, "ns/op")
}

// waitGPUs waits until Berth's catalogue has n GPU slots.
func (r *rig) waitGPUs(n int) {
	r.b.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(r.app.GPUs().Snapshot()) < n {
		if time.Now().After(deadline) {
			r.b.Fatalf("Berth sees %d GPU slots, want %d", len(r.app.GPUs().Snapshot()), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkScale100x10 scales 100 CPU endpoints from 0 to 10 workers each
// (workersMin 10) and back (workersMax 0), against the API server with
// kwok running the Pods (nobody takes jobs: the workers stay
// initializing). It reports the time until all 1000 Pods are created,
// bound and running, and until all are gone; and Berth's requests to the
// API server, counted from the API server's audit log — in each phase,
// and in an idle minute with the 1000 Pods up, where a polling client
// would show its LISTs and GETs.
//
//	go test -run '^$' -bench Scale100x10 -benchtime 1x -timeout 30m ./runtime/kube/bench/
func BenchmarkScale100x10(b *testing.B) {
	const endpoints, workers = 100, 10
	r := newRig(b)
	// 1000 Pods of 2 vCPU and 4 GiB (cpu3c) on 10 nodes.
	for range 10 {
		r.c.AddNode(b, kubetest.NodeSpec{CPU: "256", Memory: "1Ti", Disk: "1Ti", Pods: 110})
	}
	var tpl idObj
	// containerDiskInGb is each Pod's ephemeral-storage request: 5 GiB
	// × 100 fits a node's 1 TiB (the default 50 GiB would not).
	r.call("POST", "/v1/templates", map[string]any{"name": "scale", "imageName": "berth-bench/echoworker:1", "isServerless": true,
		"containerDiskInGb": 5}, &tpl)
	var eps []string
	for i := range endpoints {
		var ep idObj
		r.call("POST", "/v1/endpoints", map[string]any{"name": fmt.Sprintf("scale-%d", i), "templateId": tpl.ID,
			"computeType": "CPU", "workersMin": 0, "workersMax": workers}, &ep)
		eps = append(eps, ep.ID)
	}
	idle := time.Minute
	if testing.Short() {
		idle = 10 * time.Second
	}
	var up, upCreated, upBound, down time.Duration
	b.ResetTimer()
	for range b.N {
		r.mu.Lock()
		r.count = map[string]int{}
		r.mu.Unlock()
		skip, _ := r.berthRequests(0)
		t0 := time.Now()
		for _, id := range eps {
			r.call("PATCH", "/v1/endpoints/"+id, map[string]any{"workersMin": workers, "workersMax": workers}, nil)
		}
		var created, bound time.Time
		r.waitFor("1000 Pods running", 10*time.Minute, func() bool {
			if created.IsZero() && r.count["created"] >= endpoints*workers {
				created = time.Now()
			}
			if bound.IsZero() && r.count["bound"] >= endpoints*workers {
				bound = time.Now()
			}
			return r.count["running"] >= endpoints*workers
		})
		up, upCreated, upBound = time.Since(t0), created.Sub(t0), bound.Sub(t0)
		n, counts := r.berthRequests(skip)
		b.Logf("scale-up to %d Pods: created %s, bound %s, running %s; Berth's requests: %d (%s)",
			endpoints*workers, upCreated.Round(time.Millisecond), upBound.Round(time.Millisecond), up.Round(time.Millisecond), n-skip, formatCounts(counts))
		b.ReportMetric(float64(n-skip)/up.Seconds(), "up-req/s")

		// Idle: 1000 Pods up, nothing changes. The window opens once
		// Berth's requests have settled (none for 5 s: requests queued
		// behind its client rate limit go out late).
		b.StopTimer()
		skip = n
		settle := time.Now()
		for last, quiet := n, time.Now(); time.Since(quiet) < 5*time.Second; {
			if time.Since(settle) > 2*time.Minute {
				b.Fatalf("Berth's requests did not settle within 2 minutes")
			}
			time.Sleep(250 * time.Millisecond) // paced reading of the audit log
			if cur, _ := r.berthRequests(0); cur != last {
				last, quiet = cur, time.Now()
			}
		}
		n, counts = r.berthRequests(skip)
		b.Logf("settled %s after all were running: %d more requests (%s)", time.Since(settle).Round(time.Millisecond), n-skip, formatCounts(counts))
		skip = n
		idleFrom := time.Now()
		time.Sleep(idle) // the measurement window itself, not a synchronisation
		n, counts = r.berthRequests(skip)
		b.Logf("idle %s with %d Pods: Berth's requests: %d (%s)", time.Since(idleFrom).Round(time.Second), endpoints*workers, n-skip, formatCounts(counts))
		b.ReportMetric(float64(n-skip)/time.Since(idleFrom).Minutes(), "idle-req/min")
		b.StartTimer()

		skip = n
		t1 := time.Now()
		for _, id := range eps {
			r.call("PATCH", "/v1/endpoints/"+id, map[string]any{"workersMin": 0, "workersMax": 0}, nil)
		}
		r.waitFor("1000 Pods gone", 10*time.Minute, func() bool { return r.count["gone"] >= endpoints*workers })
		down = time.Since(t1)
		n, counts = r.berthRequests(skip)
		b.Logf("scale-down to 0: all gone in %s; Berth's requests: %d (%s)", down.Round(time.Millisecond), n-skip, formatCounts(counts))
		b.ReportMetric(float64(n-skip)/down.Seconds(), "down-req/s")
	}
	b.ReportMetric(upCreated.Seconds(), "up-created-s")
	b.ReportMetric(upBound.Seconds(), "up-bound-s")
	b.ReportMetric(up.Seconds(), "up-running-s")
	b.ReportMetric(down.Seconds(), "down-gone-s")
	b.ReportMetric(0, "ns/op")
}
