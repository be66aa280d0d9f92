package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth/httpapi"
	"berth/internal/dockertest"
	"berth/lbproxy"
	"berth/mgmt"
	"berth/queue"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/store"
	"berth/worker"
)

const (
	apiKey = "e2e-key"
	// waitLong bounds every wait for a container-level event (generous:
	// the tests run on a loaded machine).
	waitLong = 90 * time.Second
)

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// stack is one Berth wired as berth serve wires it (store, queue, HTTP API,
// container runtime), on its own Docker instance id, serving on every
// interface so containers reach it through host.docker.internal.
type stack struct {
	t    testing.TB
	db   *store.DB
	q    *queue.Service
	d    *docker.Docker
	sup  atomic.Pointer[runtime.Supervisor]
	api  *httpapi.Server
	lb   *lbproxy.Balancer
	base string // http://127.0.0.1:PORT
	inst string
}

func newStack(t testing.TB) *stack {
	t.Helper()
	dockertest.Require(t)
	s := &stack{t: t, inst: dockertest.Unique("e2e-")}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := docker.Connect(ctx, log)
	if err != nil {
		t.Fatalf("docker.Connect: %v", err)
	}
	s.d = d
	t.Cleanup(func() { _ = d.Close() })

	db, err := store.Open(filepath.Join(t.TempDir(), "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s.db = db
	s.q = queue.New(db, queue.Config{Logger: log,
		OnQueueChange: func(id string) {
			if sv := s.sup.Load(); sv != nil {
				sv.Notify(id)
			}
		},
		OnStopPod: func(ep, w string) {
			if sv := s.sup.Load(); sv != nil {
				sv.Recycle(ep, w)
			}
		},
	})
	if err := s.q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.q.Stop)

	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	s.base = fmt.Sprintf("http://127.0.0.1:%d", port)

	// The load-balancing proxy, wired as berth serve wires it (lbwire.go).
	var apiPtr atomic.Pointer[httpapi.Server]
	s.lb = lbproxy.New(lbproxy.Config{Logger: log, Domain: "lb.test", ProbeInterval: 200 * time.Millisecond,
		UnhealthyAfter: 3 * time.Second,
		Endpoint: func(id string) (store.Endpoint, error) {
			var e store.Endpoint
			return e, db.View(func(tx *store.Tx) error { return tx.Get(store.Endpoints, id, &e) })
		},
		WorkerNet: func(ctx context.Context, id string) (lbproxy.WorkerNet, error) {
			sv := s.sup.Load()
			if sv == nil {
				return lbproxy.WorkerNet{}, context.Canceled
			}
			n, err := sv.WorkerNet(ctx, id)
			return lbproxy.WorkerNet{IP: n.IP, Env: n.Env}, err
		},
		Wake: func(ep string) {
			if sv := s.sup.Load(); sv != nil {
				sv.Notify(ep)
			}
		},
		Authorize: func(r *http.Request) bool { a := apiPtr.Load(); return a != nil && a.Authorized(r) },
	})
	s.lb.Start()
	t.Cleanup(s.lb.Stop)

	backend, err := docker.NewBackend(d, docker.Config{Instance: s.inst, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := runtime.New(runtime.Config{
		Backend: backend, Queue: s.lb.Queue(s.q), Logger: log,
		Endpoints: func() ([]store.Endpoint, error) {
			var out []store.Endpoint
			err := db.Scan(store.Endpoints, func(_ string, raw []byte) error {
				var e store.Endpoint
				if err := json.Unmarshal(raw, &e); err != nil {
					return err
				}
				out = append(out, e)
				return nil
			})
			return out, err
		},
		Template: func(id string) (store.Template, error) {
			var tp store.Template
			return tp, db.View(func(tx *store.Tx) error { return tx.Get(store.Templates, id, &tp) })
		},
		WorkerBaseURL: fmt.Sprintf("http://host.docker.internal:%d", port),
		WorkerEnv: func(base, ep, w, key string) map[string]string {
			return worker.PlatformEnv(base, ep, w, key, 2000)
		},
		TickInterval: 100 * time.Millisecond, ResyncInterval: 2 * time.Second,
		BackoffBase: 200 * time.Millisecond, BackoffMax: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Registered before Start's cleanup so it runs after it: no container
	// outlives the test.
	t.Cleanup(s.removeContainers)
	if err := sup.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s.sup.Store(sup)
	t.Cleanup(sup.Stop)

	cfg := httpapi.Config{Store: db, Queue: s.q, Logger: log, APIKeyHash: httpapi.HashKey(apiKey), RateLimits: true,
		Workers: sup.WorkerCounts, EndpointChanged: sup.Notify, EndpointDeleted: sup.Notify,
		WorkerInfo: func(ep string) []mgmt.WorkerInfo {
			var out []mgmt.WorkerInfo
			for _, w := range sup.Workers(ep) {
				out = append(out, mgmt.WorkerInfo{ID: w.WorkerID, State: w.State, Version: w.Version})
			}
			return out
		}}
	s.api = httpapi.New(cfg)
	apiPtr.Store(s.api)
	srv := &http.Server{Handler: s.lb.Handler(s.api.Handler())}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *stack) removeContainers() {
	if sv := s.sup.Load(); sv != nil {
		sv.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	infos, err := s.d.List(ctx, s.inst)
	if err != nil {
		s.t.Errorf("list containers: %v", err)
		return
	}
	for _, in := range infos {
		if err := s.d.Remove(ctx, in.ID, true); err != nil {
			s.t.Errorf("remove %s: %v", in.ID, err)
		}
	}
}

// call makes an API call with the operator key and decodes a JSON reply
// into out (when not nil); it fails the test unless the status is want.
func (s *stack) call(method, path string, body any, want int, out any) []byte {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %s, want %d: %s", method, path, resp.Status, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return b
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
