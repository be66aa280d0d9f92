package apitest

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
	"berth/runtime/fake"
	"berth/store"
)

// Env is the one server harness of the HTTP API's tests (package httpapi's
// and its v1api and v2api's): a Berth as berth serve composes it (app.New
// through internal/apptest — store, queue, balancer, cleaner, mgmt, no
// Docker), its bbolt file checked when the test ends. Unless Raw, every
// request and response is held to the OpenAPI document Berth serves, by
// Validating wrapped around the app's handler (app.Config.WrapHandler; REST
// v2 routes, which /v2/openapi.json describes, pass through).
//
// NewJobEnv is the job API's end-to-end setting (a fake clock, workers
// attached with worker-env); NewValidating the management one (the real
// clock, short holds, the client also held to RunPod's documents).
type Env struct {
	T       *testing.T
	Cfg     app.Config // the settings of every start
	Raw     bool       // no validating wrapper: tests of the connection itself
	Clock   *clockwork.FakeClock
	StopPod chan string   // workers the queue was told to stop (OnStopPod)
	Fake    *fake.Backend // the backend of WithFake, nil without

	Berth *apptest.Berth
	App   *app.App
	API   *httpapi.Server
	DB    *store.DB
	Q     *queue.Service
	Dir   string // data dir: berth.db, volumes/, prices.json
	Base  string // http://127.0.0.1:PORT
	Doc   *openapi3.T

	mu   sync.Mutex
	seen map[string]int // operation ids validated

	Client *http.Client // nil: http.DefaultClient (Conformant sets one)
}

// Option changes an Env's settings before it starts.
type Option func(*Env)

// Key is the operator's key of every Env (LoadDoc reads the document with
// it).
const Key = "test-operator-key"

// NewJobEnv starts a Berth for the job API's end-to-end tests: a fake
// clock, lost workers after a minute, a one-second ping interval.
func NewJobEnv(t *testing.T, opts ...Option) *Env {
	t.Helper()
	e := NewConfig(t)
	e.Clock = clockwork.NewFakeClock()
	e.Cfg.Clock = e.Clock
	e.Cfg.Queue.WorkerTimeout = time.Minute
	e.Cfg.HTTP.PingInterval = time.Second
	e.Start(opts...)
	return e
}

// NewValidating starts a Berth for the management surfaces' tests: the
// real clock, job-take and /stream holds short, and the test's client also
// held to RunPod's documents (Conformant).
func NewValidating(t *testing.T, opts ...Option) *Env {
	t.Helper()
	e := NewConfig(t)
	e.Cfg.Queue.TakeHold = 100 * time.Millisecond
	e.Cfg.HTTP.StreamHold = 50 * time.Millisecond
	e.Start(opts...)
	e.Conformant(false)
	return e
}

// NewConfig is an Env not yet started: apptest's settings, the Key, version
// "test".
func NewConfig(t *testing.T) *Env {
	e := &Env{T: t, seen: map[string]int{}, StopPod: make(chan string, 10)}
	e.Cfg = apptest.Config(t, Key)
	e.Cfg.Version = "test"
	e.Cfg.Queue.OnStopPod = func(ep, w string) {
		select {
		case e.StopPod <- w:
		default: // nobody watches
		}
	}
	return e
}

// Start applies opts and starts Berth; it is stopped (file checked) when
// the test ends.
func (e *Env) Start(opts ...Option) {
	e.T.Helper()
	for _, o := range opts {
		o(e)
	}
	cfg := e.Cfg
	if !e.Raw {
		cfg.WrapHandler = func(h http.Handler) http.Handler {
			e.Doc = LoadDoc(e.T, h, "/v1/openapi.json")
			v2 := RouterOf(DocOps(LoadDoc(e.T, h, "/v2/openapi.json")))
			return Validating(e.T, e.Doc, h, e.saw, v2)
		}
	}
	e.Berth = apptest.Start(e.T, cfg)
	e.started()
}

// started takes the parts of the Berth just started.
func (e *Env) started() {
	e.T.Helper()
	b := e.Berth
	e.App, e.API, e.DB, e.Q, e.Dir, e.Base = b.App, b.API(), b.Store(), b.Queue(), b.Config().DataDir, b.URL()
}

