package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jonboulle/clockwork"

	"berth/app"
	"berth/httpapi"
	"berth/httplimit"
	"berth/internal/apptest"
	"berth/queue"
	"berth/store"
)

// testEnv is the one server harness of httpapi's tests: a Berth as berth
// serve composes it (app.New through internal/apptest — store, queue,
// balancer, cleaner, mgmt, no Docker), its bbolt file checked when the test
// ends. Unless raw, every request and response is held to the OpenAPI
// document Berth serves, by validating wrapped around the app's handler
// (REST v2 routes, which /v2/openapi.json describes, pass through).
//
// newEnv is the job-API end-to-end setting (a fake clock, workers attached
// with worker-env); newValidatingServer the management one (the real
// clock, short holds, the client also held to RunPod's documents).
type testEnv struct {
	t       *testing.T
	cfg     app.Config // the settings of every start
	raw     bool       // no validating wrapper: tests of the connection itself
	clock   *clockwork.FakeClock
	stopPod chan string         // workers the queue was told to stop (OnStopPod)
	holders map[string][]string // GPU holder → uuids, held again after each start (withFakeRuntime)

	berth *apptest.Berth
	app   *app.App
	api   *httpapi.Server
	db    *store.DB
	q     *queue.Service
	dir   string // data dir: berth.db, volumes/, prices.json
	base  string // http://127.0.0.1:PORT
	doc   *openapi3.T

	mu   sync.Mutex
	seen map[string]int // operation ids validated

	client *http.Client // nil: http.DefaultClient (conformant sets one)
}

// envOpt changes a testEnv's settings before it starts.
type envOpt func(*testEnv)

const (
	testKey  = "test-operator-key"
	adminKey = testKey // the key loadDoc reads the document with
)

// newEnv starts a Berth for the job API's end-to-end tests: a fake clock,
// lost workers after a minute, a one-second ping interval.
func newEnv(t *testing.T, opts ...envOpt) *testEnv {
	e := newTestEnvConfig(t)
	e.clock = clockwork.NewFakeClock()
	e.cfg.Clock = e.clock
	e.cfg.Queue.WorkerTimeout = time.Minute
	e.cfg.HTTP.PingInterval = time.Second
	e.startWith(opts)
	return e
}

// newValidatingServer starts a Berth for the management surfaces' tests:
// the real clock, job-take and /stream holds short, and the test's client
// also held to RunPod's documents (conformance_test.go).
func newValidatingServer(t *testing.T, opts ...envOpt) *testEnv {
	t.Helper()
	e := newTestEnvConfig(t)
	e.cfg.Queue.TakeHold = 100 * time.Millisecond
	e.cfg.HTTP.StreamHold = 50 * time.Millisecond
	e.startWith(opts)
	e.conformant(false)
	return e
}

func newTestEnvConfig(t *testing.T) *testEnv {
	e := &testEnv{t: t, seen: map[string]int{}, stopPod: make(chan string, 10)}
	e.cfg = apptest.Config(t, testKey)
	e.cfg.Version = "test"
	e.cfg.Queue.OnStopPod = func(ep, w string) {
		select {
		case e.stopPod <- w:
		default: // nobody watches
		}
	}
	return e
}

func (e *testEnv) startWith(opts []envOpt) {
	e.t.Helper()
	for _, o := range opts {
		o(e)
	}
	cfg := e.cfg
	if !e.raw {
		cfg.WrapHandler = func(h http.Handler) http.Handler {
			e.doc = loadDoc(e.t, h, "/v1/openapi.json")
			v2 := routerOf(docOps(loadDoc(e.t, h, "/v2/openapi.json")))
			return validatingSeen(e.t, e.doc, h, e.saw, v2)
		}
	}
	e.berth = apptest.Start(e.t, cfg)
	e.started()
}

// started takes the parts of the Berth just started.
func (e *testEnv) started() {
	e.t.Helper()
	b := e.berth
	e.app, e.api, e.db, e.q, e.dir, e.base = b.App, b.API(), b.Store(), b.Queue(), b.Config().DataDir, b.URL()
	for holder, ids := range e.holders {
		if err := b.GPUs().Restore(holder, ids); err != nil {
			e.t.Fatal(err)
		}
	}
}

// restart stops Berth (its file checked) and starts it again on the same
// data folder: a new port.
func (e *testEnv) restart() {
	e.t.Helper()
	e.berth.Restart()
	e.started()
}

func (e *testEnv) saw(op string) {
	e.mu.Lock()
	e.seen[op]++
	e.mu.Unlock()
}

// withHTTP changes the API's settings (package httpapi's Config inside
// app.Config; the composition's own fields are overwritten by app).
func withHTTP(mod func(*httpapi.Config)) envOpt {
	return func(e *testEnv) { mod(&e.cfg.HTTP) }
}

func withRateLimits(perWorker int) envOpt {
	return func(e *testEnv) { e.cfg.RateLimits, e.cfg.HTTP.RequestsPerWorker = true, perWorker }
}

// withLoopbackWebhooks lets webhooks reach httptest receivers on 127.0.0.1,
// which the default webhook policy forbids.
func withLoopbackWebhooks(e *testEnv) { e.cfg.WebhookAllow = []string{"127.0.0.0/8"} }

// rawHTTP changes the HTTP settings and serves without the validating
// wrapper, so the tests reach the real connection and its deadlines.
func rawHTTP(mod func(*httpapi.Config)) envOpt {
	return func(e *testEnv) { mod(&e.cfg.HTTP); e.raw = true }
}

// rawConn sets the connection limits (package httplimit) and serves
// without the validating wrapper.
func rawConn(l httplimit.Limits) envOpt {
	return func(e *testEnv) { e.cfg.Conn = l; e.raw = true }
}

func withDataDir(dir string) envOpt {
	return func(e *testEnv) { e.cfg.DataDir = dir }
}

type resp struct {
	code int
	hdr  http.Header
	body []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %q", r.code, r.body)
	}
	return m
}

// do sends a request with the Authorization header auth ("" none) through
// http.DefaultClient.
func (e *testEnv) do(method, path, auth string, body any) resp {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.base+path, bodyReader(e.t, body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{code: res.StatusCode, hdr: res.Header, body: b}
}

// admin calls with the operator's key and expects want.
func (e *testEnv) admin(method, path string, body any, want int) map[string]any {
	e.t.Helper()
	r := e.do(method, path, "Bearer "+adminKey, body)
	if r.code != want {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, r.code, r.body, want)
	}
	if r.code == http.StatusNoContent {
		return nil
	}
	if ct := r.hdr.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	return r.json(e.t)
}

// call sends a request with the operator's key through the env's client.
// body may be nil, a string or []byte (sent as is) or any value (sent as
// JSON).
func (e *testEnv) call(method, path string, body any) (int, []byte) {
	return e.callWith(method, path, body, map[string]string{"Authorization": "Bearer " + testKey})
}

func (e *testEnv) callWith(method, path string, body any, headers map[string]string) (int, []byte) {
	e.t.Helper()
	rd := bodyReader(e.t, body)
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := e.client
	if client == nil {
		client = http.DefaultClient
	}
	res, err := client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.StatusCode, out
}

// bodyReader turns a test's request body (nil, string, []byte or a value
// to encode as JSON) into a reader.
func bodyReader(t *testing.T, body any) io.Reader {
	t.Helper()
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return strings.NewReader(b)
	case []byte:
		return bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.NewReader(raw)
	}
}
