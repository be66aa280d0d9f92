package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- fake platform ----

type reply struct {
	status int
	ctype  string
	body   string
}

func jobReply(body string) reply { return reply{200, "application/json", body} }

type rec struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   string
	Note                   string // set for server-side notes such as "take-aborted"
}

type platform struct {
	srv        *httptest.Server
	takes      chan reply
	stops      chan reply
	doneStatus func(jobID string, attempt int) int

	mu       sync.Mutex
	reqs     []rec
	changed  chan struct{}
	attempts map[string]int
}

const waitLimit = 10 * time.Second // failure guard only, never used to synchronise

func newPlatform(t *testing.T) *platform {
	t.Helper()
	p := &platform{
		takes:    make(chan reply, 100),
		stops:    make(chan reply, 100),
		changed:  make(chan struct{}),
		attempts: map[string]int{},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() { p.srv.CloseClientConnections(); p.srv.Close() })
	return p
}

func (p *platform) add(r rec) {
	p.mu.Lock()
	p.reqs = append(p.reqs, r)
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *platform) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.add(rec{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(body)})
	switch {
	case strings.Contains(r.URL.Path, "/job-take"):
		p.hold(w, r, p.takes, "take-aborted")
	case strings.Contains(r.URL.Path, "/job-stop/"):
		p.hold(w, r, p.stops, "stop-aborted")
	case strings.Contains(r.URL.Path, "/job-done/"):
		status := 200
		if p.doneStatus != nil {
			id := path.Base(r.URL.Path)
			p.mu.Lock()
			p.attempts[id]++
			n := p.attempts[id]
			p.mu.Unlock()
			status = p.doneStatus(id, n)
		}
		w.WriteHeader(status)
	default:
		w.WriteHeader(200)
	}
}

// hold is a long poll: it answers with the next queued reply, or notes that the
// client gave up.
func (p *platform) hold(w http.ResponseWriter, r *http.Request, ch chan reply, abortNote string) {
	select {
	case rep := <-ch:
		if rep.ctype != "" {
			w.Header().Set("Content-Type", rep.ctype)
		}
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
	case <-r.Context().Done():
		p.add(rec{Note: abortNote, Path: r.URL.Path})
	case <-time.After(waitLimit):
		w.WriteHeader(http.StatusNoContent)
	}
}

func (p *platform) dump() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for i, r := range p.reqs {
		fmt.Fprintf(&b, "%3d %s %s %s?%s %s\n", i, r.Note, r.Method, r.Path, r.RawQuery, r.Body)
	}
	return b.String()
}

func (p *platform) snapshot() []rec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]rec(nil), p.reqs...)
}

// waitFrom returns the first recorded request at index >= from matching pred,
// waiting for it to arrive.
func (p *platform) waitFrom(t *testing.T, from int, what string, pred func(rec) bool) (int, rec) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		for i := from; i < len(p.reqs); i++ {
			if pred(p.reqs[i]) {
				r := p.reqs[i]
				p.mu.Unlock()
				return i, r
			}
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; requests:\n%s", what, p.dump())
		}
	}
}

func isTake(r rec) bool {
	return r.Note == "" && (strings.Contains(r.Path, "/job-take/") || strings.Contains(r.Path, "/job-take-batch/"))
}
func isStop(r rec) bool { return r.Note == "" && strings.Contains(r.Path, "/job-stop/") }
func isPing(r rec) bool { return r.Note == "" && strings.Contains(r.Path, "/ping/") }
func isDone(id string) func(rec) bool {
	return func(r rec) bool { return r.Note == "" && r.Path == "/v2/ep/job-done/w1/"+id }
}
func isFinal(id string) func(rec) bool {
	return func(r rec) bool { return isDone(id)(r) && !strings.Contains(r.Body, `"status": "IN_PROGRESS"`) }
}
func isChunk(id string) func(rec) bool {
	return func(r rec) bool { return r.Note == "" && r.Path == "/v2/ep/job-stream/w1/"+id }
}

func (p *platform) envFunc(extra map[string]string) func(string) string {
	m := map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB":     p.srv.URL + "/v2/ep/job-take/$ID?gpu=TEST",
		"RUNPOD_WEBHOOK_POST_OUTPUT": p.srv.URL + "/v2/ep/job-done/$RUNPOD_POD_ID/$ID?gpu=TEST",
		"RUNPOD_WEBHOOK_POST_STREAM": p.srv.URL + "/v2/ep/job-stream/$RUNPOD_POD_ID/$ID?gpu=TEST",
		"RUNPOD_WEBHOOK_PING":        p.srv.URL + "/v2/ep/ping/$RUNPOD_POD_ID",
		"RUNPOD_AI_API_KEY":          "secret",
		"RUNPOD_POD_ID":              "w1",
		"RUNPOD_PING_INTERVAL":       "3600000",
		"RUNPOD_POD_HOSTNAME":        "host-1",
	}
	for k, v := range extra {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (w *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-w.done:
		return w.err
	case <-time.After(waitLimit):
		t.Fatal("Start did not return")
		return nil
	}
}