// Restart stops Berth (its file checked) and starts it again on the same
// data folder: a new port.
func (e *Env) Restart() {
	e.T.Helper()
	e.Berth.Restart()
	e.started()
}

func (e *Env) saw(op string) {
	e.mu.Lock()
	e.seen[op]++
	e.mu.Unlock()
}

// Seen is how many exchanges of operation op the validator checked.
func (e *Env) Seen(op string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[op]
}

// WithHTTP changes the API's settings (app.Config.HTTP; the rest of
// httpapi.Config is the composition's).
func WithHTTP(mod func(*httpapi.Settings)) Option {
	return func(e *Env) { mod(&e.Cfg.HTTP) }
}

// WithRateLimits turns the spec's rate limits on, perWorker requests a
// worker may make.
func WithRateLimits(perWorker int) Option {
	return func(e *Env) { e.Cfg.RateLimits, e.Cfg.HTTP.RequestsPerWorker = true, perWorker }
}

// WithLoopbackWebhooks lets webhooks reach httptest receivers on
// 127.0.0.1, which the default webhook policy forbids.
func WithLoopbackWebhooks(e *Env) { e.Cfg.WebhookAllow = []string{"127.0.0.0/8"} }

// RawHTTP changes the HTTP settings and serves without the validating
// wrapper, so the tests reach the real connection and its deadlines.
func RawHTTP(mod func(*httpapi.Settings)) Option {
	return func(e *Env) { mod(&e.Cfg.HTTP); e.Raw = true }
}

// Unvalidated serves without the validating wrapper.
func Unvalidated(e *Env) { e.Raw = true }

// RawConn sets the connection limits (package httplimit) and serves
// without the validating wrapper.
func RawConn(l httplimit.Limits) Option {
	return func(e *Env) { e.Cfg.Conn = l; e.Raw = true }
}

// WithDataDir keeps Berth's data in dir.
func WithDataDir(dir string) Option {
	return func(e *Env) { e.Cfg.DataDir = dir }
}

// Resp is an answer: status, header and body.
type Resp struct {
	Code int
	Hdr  http.Header
	Body []byte
}

// JSON decodes the body as a JSON object, failing t if it is not one.
func (r Resp) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %q", r.Code, r.Body)
	}
	return m
}

// Do sends a request with the Authorization header auth ("" none) through
// http.DefaultClient.
func (e *Env) Do(method, path, auth string, body any) Resp {
	e.T.Helper()
	req, _ := http.NewRequest(method, e.Base+path, BodyReader(e.T, body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return Resp{Code: res.StatusCode, Hdr: res.Header, Body: b}
}

// Admin calls with the operator's key and expects want.
func (e *Env) Admin(method, path string, body any, want int) map[string]any {
	e.T.Helper()
	r := e.Do(method, path, "Bearer "+Key, body)
	if r.Code != want {
		e.T.Fatalf("%s %s: %d %s, want %d", method, path, r.Code, r.Body, want)
	}
	if r.Code == http.StatusNoContent {
		return nil
	}
	if ct := r.Hdr.Get("Content-Type"); ct != "application/json" {
		e.T.Fatalf("%s %s: content type %q", method, path, ct)
	}
	return r.JSON(e.T)
}

// Call sends a request with the operator's key through the env's client.
// body may be nil, a string or []byte (sent as is) or any value (sent as
// JSON).
func (e *Env) Call(method, path string, body any) (int, []byte) {
	return e.CallWith(method, path, body, map[string]string{"Authorization": "Bearer " + Key})
}

// CallWith is Call with the headers given instead of the key.
func (e *Env) CallWith(method, path string, body any, headers map[string]string) (int, []byte) {
	e.T.Helper()
	rd := BodyReader(e.T, body)
	req, err := http.NewRequest(method, e.Base+path, rd)
	if err != nil {
		e.T.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := e.Client
	if client == nil {
		client = http.DefaultClient
	}
	res, err := client.Do(req)
	if err != nil {
		e.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		e.T.Fatal(err)
	}
	return res.StatusCode, out
}

// BodyReader turns a test's request body (nil, string, []byte or a value
// to encode as JSON) into a reader.
func BodyReader(t testing.TB, body any) io.Reader {
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
