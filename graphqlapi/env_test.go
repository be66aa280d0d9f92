package graphqlapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth/app"
	"berth/gpu"
	"berth/internal/apptest"
	"berth/internal/clientkit"
	"berth/mgmt"
	"berth/queue"
	"berth/runtime/fake"
	"berth/store"
)

const testKey = "graphql-test-key"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is a Berth as berth serve composes it (package app), on a real bbolt
// file, without Docker: pods are refused (503) unless a test runs them on
// the in-memory backend (withFake), through Berth's own pod adapter.
type env struct {
	t     *testing.T
	dir   string
	berth *apptest.Berth
	app   *app.App
	db    *store.DB
	q     *queue.Service
	base  string // http://host:port of the server
	fake  *fake.Backend
}

type envOpt func(*env, *app.Config)

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	cfg := apptest.Config(t, testKey)
	cfg.Logger, cfg.Version = quiet, "test"
	cfg.Queue.TakeHold = 100 * time.Millisecond
	e := &env{t: t, dir: cfg.DataDir}
	for _, o := range opts {
		o(e, &cfg)
	}
	e.berth = apptest.Start(t, cfg)
	e.opened()
	return e
}

func (e *env) opened() {
	b := e.berth
	e.app, e.db, e.q, e.base = b.App, b.Store(), b.Queue(), b.URL()
}

// restart stops Berth and starts it again on the same data directory.
func (e *env) restart() {
	e.t.Helper()
	e.berth.Restart()
	e.opened()
}

// withGPUs gives the host these GPUs (as NVML would find them).
func withGPUs(devs ...gpu.Device) envOpt {
	return func(_ *env, c *app.Config) { c.DiscoverGPUs = func() ([]gpu.Device, error) { return devs, nil } }
}

// hold gives GPUs to a holder, as the runtime does for a worker or pod.
func (e *env) hold(holder string, uuids ...string) {
	e.t.Helper()
	if err := e.app.GPUs().Restore(holder, uuids); err != nil {
		e.t.Fatal(err)
	}
}

// withFake runs pods on the in-memory backend (runtime/fake, e.fake)
// with devs as the host's GPUs and images running until stopped.
func withFake(devs []gpu.Device, images ...string) envOpt {
	return func(e *env, c *app.Config) { e.fake = apptest.OnFake(e.t, c, devs, images...) }
}

// withPrices is the operator's price table (prices.json in the data
// directory).
func withPrices(t *testing.T, p mgmt.Prices) envOpt {
	return func(_ *env, c *app.Config) {
		b, _ := json.Marshal(p)
		if err := os.WriteFile(filepath.Join(c.DataDir, mgmt.PricesFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// fixture reads a query document from testdata and fills its {{slots}}.
func fixture(t *testing.T, name string, slots ...string) string {
	t.Helper()
	return clientkit.Document(t, name, slots...)
}

// gqlReply is a GraphQL response; Raw keeps the body for key checks.
type gqlReply struct {
	Code   int
	Data   map[string]json.RawMessage
	Errors []struct {
		Message    string
		Path       []any
		Extensions map[string]any
	}
	Raw map[string]json.RawMessage
}

// post sends body as the tools do: POST /graphql, JSON, "Bearer <key>".
func (e *env) post(auth string, body any) gqlReply {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.base+"/graphql", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	r := gqlReply{Code: res.StatusCode}
	if err := json.Unmarshal(out, &r.Raw); err != nil {
		e.t.Fatalf("reply is not a JSON object: %d %s", res.StatusCode, out)
	}
	json.Unmarshal(out, &r)
	if _, ok := r.Raw["data"]; !ok {
		e.t.Errorf("reply without a data key (runpod-python needs it): %s", out)
	}
	return r
}

// python sends a document the way runpod-python does: {"query": ...} only.
func (e *env) python(query string) gqlReply {
	e.t.Helper()
	return e.post("Bearer "+testKey, map[string]any{"query": query})
}

// ctl sends a document the way runpodctl does: with a variables object.
func (e *env) ctl(query string, vars map[string]any) gqlReply {
	e.t.Helper()
	if vars == nil {
		vars = map[string]any{}
	}
	return e.post("Bearer "+testKey, map[string]any{"query": query, "variables": vars})
}

// ok checks a reply has no errors and decodes data[field] into v.
func (r gqlReply) ok(t *testing.T, field string, v any) {
	t.Helper()
	if r.Code != 200 || len(r.Errors) > 0 {
		t.Fatalf("%s: %d errors %+v", field, r.Code, r.Errors)
	}
	raw, found := r.Data[field]
	if !found {
		t.Fatalf("data has no %s: %v", field, r.Data)
	}
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v: %s", field, err, raw)
		}
	}
}

// refused checks a reply is one GraphQL error whose message holds each
// of words, with data[field] null.
func (r gqlReply) refused(t *testing.T, field string, words ...string) string {
	t.Helper()
	if r.Code != 200 || len(r.Errors) == 0 {
		t.Fatalf("%s: want an error, got %d %s", field, r.Code, r.Data[field])
	}
	msg := r.Errors[0].Message
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: error %q does not say %q", field, msg, w)
		}
	}
	if raw, found := r.Data[field]; found && string(raw) != "null" {
		t.Errorf("%s: refused but data is %s", field, raw)
	}
	return msg
}

// rest calls /v1 or the job API with the key.
func (e *env) rest(method, path string, body any, want int, v any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		e.t.Fatalf("%s %s: %d, want %d: %s", method, path, res.StatusCode, want, out)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, out)
		}
	}
}

// count is how many records a bucket holds.
func (e *env) count(bucket string) int {
	n := 0
	e.db.Scan(bucket, func(string, []byte) error { n++; return nil })
	return n
}
