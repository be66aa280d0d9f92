package e2e_test

import (
	"context"
	"testing"
	"time"

	"berth/app"
	"berth/internal/apitest"
	"berth/internal/apptest"
	"berth/internal/dockertest"
	"berth/lbproxy"
	"berth/queue"
	"berth/runtime"
	"berth/store"
)

const (
	apiKey = "e2e-key"
	// waitLong bounds every wait for a container-level event (generous:
	// the tests run on a loaded machine).
	waitLong = 90 * time.Second
)

// stack is one Berth as berth serve composes it (package app): store,
// queue, runtime, management, HTTP API, load balancer, on its own data
// directory (so its own Docker instance label), listening on loopback so
// containers reach the worker protocol through the bridge listener, as in
// a default berth serve. Intervals are short for the tests.
type stack struct {
	t    testing.TB
	b    *apptest.Berth // Stop it to stop Berth mid-test (file checked)
	app  *app.App
	db   *store.DB
	q    *queue.Service
	sup  *runtime.Supervisor
	lb   *lbproxy.Balancer
	base string // http://127.0.0.1:PORT
}

func newStack(t testing.TB) *stack {
	t.Helper()
	return newStackWith(t, nil)
}

// newStackWith is newStack with the Config changed by set first.
func newStackWith(t testing.TB, set func(*app.Config)) *stack {
	t.Helper()
	dockertest.Require(t)
	cfg := apptest.Config(t, apiKey)
	cfg.RateLimits, cfg.Backend, cfg.RemoveContainersOnStop = true, app.DockerRequired, true
	cfg.HTTP.PingInterval = 2 * time.Second
	cfg.Series.SampleEvery = 200 * time.Millisecond
	cfg.Runtime.TickInterval, cfg.Runtime.ResyncInterval = 100*time.Millisecond, 2*time.Second
	cfg.Runtime.BackoffBase, cfg.Runtime.BackoffMax = 200*time.Millisecond, 3*time.Second
	cfg.LB.Domain, cfg.LB.ProbeInterval, cfg.LB.UnhealthyAfter = "lb.test", 200*time.Millisecond, 3*time.Second
	if set != nil {
		set(&cfg)
	}
	a := apptest.Start(t, cfg)
	return &stack{t: t, b: a, app: a.App, db: a.Store(), q: a.Queue(), sup: a.Supervisor(), lb: a.Balancer(), base: a.URL()}
}

// call makes an API call with the operator key and decodes a JSON reply
// into out (when not nil); it fails the test unless the status is want.
func (s *stack) call(method, path string, body any, want int, out any) []byte {
	s.t.Helper()
	return apitest.Call(context.Background(), s.t, s.base, apiKey, method, path, body, out, want)
}

// endpoint creates a CPU template of image and an endpoint of it through
// the management API; extra adds endpoint fields.
func (s *stack) endpoint(image string, env map[string]string, extra map[string]any) store.Endpoint {
	s.t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	var tpl store.Template
	s.call("POST", "/v1/templates", map[string]any{"name": dockertest.Unique("tpl-"), "imageName": image,
		"isServerless": true, "env": env}, 200, &tpl)
	body := map[string]any{"templateId": tpl.ID, "computeType": "CPU", "workersMax": 2, "idleTimeout": 5}
	for k, v := range extra {
		body[k] = v
	}
	var ep store.Endpoint
	s.call("POST", "/v1/endpoints", body, 200, &ep)
	return ep
}

// eventually polls cond until it holds or waitLong passes.
func (s *stack) eventually(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startOn starts a Berth on data (an existing file when restarted), as
// newStack does but for tests that stop and start it again themselves;
// remove: its Stop removes its containers.
func startOn(t testing.TB, data string, remove bool) *apptest.Berth {
	t.Helper()
	return startOnAddr(t, data, "127.0.0.1:0", remove)
}

// startOnAddr is startOn on a given address: a restart on the same port is
// where running workers find Berth again.
func startOnAddr(t testing.TB, data, addr string, remove bool) *apptest.Berth {
	t.Helper()
	cfg := apptest.Config(t, apiKey)
	cfg.DataDir, cfg.Addr, cfg.Backend, cfg.RemoveContainersOnStop = data, addr, app.DockerRequired, remove
	cfg.HTTP.PingInterval = 2 * time.Second
	cfg.Runtime.TickInterval, cfg.Runtime.ResyncInterval = 100*time.Millisecond, 2*time.Second
	return apptest.Start(t, cfg)
}

// stopOn stops b (its file checked) before the test starts another Berth
// on the same data.
func stopOn(t testing.TB, b *apptest.Berth) {
	t.Helper()
	b.Stop()
}