func startWorker(t *testing.T, p *platform, cfg Config, env map[string]string) *running {
	t.Helper()
	cfg.Env = p.envFunc(env)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.RetryBaseDelay = durOr(cfg.RetryBaseDelay, time.Millisecond)
	cfg.StopPollMinDelay = durOr(cfg.StopPollMinDelay, time.Millisecond)
	cfg.TooManyRequestsDelay = durOr(cfg.TooManyRequestsDelay, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	w := &running{cancel: cancel, done: make(chan struct{})}
	go func() { w.err = Start(ctx, cfg); close(w.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-w.done:
			if w.err != nil {
				t.Errorf("Start returned %v", w.err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Start did not return after cancel")
		}
	})
	return w
}

// recv receives from ch, failing the test if nothing arrives in time.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting on a channel")
	}
	var zero T
	return zero
}

func wantHeader(t *testing.T, r rec, key, want string) {
	t.Helper()
	if got := r.Header.Values(key); len(got) != 1 || got[0] != want {
		t.Errorf("%s %s: header %s = %q, want %q", r.Method, r.Path, key, got, want)
	}
}

// ---- tests ----

type panicky struct{}

func TestResultBodies(t *testing.T) {
	tests := []struct {
		name    string
		out     any
		err     error
		panic   bool
		refresh bool
		want    string
	}{
		{name: "string", out: "hi", want: `{"output": "hi"}`},
		{name: "number", out: 42, want: `{"output": 42}`},
		{name: "nil", out: nil, want: `{"output": null}`},
		{name: "bool", out: false, want: `{"output": false}`},
		{name: "list", out: []any{1, "a", map[string]any{"b": true}}, want: `{"output": [1, "a", {"b": true}]}`},
		{name: "dict", out: map[string]any{"x": 1, "y": "z"}, want: `{"output": {"x": 1, "y": "z"}}`},
		{name: "typed map is a dict", out: map[string]int{"x": 1}, want: `{"output": {"x": 1}}`},
		{name: "struct is not a dict", out: struct {
			Error string `json:"error"`
		}{"e"}, want: `{"output": {"error": "e"}}`},
		{name: "utf8 and html kept", out: "héllo <a&b>", want: `{"output": "héllo <a&b>"}`},
		{name: "error key", out: map[string]any{"error": "custom failure", "detail": 1}, want: `{"output": {"detail": 1}, "error": "custom failure"}`},
		{name: "error key only", out: map[string]any{"error": "boom"}, want: `{"error": "boom"}`},
		{name: "non-string error key sent as-is", out: map[string]any{"error": map[string]any{"code": 7}, "a": 1}, want: `{"output": {"a": 1}, "error": {"code": 7}}`},
		{name: "falsy error key popped", out: map[string]any{"error": "", "a": 1}, want: `{"output": {"a": 1}}`},
		{name: "refresh_worker", out: map[string]any{"x": 1, "refresh_worker": true}, want: `{"output": {"x": 1}, "stopPod": true}`},
		{name: "refresh_worker false popped", out: map[string]any{"x": 1, "refresh_worker": false}, want: `{"output": {"x": 1}}`},
		{name: "empty map", out: map[string]any{}, want: `{}`},
		{name: "start config refresh_worker", out: "v", refresh: true, want: `{"output": "v", "stopPod": true}`},
		{name: "returned error", err: errors.New("boom")},
		{name: "panic", panic: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPlatform(t)
			h := func(ctx context.Context, job *Job) (any, error) {
				if tc.panic {
					panic(panicky{})
				}
				return tc.out, tc.err
			}
			w := startWorker(t, p, Config{Handler: h, RefreshWorker: tc.refresh}, nil)
			p.takes <- jobReply(`{"id":"job-1","input":{"a":1}}`)
			_, r := p.waitFrom(t, 0, "job-done", isDone("job-1"))

			if r.Method != http.MethodPost || r.RawQuery != "gpu=TEST&isStream=false" {
				t.Errorf("job-done request %s ?%s", r.Method, r.RawQuery)
			}
			wantHeader(t, r, "Authorization", "secret")
			wantHeader(t, r, "Content-Type", "application/x-www-form-urlencoded")
			wantHeader(t, r, "Charset", "utf-8")
			wantHeader(t, r, "X-Request-Id", "job-1")
			if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "RunPod-Python-SDK/berth-go (") || !strings.Contains(ua, ") Language/Go ") {
				t.Errorf("User-Agent %q", ua)
			}

			switch {
			case tc.err != nil || tc.panic:
				var outer map[string]string
				if err := json.Unmarshal([]byte(r.Body), &outer); err != nil || len(outer) != 1 {
					t.Fatalf("error body %s: %v", r.Body, err)
				}
				var info map[string]string
				if err := json.Unmarshal([]byte(outer["error"]), &info); err != nil {
					t.Fatalf("error string %q: %v", outer["error"], err)
				}
				wantType, wantMsg := "<class 'GoError'>", "boom"
				if tc.panic {
					wantType, wantMsg = "<class 'GoPanic'>", "{}"
				}
				if info["error_type"] != wantType || info["error_message"] != wantMsg || info["hostname"] != "host-1" ||
					info["worker_id"] != "w1" || info["runpod_version"] != "berth-go" || info["error_traceback"] == "" {
					t.Errorf("error info %v", info)
				}
				if !strings.HasPrefix(outer["error"], `{"error_type": "`+wantType+`", "error_message": `) {
					t.Errorf("error string not in json.dumps form: %q", outer["error"])
				}
			default:
				if r.Body != tc.want {
					t.Errorf("body %s, want %s", r.Body, tc.want)
				}
			}
			if tc.refresh {
				if err := w.wait(t); err != nil {
					t.Errorf("Start: %v", err)
				}
			}
		})
	}
}

