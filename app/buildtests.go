package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"berth/builder"
	"berth/mgmt"
	"berth/queue"
	"berth/runtime"
	"berth/store"
)

// testWorkers runs builds' tests (.runpod/tests.json) on test workers:
// each build's worker is the one worker of an endpoint of its own
// (mgmt.TestEndpoint: "test-<buildId>"), kept in memory only and listed
// to the runtime beside the stored endpoints, so the worker is launched,
// supervised and stopped through the runtime's own path (Docker or
// Kubernetes) and speaks the worker protocol with its own key. It is no
// endpoint of the API: only the worker protocol finds it. Never stored,
// a test worker left by a killed Berth is an orphan the next start's
// reconcile removes; its build is marked FAILED (interrupted).
type testWorkers struct {
	a  *App
	mu sync.Mutex
	m  map[string]testWorker // by test endpoint id
}

type testWorker struct {
	ep store.Endpoint
	t  store.Template
}

func newTestWorkers(a *App) *testWorkers { return &testWorkers{a: a, m: map[string]testWorker{}} }

// endpoints are the test endpoints, for the runtime's endpoint list.
func (w *testWorkers) endpoints() []store.Endpoint {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]store.Endpoint, 0, len(w.m))
	for _, tw := range w.m {
		out = append(out, tw.ep)
	}
	return out
}

func (w *testWorkers) endpoint(id string) (store.Endpoint, bool) {
	if !mgmt.IsTestEndpoint(id) {
		return store.Endpoint{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tw, ok := w.m[id]
	return tw.ep, ok
}

func (w *testWorkers) template(id string) (store.Template, bool) {
	if !mgmt.IsTestEndpoint(id) {
		return store.Template{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tw, ok := w.m[id]
	return tw.t, ok
}

// StartTests implements builder.Tester.
func (w *testWorkers) StartTests(ctx context.Context, b store.Build, c mgmt.TestConfig) (builder.TestRun, error) {
	sup := w.a.sup
	if sup == nil {
		return nil, errors.New("no worker runtime")
	}
	ep, t, err := w.a.mg.TestWorker(ctx, b, c)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.m[ep.ID] = testWorker{ep: ep, t: t}
	w.mu.Unlock()
	sup.Notify(ep.ID)
	return &testRun{w: w, id: ep.ID}, nil
}

// testRun is one build's test worker.
type testRun struct {
	w  *testWorkers
	id string
}

// Run implements builder.TestRun: the test is a job of the test
// endpoint's queue; while it waits, a test worker that fails to start or
// crashes ends the wait with the runtime's reason.
func (r *testRun) Run(ctx context.Context, t mgmt.BuildTest) (string, string, error) {
	q, sup := r.w.a.q, r.w.a.sup
	res, err := q.Submit(queue.SubmitRequest{EndpointID: r.id, Input: t.Input, ExecutionTimeout: t.Timeout, TTL: mgmt.MaxTestTimeout + time.Hour})
	if err != nil {
		return "", "", fmt.Errorf("submit the test's job: %w", err)
	}
	for {
		st, err := q.Wait(ctx, r.id, res.ID, 2*time.Second)
		if err == nil && st.Status.Terminal() {
			msg := ""
			if st.Error != nil {
				msg = *st.Error
			}
			return string(st.Status), msg, nil
		}
		if err := ctx.Err(); err != nil {
			return "", "", err
		}
		if err != nil {
			return "", "", fmt.Errorf("wait for the test's job: %w", err)
		}
		if s := sup.Status(r.id); s.Failures > 0 || s.Crashes > 0 {
			why := s.LastError
			if why == "" {
				why = s.Reason
			}
			return "", "", fmt.Errorf("the test worker failed: %s", why)
		}
	}
}

// Close implements builder.TestRun: the test endpoint goes, the runtime
// drains its worker (as for a deleted endpoint), its jobs are cancelled,
// and whatever instance of it remains is removed. Images are never
// removed.
func (r *testRun) Close() {
	a := r.w.a
	r.w.mu.Lock()
	delete(r.w.m, r.id)
	r.w.mu.Unlock()
	a.sup.Notify(r.id)
	if _, err := a.q.CancelEndpoint(r.id); err != nil {
		a.log.Warn("cancel a test worker's jobs", "endpoint", r.id, "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(a.sup.Workers(r.id)) > 0 && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	// Whatever instance remains is removed, and Close returns once none
	// is listed (a removal under way is still listed).
	for ctx.Err() == nil {
		list, err := a.backend.List(ctx)
		if err != nil {
			a.log.Warn("list a test worker's instances", "endpoint", r.id, "err", err)
			return
		}
		left := 0
		for _, in := range list {
			if in.Labels[runtime.LabelEndpoint] == r.id {
				left++
				if err := a.backend.Remove(ctx, in.ID); err != nil && !runtime.IsNotFound(err) {
					a.log.Debug("remove a test worker", "endpoint", r.id, "err", err)
				}
			}
		}
		if left == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	a.log.Warn("a test worker is still listed after a minute", "endpoint", r.id)
}