func TestJobTakeRequestsAndPreviousRequestID(t *testing.T) {
	p := newPlatform(t)
	var seen []*Job
	var mu sync.Mutex
	startWorker(t, p, Config{Handler: func(ctx context.Context, job *Job) (any, error) {
		mu.Lock()
		seen = append(seen, job)
		mu.Unlock()
		return "ok", nil
	}}, nil)

	i, r := p.waitFrom(t, 0, "first job-take", isTake)
	if r.Path != "/v2/ep/job-take/w1" || r.RawQuery != "gpu=TEST&job_in_progress=0" {
		t.Errorf("first job-take %s?%s", r.Path, r.RawQuery)
	}
	wantHeader(t, r, "Authorization", "secret")
	wantHeader(t, r, "Content-Type", "application/json")
	if got := r.Header.Get("X-Request-Id"); got != "" {
		t.Errorf("first job-take X-Request-ID %q, want none", got)
	}
	if !strings.HasPrefix(r.Header.Get("User-Agent"), "RunPod-Python-SDK/berth-go") {
		t.Errorf("User-Agent %q", r.Header.Get("User-Agent"))
	}

	for _, id := range []string{"a", "b"} {
		p.takes <- jobReply(`{"id":"` + id + `","input":{},"webhook":"http://hook","s3Config":{"bucket":"x"},"policy":{"ttl":5},"extra":[1]}`)
		i, _ = p.waitFrom(t, i, "job-done "+id, isDone(id))
		i, r = p.waitFrom(t, i, "job-take after "+id, isTake)
		if r.RawQuery != "gpu=TEST&job_in_progress=0" {
			t.Errorf("job-take after %s: ?%s", id, r.RawQuery)
		}
		// Quirk: the shared session carries the previous job's id.
		wantHeader(t, r, "X-Request-Id", id)
		wantHeader(t, r, "Authorization", "secret")
	}

	mu.Lock()
	defer mu.Unlock()
	j := seen[0]
	if j.ID != "a" || string(j.Input) != "{}" || j.Webhook == nil || *j.Webhook != "http://hook" ||
		string(j.S3Config) != `{"bucket":"x"}` || string(j.Policy) != `{"ttl":5}` || string(j.Raw["extra"]) != "[1]" || len(j.Raw) != 6 {
		t.Errorf("job decoded as %+v", j)
	}
}

func TestJobTakeBatch(t *testing.T) {
	tests := []struct {
		name        string
		concurrency int
		first       string // path?query of the first job-take
		give        string
		second      string
	}{
		{"concurrency 3, one job", 3,
			"/v2/ep/job-take-batch/w1?gpu=TEST&batch_size=3&job_in_progress=0",
			`[{"id":"j1","input":{}}]`,
			"/v2/ep/job-take-batch/w1?gpu=TEST&batch_size=2&job_in_progress=1"},
		{"concurrency 3, two jobs", 3,
			"/v2/ep/job-take-batch/w1?gpu=TEST&batch_size=3&job_in_progress=0",
			`[{"id":"j1","input":{}},{"id":"j2","input":{}}]`,
			"/v2/ep/job-take/w1?gpu=TEST&job_in_progress=1"},
		{"concurrency 2, legacy object reply", 2,
			"/v2/ep/job-take-batch/w1?gpu=TEST&batch_size=2&job_in_progress=0",
			`{"id":"j1","input":{}}`,
			"/v2/ep/job-take/w1?gpu=TEST&job_in_progress=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPlatform(t)
			release := make(chan struct{})
			startWorker(t, p, Config{Concurrency: tc.concurrency, Handler: func(ctx context.Context, job *Job) (any, error) {
				<-release
				return job.ID, nil
			}}, nil)
			t.Cleanup(func() { close(release) })

			i, r := p.waitFrom(t, 0, "first job-take", isTake)
			if got := r.Path + "?" + r.RawQuery; got != tc.first {
				t.Errorf("first job-take %s, want %s", got, tc.first)
			}
			p.takes <- jobReply(tc.give)
			_, r = p.waitFrom(t, i+1, "second job-take", isTake)
			if got := r.Path + "?" + r.RawQuery; got != tc.second {
				t.Errorf("second job-take %s, want %s", got, tc.second)
			}
		})
	}
}

func TestJobTakeReplies(t *testing.T) {
	p := newPlatform(t)
	var mu sync.Mutex
	var handled []string
	startWorker(t, p, Config{Handler: func(ctx context.Context, job *Job) (any, error) {
		mu.Lock()
		handled = append(handled, job.ID)
		mu.Unlock()
		return "ok", nil
	}}, nil)
	replies := []reply{
		{status: 204},
		{status: 400, ctype: "application/json", body: `{"id":"bad400","input":{}}`},
		{status: 429},
		{status: 500, ctype: "application/json", body: `{"id":"bad500","input":{}}`},
		{status: 200, ctype: "text/plain", body: `{"id":"textplain","input":{}}`},
		{status: 200, ctype: "application/json"},
		{status: 200, ctype: "application/json", body: `not json`},
		{status: 200, ctype: "application/json", body: `"a string"`},
		jobReply(`{"id":"noinput"}`),
		jobReply(`{"id":"nullinput","input":null}`),
		jobReply(`{"input":{}}`),
		{status: 200, ctype: "application/json; charset=utf-8", body: `{"id":"ok","input":{}}`},
	}
	for _, rep := range replies {
		p.takes <- rep
	}
	i, _ := p.waitFrom(t, 0, "job-done ok", isDone("ok"))
	p.waitFrom(t, i, "job-take after ok", isTake)

	takes, dones := 0, 0
	for _, r := range p.snapshot() {
		if isTake(r) {
			takes++
		}
		if strings.Contains(r.Path, "/job-done/") {
			dones++
		}
	}
	if takes != len(replies)+1 || dones != 1 {
		t.Errorf("%d job-takes and %d job-dones; want %d and 1\n%s", takes, dones, len(replies)+1, p.dump())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 1 || handled[0] != "ok" {
		t.Errorf("handled %v", handled)
	}
}

func TestProgress(t *testing.T) {
	p := newPlatform(t)
	startWorker(t, p, Config{Handler: func(ctx context.Context, job *Job) (any, error) {
		if err := Progress(ctx, job, "p1"); err != nil {
			return nil, err
		}
		if err := Progress(ctx, job, map[string]any{"pct": 50}); err != nil {
			return nil, err
		}
		return "done", nil
	}}, nil)
	p.takes <- jobReply(`{"id":"j","input":{}}`)
	p.waitFrom(t, 0, "final job-done", isFinal("j"))

	var bodies []string
	for _, r := range p.snapshot() {
		if isDone("j")(r) {
			if r.RawQuery != "gpu=TEST&isStream=false" {
				t.Errorf("query %q", r.RawQuery)
			}
			wantHeader(t, r, "Content-Type", "application/x-www-form-urlencoded")
			wantHeader(t, r, "X-Request-Id", "j")
			wantHeader(t, r, "Authorization", "secret")
			bodies = append(bodies, r.Body)
		}
	}
	want := []string{
		`{"status": "IN_PROGRESS", "output": "p1"}`,
		`{"status": "IN_PROGRESS", "output": {"pct": 50}}`,
		`{"output": "done"}`,
	}
	if strings.Join(bodies, "\n") != strings.Join(want, "\n") {
		t.Errorf("job-done bodies:\n%s\nwant:\n%s", strings.Join(bodies, "\n"), strings.Join(want, "\n"))
	}

	if err := Progress(context.Background(), &Job{ID: "x"}, 1); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Progress on a foreign job: %v", err)
	}
}

func TestStreaming(t *testing.T) {
	chunks := []any{"a", "b", map[string]any{"n": 1}}
	yieldAll := func(yield func(any) error) error {
		for _, c := range chunks {
			if err := yield(c); err != nil {
				return err
			}
		}
		return nil
	}
	tests := []struct {
		name       string
		cfg        Config
		wantChunks []string
		wantFinal  string
	}{
		{
			name: "stream handler aggregate",
			cfg: Config{ReturnAggregateStream: true, StreamHandler: func(ctx context.Context, job *Job, yield func(any) error) error {
				return yieldAll(yield)
			}},
			wantChunks: []string{`{"output": "a"}`, `{"output": "b"}`, `{"output": {"n": 1}}`},
			wantFinal:  `{"output": ["a", "b", {"n": 1}]}`,
		},
		{
			name: "stream handler no aggregate",
			cfg: Config{StreamHandler: func(ctx context.Context, job *Job, yield func(any) error) error {
				return yieldAll(yield)
			}},
			wantChunks: []string{`{"output": "a"}`, `{"output": "b"}`, `{"output": {"n": 1}}`},
			wantFinal:  `{"output": []}`,
		},
		{
			name: "per-job Stream from Handler",
			cfg: Config{ReturnAggregateStream: true, Handler: func(ctx context.Context, job *Job) (any, error) {
				return Stream(yieldAll), nil
			}},
			wantChunks: []string{`{"output": "a"}`, `{"output": "b"}`, `{"output": {"n": 1}}`},
			wantFinal:  `{"output": ["a", "b", {"n": 1}]}`,
		},
		{
			name: "handler error",
			cfg: Config{ReturnAggregateStream: true, StreamHandler: func(ctx context.Context, job *Job, yield func(any) error) error {
				if err := yield("a"); err != nil {
					return err
				}
				return errors.New("broke")
			}},
			wantChunks: []string{`{"output": "a"}`},
			wantFinal:  `{"error": "handler: broke \ntraceback: "}`,
		},
		{
			name: "yielded error dict",
			cfg: Config{StreamHandler: func(ctx context.Context, job *Job, yield func(any) error) error {
				if err := yield("a"); err != nil {
					return err
				}
				if err := yield(map[string]any{"error": "bad chunk"}); err == nil {
					return errors.New("yield of an error dict did not stop the stream")
				}
				return nil
			}},
			wantChunks: []string{`{"output": "a"}`},
			wantFinal:  `{"error": "bad chunk"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPlatform(t)
			startWorker(t, p, tc.cfg, nil)
			p.takes <- jobReply(`{"id":"s","input":{}}`)
			_, final := p.waitFrom(t, 0, "final job-done", isDone("s"))
			if final.RawQuery != "gpu=TEST&isStream=true" || final.Body != tc.wantFinal {
				t.Errorf("final job-done ?%s %s, want isStream=true %s", final.RawQuery, final.Body, tc.wantFinal)
			}
			var got []string
			for _, r := range p.snapshot() {
				if isChunk("s")(r) {
					if r.RawQuery != "gpu=TEST&isStream=false" {
						t.Errorf("chunk query %q", r.RawQuery)
					}
					wantHeader(t, r, "Content-Type", "application/x-www-form-urlencoded")
					wantHeader(t, r, "X-Request-Id", "s")
					got = append(got, r.Body)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.wantChunks, "\n") {
				t.Errorf("chunks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.wantChunks, "\n"))
			}
		})
	}
}

func TestJobStop(t *testing.T) {
	for _, swallow := range []bool{false, true} {
		t.Run(fmt.Sprintf("swallow=%v", swallow), func(t *testing.T) {
			t.Parallel()
			p := newPlatform(t)
			started := make(chan string, 10)
			ctxErr := make(chan error, 1)
			startWorker(t, p, Config{Handler: func(ctx context.Context, job *Job) (any, error) {
				if job.ID == "a" {
					return "ok", nil
				}
				started <- job.ID
				<-ctx.Done()
				ctxErr <- ctx.Err()
				if swallow {
					return "swallowed", nil
				}
				return nil, fmt.Errorf("interrupted: %w", ctx.Err())
			}}, nil)

			_, stop0 := p.waitFrom(t, 0, "job-stop poll", isStop)
			if stop0.Path != "/v2/ep/job-stop/w1" || stop0.RawQuery != "gpu=TEST" {
				t.Errorf("job-stop %s?%s", stop0.Path, stop0.RawQuery)
			}
			wantHeader(t, stop0, "Authorization", "secret")
			wantHeader(t, stop0, "Content-Type", "application/json")

			p.takes <- jobReply(`{"id":"a","input":{}}`)
			i, _ := p.waitFrom(t, 0, "job-done a", isDone("a"))
			p.takes <- jobReply(`{"id":"b","input":{}}`)
			recv(t, started)
			mark := len(p.snapshot())
			p.stops <- jobReply(`{"jobsToStop":["zzz",7,"b"]}`)
			if err := recv(t, ctxErr); !errors.Is(err, context.Canceled) {
				t.Fatalf("handler ctx error %v", err)
			}

			// The next job-stop poll carries the previous job's id (quirk).
			_, stop1 := p.waitFrom(t, mark, "job-stop re-poll", isStop)
			wantHeader(t, stop1, "X-Request-Id", "a")

			if swallow {
				_, r := p.waitFrom(t, i, "job-done b", isDone("b"))
				if r.Body != `{"output": "swallowed"}` {
					t.Errorf("swallowed body %s", r.Body)
				}
				return
			}
			// The worker asks for the next job only after b is fully handled.
			_, r := p.waitFrom(t, mark, "job-take after b", isTake)
			if r.RawQuery != "gpu=TEST&job_in_progress=0" {
				t.Errorf("job-take after stop ?%s", r.RawQuery)
			}
			for _, r := range p.snapshot() {
				if isDone("b")(r) {
					t.Errorf("job-done sent for a stopped job: %s", r.Body)
				}
			}
		})
	}
}

func TestStreamStopped(t *testing.T) {
	p := newPlatform(t)
	started := make(chan struct{})
	startWorker(t, p, Config{StreamHandler: func(ctx context.Context, job *Job, yield func(any) error) error {
		if err := yield("first"); err != nil {
			return err
		}
		close(started)
		<-ctx.Done()
		return yield("late") // refused: returns the context error
	}}, nil)
	p.takes <- jobReply(`{"id":"s","input":{}}`)
	recv(t, started)
	p.stops <- jobReply(`{"jobsToStop":["s"]}`)
	_, r := p.waitFrom(t, 0, "job-take after stopped stream", func(r rec) bool {
		return isTake(r) && r.Header.Get("X-Request-Id") == "s"
	})
	_ = r
	chunks := 0
	for _, r := range p.snapshot() {
		if isDone("s")(r) {
			t.Errorf("job-done sent for a stopped stream: %s", r.Body)
		}
		if isChunk("s")(r) {
			chunks++
		}
	}
	if chunks != 1 {
		t.Errorf("%d chunks, want 1", chunks)
	}
}

func TestDisableStopChannel(t *testing.T) {
	p := newPlatform(t)
	startWorker(t, p, Config{DisableStopChannel: true, Handler: func(ctx context.Context, job *Job) (any, error) {
		return "ok", nil
	}}, nil)
	p.takes <- jobReply(`{"id":"a","input":{}}`)
	i, _ := p.waitFrom(t, 0, "job-done a", isDone("a"))
	p.waitFrom(t, i, "job-take after a", isTake)
	for _, r := range p.snapshot() {
		if isStop(r) {
			t.Errorf("job-stop polled although disabled: %s?%s", r.Path, r.RawQuery)
		}
	}
}

func TestHeartbeat(t *testing.T) {
	p := newPlatform(t)
	release := make(chan struct{})
	started := make(chan string, 2)
	startWorker(t, p, Config{Concurrency: 2, Handler: func(ctx context.Context, job *Job) (any, error) {
		started <- job.ID
		<-release
		return "ok", nil
	}}, map[string]string{"RUNPOD_PING_INTERVAL": "500"}) // below 1 s: 100 ms floor

	p.takes <- jobReply(`[{"id":"j1","input":{}},{"id":"j2","input":{}}]`)
	recv(t, started)
	recv(t, started)
	_, r := p.waitFrom(t, 0, "ping listing both jobs", func(r rec) bool {
		return isPing(r) && strings.Contains(r.RawQuery, "job_id=")
	})
	if r.Path != "/v2/ep/ping/w1" || r.RawQuery != "job_id=j1%2Cj2&runpod_version=berth-go" {
		t.Errorf("ping %s?%s", r.Path, r.RawQuery)
	}
	wantHeader(t, r, "Authorization", "secret")

	close(release)
	i, _ := p.waitFrom(t, 0, "job-done j1", isDone("j1"))
	j, _ := p.waitFrom(t, 0, "job-done j2", isDone("j2"))
	// job_id is omitted once nothing is in progress.
	p.waitFrom(t, max(i, j), "idle ping", func(x rec) bool { return isPing(x) && x.RawQuery == "runpod_version=berth-go" })
}

func TestHeartbeatNeedsKeyPodIDAndURL(t *testing.T) {
	tests := []struct {
		name  string
		unset string
		want  bool
	}{
		{"all set", "", true},
		{"no key", "RUNPOD_AI_API_KEY", false},
		{"no pod id", "RUNPOD_POD_ID", false},
		{"no ping url", "RUNPOD_WEBHOOK_PING", false},
	}
	p := newPlatform(t)
	for _, tc := range tests {
		env := map[string]string{}
		if tc.unset != "" {
			env[tc.unset] = ""
		}
		r, err := newRunner(Config{Handler: func(context.Context, *Job) (any, error) { return nil, nil }, Env: p.envFunc(env), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.pingURL != ""; got != tc.want {
			t.Errorf("%s: heartbeat enabled %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestJobDoneRetry(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int
		attempts int
	}{
		{"success", []int{200}, 1},
		{"5xx retried", []int{500, 502, 200}, 3},
		{"5xx then 4xx", []int{503, 404}, 2},
		{"4xx not retried", []int{400}, 1},
		// Unlike the SDK (3 attempts), a result is retried until answered:
		// Berth may be restarting (issue 28).
		{"retried past 3 until answered", []int{500, 502, 503, 504, 500, 429, 500, 200}, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPlatform(t)
			p.doneStatus = func(_ string, attempt int) int {
				if attempt > len(tc.statuses) {
					return 200
				}
				return tc.statuses[attempt-1]
			}
			startWorker(t, p, Config{Handler: func(ctx context.Context, job *Job) (any, error) { return 1, nil }}, nil)
			p.takes <- jobReply(`{"id":"j","input":{}}`)
			i, _ := p.waitFrom(t, 0, "job-done", isDone("j"))
			p.waitFrom(t, i, "job-take after the job", isTake)
			n := 0
			for _, r := range p.snapshot() {
				if isDone("j")(r) {
					n++
					if r.Body != `{"output": 1}` {
						t.Errorf("attempt body %s", r.Body)
					}
				}
			}
			if n != tc.attempts {
				t.Errorf("%d job-done attempts, want %d", n, tc.attempts)
			}
		})
	}
}

// TestResultRetryWindow: a result the platform never accepts is retried for
// the window and then given up (logged), and the worker takes jobs again.
// (That it is retried past the SDK's 3 attempts is TestJobDoneRetry's.)
func TestResultRetryWindow(t *testing.T) {
	p := newPlatform(t)
	p.doneStatus = func(string, int) int { return 503 }
	var logs syncBuffer
	startWorker(t, p, Config{
		Handler:           func(ctx context.Context, job *Job) (any, error) { return 1, nil },
		ResultRetryWindow: 200 * time.Millisecond,
		Logger:            NewLogger(func(string) string { return "" }, &logs),
	}, nil)
	p.takes <- jobReply(`{"id":"j","input":{}}`)
	i, _ := p.waitFrom(t, 0, "job-done", isDone("j"))
	p.waitFrom(t, i, "job-take after the given-up result", isTake)
	if out := logs.String(); !strings.Contains(out, "Failed to return job results. | ") {
		t.Errorf("log lacks the give-up line:\n%s", out)
	}
}

func TestGracefulShutdown(t *testing.T) {
	p := newPlatform(t)
	started := make(chan struct{})
	release := make(chan struct{})
	ctxErrAtEnd := make(chan error, 1)
	w := startWorker(t, p, Config{Concurrency: 2, Handler: func(ctx context.Context, job *Job) (any, error) {
		close(started)
		<-release
		ctxErrAtEnd <- ctx.Err()
		return job.ID + " done", nil
	}}, nil)

	i, _ := p.waitFrom(t, 0, "first job-take", isTake)
	p.takes <- jobReply(`[{"id":"j1","input":{}}]`)
	recv(t, started)
	i, _ = p.waitFrom(t, i+1, "pending job-take", isTake)

	w.cancel()
	p.waitFrom(t, i, "job-take aborted", func(r rec) bool { return r.Note == "take-aborted" })
	mark := len(p.snapshot())
	close(release)
	if err := recv(t, ctxErrAtEnd); err != nil {
		t.Errorf("shutdown cancelled the running job's context: %v", err)
	}
	if err := w.wait(t); err != nil {
		t.Errorf("Start: %v", err)
	}
	var doneBody string
	for k, r := range p.snapshot() {
		if isDone("j1")(r) {
			doneBody = r.Body
		}
		if k >= mark && isTake(r) {
			t.Errorf("job-take after shutdown: %s?%s", r.Path, r.RawQuery)
		}
	}
	if doneBody != `{"output": "j1 done"}` {
		t.Errorf("in-flight job reported %q", doneBody)
	}
}

func TestRefreshWorkerExits(t *testing.T) {
	p := newPlatform(t)
	w := startWorker(t, p, Config{RefreshWorker: true, Handler: func(ctx context.Context, job *Job) (any, error) {
		return nil, errors.New("x")
	}}, nil)
	p.takes <- jobReply(`{"id":"j","input":{}}`)
	if err := w.wait(t); err != nil {
		t.Fatalf("Start: %v", err)
	}
	_, r := p.waitFrom(t, 0, "job-done", isDone("j"))
	if !strings.HasSuffix(r.Body, `, "stopPod": true}`) || !strings.HasPrefix(r.Body, `{"error": "{`) {
		t.Errorf("body %s", r.Body)
	}
}

func TestStartConfigErrors(t *testing.T) {
	h := func(context.Context, *Job) (any, error) { return nil, nil }
	sh := func(context.Context, *Job, func(any) error) error { return nil }
	quiet := slog.New(slog.DiscardHandler)
	env := func(string) string { return "" }
	if err := Start(context.Background(), Config{Handler: h, Env: env, Logger: quiet}); !errors.Is(err, ErrLocalMode) {
		t.Errorf("no GET_JOB: %v", err)
	}
	if err := Start(context.Background(), Config{Env: env, Logger: quiet}); err == nil {
		t.Error("no handler accepted")
	}
	if err := Start(context.Background(), Config{Handler: h, StreamHandler: sh, Env: env, Logger: quiet}); err == nil {
		t.Error("two handlers accepted")
	}
}

func TestURLTemplates(t *testing.T) {
	tests := []struct {
		name                                  string
		env                                   map[string]string
		take, stop, done, stream, ping, jobID string
	}{
		{
			name: "production templates",
			env: map[string]string{
				"RUNPOD_WEBHOOK_GET_JOB":     "http://h/v2/ep/job-take/$ID?gpu=X",
				"RUNPOD_WEBHOOK_POST_OUTPUT": "http://h/v2/ep/job-done/$RUNPOD_POD_ID/$ID?gpu=X",
				"RUNPOD_WEBHOOK_POST_STREAM": "http://h/v2/ep/job-stream/$RUNPOD_POD_ID/$ID?gpu=X",
				"RUNPOD_WEBHOOK_PING":        "http://h/v2/ep/ping/$RUNPOD_POD_ID?gpu=X",
				"RUNPOD_POD_ID":              "w1", "RUNPOD_AI_API_KEY": "k",
			},
			take: "http://h/v2/ep/job-take/w1?gpu=X", stop: "http://h/v2/ep/job-stop/w1?gpu=X",
			done: "http://h/v2/ep/job-done/w1/J?gpu=X&isStream=false", stream: "http://h/v2/ep/job-stream/w1/J?gpu=X&isStream=false",
			ping: "http://h/v2/ep/ping/w1?gpu=X",
		},
		{
			name: "$RUNPOD_POD_ID in GET_JOB is sent literally; no /job-take/ disables job-stop",
			env: map[string]string{
				"RUNPOD_WEBHOOK_GET_JOB": "http://h/take/$RUNPOD_POD_ID?",
				"RUNPOD_POD_ID":          "w1",
			},
			take: "http://h/take/$RUNPOD_POD_ID?", stop: "",
			done: "JOB_DONE_URL&isStream=false", stream: "JOB_STREAM_URL&isStream=false",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := newRunner(Config{Handler: func(context.Context, *Job) (any, error) { return nil, nil },
				Env: func(k string) string { return tc.env[k] }, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			got := []string{r.takeURL, r.stopURL, r.jobURL(r.doneURL, "J", false), r.jobURL(r.streamURL, "J", false), r.pingURL}
			want := []string{tc.take, tc.stop, tc.done, tc.stream, tc.ping}
			for k := range got {
				if got[k] != want[k] {
					t.Errorf("url %d = %q, want %q", k, got[k], want[k])
				}
			}
		})
	}
	// Without RUNPOD_POD_ID the worker id is a random uuid4.
	r, err := newRunner(Config{Handler: func(context.Context, *Job) (any, error) { return nil, nil },
		Env: func(k string) string {
			if k == "RUNPOD_WEBHOOK_GET_JOB" {
				return "http://h/job-take/$ID?"
			}
			return ""
		}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || len(r.workerID) != 36 || r.takeURL != "http://h/job-take/"+r.workerID+"?" || r.pingURL != "" {
		t.Errorf("random worker id %q, take %q, ping %q, err %v", r.workerID, r.takeURL, r.pingURL, err)
	}
}

func TestAppendQuery(t *testing.T) {
	tests := []struct{ u, want string }{
		{"http://h/ping/w1", "http://h/ping/w1?q=1"},
		{"http://h/ping/w1?", "http://h/ping/w1?q=1"},
		{"http://h/ping/w1?gpu=X", "http://h/ping/w1?gpu=X&q=1"},
	}
	for _, tc := range tests {
		if got := appendQuery(tc.u, "q=1"); got != tc.want {
			t.Errorf("appendQuery(%q) = %q, want %q", tc.u, got, tc.want)
		}
	}
}

func TestPingInterval(t *testing.T) {
	tests := []struct {
		env  string
		want time.Duration
	}{
		{"", 10 * time.Second},
		{"10000", 10 * time.Second},
		{"2500", 2 * time.Second},
		{"999", minPingInterval},
		{"0", minPingInterval},
		{"junk", 10 * time.Second},
	}
	for _, tc := range tests {
		r := &runner{env: func(string) string { return tc.env }}
		if got := r.pingInterval(); got != tc.want {
			t.Errorf("RUNPOD_PING_INTERVAL=%q: %v, want %v", tc.env, got, tc.want)
		}
	}
}

func TestPyDumps(t *testing.T) {
	tests := []struct {
		name  string
		v     any
		ascii bool
		want  string
	}{
		{"nested", map[string]any{"a": []any{1, "x,y: z"}, "b": map[string]any{}}, false, `{"a": [1, "x,y: z"], "b": {}}`},
		{"escapes", "q\"\\\n\t", false, `"q\"\\\n\t"`},
		{"utf8 kept", "é€😀", false, `"é€😀"`},
		{"ensure_ascii", "é€😀", true, `"\u00e9\u20ac\ud83d\ude00"`},
		{"html not escaped", "<&>", true, `"<&>"`},
		{"raw message compacted", json.RawMessage(`{ "a" : [1 ,2] }`), false, `{"a": [1, 2]}`},
	}
	for _, tc := range tests {
		got, err := pyDumps(tc.v, tc.ascii)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s (%v), want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestLogHandler(t *testing.T) {
	tests := []struct {
		name string
		json bool
		log  func(*slog.Logger)
		want string
	}{
		{"json with job", true, func(l *slog.Logger) { l.Info("Started", JobIDKey, "j1") },
			`{"requestId": "j1", "message": "Started", "level": "INFO"}` + "\n"},
		{"json without job", true, func(l *slog.Logger) { l.Warn("héllo", "n", 2) },
			`{"requestId": null, "message": "h\u00e9llo n=2", "level": "WARN"}` + "\n"},
		{"text with job", false, func(l *slog.Logger) { l.Error("Failed", JobIDKey, "j1") },
			"ERROR  | j1 | Failed\n"},
		{"text without job", false, func(l *slog.Logger) { l.With(JobIDKey, "j2").Debug("x") },
			"DEBUG  | j2 | x\n"},
	}
	for _, tc := range tests {
		var buf bytes.Buffer
		tc.log(slog.New(NewLogHandler(&buf, tc.json, slog.LevelDebug)))
		if buf.String() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, buf.String(), tc.want)
		}
	}
	var buf bytes.Buffer
	l := NewLogger(func(k string) string {
		return map[string]string{"RUNPOD_ENDPOINT_ID": "ep", "RUNPOD_LOG_LEVEL": "INFO"}[k]
	}, &buf)
	l.Debug("hidden")
	l.Info("shown")
	if buf.String() != `{"requestId": null, "message": "shown", "level": "INFO"}`+"\n" {
		t.Errorf("NewLogger: %q", buf.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the worker's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
