package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Version is reported as runpod_version in pings and error reports and in
// the User-Agent.
const Version = "berth-go"

// ErrLocalMode is returned by [Start] when RUNPOD_WEBHOOK_GET_JOB is not set:
// runpod-python would run its local test mode, which this package does not
// implement.
var ErrLocalMode = errors.New("worker: RUNPOD_WEBHOOK_GET_JOB is not set; local test mode is not supported")

// ErrNotStarted is returned by [Progress] for a job that was not handed out by
// [Start].
var ErrNotStarted = errors.New("worker: job was not received from the platform by Start")

// Job is one job as handed out by job-take.
type Job struct {
	ID       string          `json:"id"`
	Input    json.RawMessage `json:"input"`
	Webhook  *string         `json:"webhook,omitempty"`
	S3Config json.RawMessage `json:"s3Config,omitempty"`
	Policy   json.RawMessage `json:"policy,omitempty"`
	// Raw holds every key of the job object as received (including id and
	// input), like the dict runpod-python hands to its handler.
	Raw map[string]json.RawMessage `json:"-"`

	r *runner
}

// Handler runs one job. The returned value is reported as {"output": v}
// (with the dict rules described in the package documentation); a returned
// error is reported like a Python exception. A returned [Stream] makes the job
// a streaming job.
type Handler func(ctx context.Context, job *Job) (any, error)

// StreamHandler runs one job as a stream, like a Python generator handler:
// each yield call sends one chunk on job-stream, in order. yield returns a
// non-nil error when the handler should stop (the job was stopped, or a
// yielded map carried an "error" key); the handler should then return.
type StreamHandler func(ctx context.Context, job *Job, yield func(chunk any) error) error

// Stream may be returned by a [Handler] to turn that one job into a streaming
// job. It is called once, on the handler's goroutine, after the handler
// returns; it should use the context the handler received.
type Stream func(yield func(chunk any) error) error

// Config configures [Start].
type Config struct {
	// Handler runs each job. Exactly one of Handler and StreamHandler must
	// be set.
	Handler Handler
	// StreamHandler makes every job a streaming job (job-done isStream=true).
	StreamHandler StreamHandler
	// ReturnAggregateStream makes the final job-done of a streaming job
	// carry every chunk ({"output": [c1, c2, ...]}) instead of {"output": []}.
	ReturnAggregateStream bool

	// Concurrency is the maximum number of jobs run at once (default 1).
	// Above 1 jobs are fetched with job-take-batch, like the SDK.
	Concurrency int
	// RefreshWorker adds "stopPod": true to every result and stops fetching
	// after the first job completes; Start then returns nil once running
	// jobs have reported (runpod's start config refresh_worker).
	RefreshWorker bool
	// DisableStopChannel emulates workers older than runpod-python 1.10,
	// which never poll job-stop.
	DisableStopChannel bool

	// Env reads environment variables (default os.Getenv).
	Env func(string) string
	// HTTPClient is used for every call to the platform (default: a new
	// client with no overall timeout; per-call timeouts are applied).
	HTTPClient *http.Client
	// Logger receives the worker's log lines (default [NewLogger] writing to
	// stdout).
	Logger *slog.Logger

	// RetryBaseDelay is the unit of the Fibonacci back-off between job-done
	// and job-stream attempts (delays 1, 1, 2 units, capped at 3 units) and of
	// the heartbeat retries. Default 1 s, like the SDK.
	RetryBaseDelay time.Duration
	// ResultRetryWindow bounds how long a finished job's result is retried
	// while the platform does not answer (default 10 minutes, the same bound
	// as every job-done request's timeout). runpod-python gives up after 3
	// attempts (about 4 s); this SDK outlasts a Berth restart.
	ResultRetryWindow time.Duration
	// StopPollMinDelay is the pause after an empty or failed job-stop reply
	// (default 1 s).
	StopPollMinDelay time.Duration
	// TooManyRequestsDelay is the pause after a 429 on job-take or job-stop
	// (default 5 s).
	TooManyRequestsDelay time.Duration
}

const (
	fetchTimeout      = 90 * time.Second
	postTimeout       = 600 * time.Second
	transportErrPause = 100 * time.Millisecond
	minPingInterval   = 100 * time.Millisecond
	maxPostAttempts   = 3
)

type jobState struct {
	job     *Job
	cancel  context.CancelFunc
	stopped atomic.Bool
}

type runner struct {
	cfg      Config
	env      func(string) string
	client   *http.Client
	log      *slog.Logger
	ua       string
	apiKey   string
	podIDEnv string // RUNPOD_POD_ID as set (may be empty)
	workerID string
	hostname string

	takeURL   string // GET_JOB with $ID replaced
	stopURL   string // derived job-stop URL; "" when disabled
	doneURL   string // POST_OUTPUT with $RUNPOD_POD_ID replaced
	streamURL string // POST_STREAM with $RUNPOD_POD_ID replaced
	pingURL   string // PING with $RUNPOD_POD_ID replaced; "" when no heartbeat

	concurrency  int
	retryBase    time.Duration
	resultWindow time.Duration
	stopDelay    time.Duration
	tooMany      time.Duration

	mu        sync.Mutex
	lastReqID string // the shared session's X-Request-ID
	inflight  map[string]*jobState
	order     []string // in-flight ids in arrival order

	slotFree  chan struct{}
	jobsWG    sync.WaitGroup
	stopFetch context.CancelFunc
}

// Start runs the worker until ctx is cancelled (or, with RefreshWorker, until
// the first job completes). On cancellation it stops fetching (aborting an
// in-flight job-take), lets running jobs finish and report with a context
// that is not cancelled, and returns nil. It returns an error only for an
// invalid configuration or [ErrLocalMode].
func Start(ctx context.Context, cfg Config) error {
	r, err := newRunner(cfg)
	if err != nil {
		return err
	}
	return r.run(ctx)
}

func newRunner(cfg Config) (*runner, error) {
	if (cfg.Handler == nil) == (cfg.StreamHandler == nil) {
		return nil, errors.New("worker: exactly one of Config.Handler and Config.StreamHandler must be set")
	}
	env := cfg.Env
	if env == nil {
		env = os.Getenv
	}
	r := &runner{
		cfg:          cfg,
		env:          env,
		client:       cfg.HTTPClient,
		log:          cfg.Logger,
		concurrency:  max(cfg.Concurrency, 1),
		retryBase:    durOr(cfg.RetryBaseDelay, time.Second),
		resultWindow: durOr(cfg.ResultRetryWindow, postTimeout),
		stopDelay:    durOr(cfg.StopPollMinDelay, time.Second),
		tooMany:      durOr(cfg.TooManyRequestsDelay, 5*time.Second),
		inflight:     map[string]*jobState{},
		slotFree:     make(chan struct{}, 1),
	}
	if r.client == nil {
		r.client = &http.Client{}
	}
	if r.log == nil {
		r.log = NewLogger(env, os.Stdout)
	}
	getJob := env("RUNPOD_WEBHOOK_GET_JOB")
	if getJob == "" {
		return nil, ErrLocalMode
	}
	r.apiKey = env("RUNPOD_AI_API_KEY")
	r.podIDEnv = env("RUNPOD_POD_ID")
	r.workerID = r.podIDEnv
	if r.workerID == "" {
		r.workerID = randomUUID()
	}
	r.hostname = env("RUNPOD_POD_HOSTNAME")
	if r.hostname == "" {
		r.hostname = "unknown"
	}
	r.ua = userAgent(env("RUNPOD_UA_INTEGRATION"))

	r.takeURL = strings.ReplaceAll(getJob, "$ID", r.workerID)
	if !cfg.DisableStopChannel {
		if strings.Contains(r.takeURL, "/job-take/") {
			r.stopURL = strings.ReplaceAll(r.takeURL, "/job-take/", "/job-stop/")
		} else {
			r.log.Warn("job-take URL does not contain /job-take/; job-stop channel disabled")
		}
	}
	r.doneURL = strings.ReplaceAll(envOr(env, "RUNPOD_WEBHOOK_POST_OUTPUT", "JOB_DONE_URL"), "$RUNPOD_POD_ID", r.workerID)
	r.streamURL = strings.ReplaceAll(envOr(env, "RUNPOD_WEBHOOK_POST_STREAM", "JOB_STREAM_URL"), "$RUNPOD_POD_ID", r.workerID)
	if ping := env("RUNPOD_WEBHOOK_PING"); ping != "" && r.apiKey != "" && r.podIDEnv != "" {
		r.pingURL = strings.ReplaceAll(ping, "$RUNPOD_POD_ID", r.workerID)
	}
	return r, nil
}

func durOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func envOr(env func(string) string, k, def string) string {
	if v := env(k); v != "" {
		return v
	}
	return def
}

func userAgent(integration string) string {
	ua := fmt.Sprintf("RunPod-Python-SDK/%s (%s; %s) Language/Go %s",
		Version, runtime.GOOS, runtime.GOARCH, strings.TrimPrefix(runtime.Version(), "go"))
	if integration != "" {
		ua += " Integration/" + integration
	}
	return ua
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func (r *runner) run(ctx context.Context) error {
	r.log.Info("Starting Serverless Worker | Version " + Version)

	// Background loops (heartbeat, job-stop) outlive ctx until running jobs
	// have drained, so pings keep listing them and they can still be stopped.
	bgCtx, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	if r.pingURL != "" {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); r.heartbeat(bgCtx) }()
	}
	if r.stopURL != "" {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); r.stopLoop(bgCtx) }()
	}

	fetchCtx, fetchCancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.stopFetch = fetchCancel
	r.mu.Unlock()
	r.takeLoop(fetchCtx, context.WithoutCancel(ctx))
	fetchCancel()

	r.jobsWG.Wait()
	bgCancel()
	bgWG.Wait()
	r.log.Info("Worker stopped")
	return nil
}

// ---- job-take ----

func (r *runner) inflightCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}

func (r *runner) takeLoop(ctx, jobBase context.Context) {
	for ctx.Err() == nil {
		needed := r.concurrency - r.inflightCount()
		if needed <= 0 {
			select {
			case <-r.slotFree:
			case <-ctx.Done():
			}
			continue
		}
		jobs, pause := r.fetch(ctx, needed)
		for _, j := range jobs {
			r.launch(jobBase, j)
		}
		if pause > 0 {
			sleepCtx(ctx, pause)
		}
	}
}

// fetch performs one job-take (or job-take-batch) request. It returns the jobs
// received and how long to pause before the next request.
func (r *runner) fetch(ctx context.Context, needed int) ([]*Job, time.Duration) {
	inProgress := "0"
	if r.inflightCount() > 0 {
		inProgress = "1"
	}
	var url string
	if needed > 1 {
		url = strings.ReplaceAll(r.takeURL, "/job-take/", "/job-take-batch/") +
			"&batch_size=" + strconv.Itoa(needed) + "&job_in_progress=" + inProgress
	} else {
		url = r.takeURL + "&job_in_progress=" + inProgress
	}
	rctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	status, ctype, body, err := r.get(rctx, url)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, 0
		case rctx.Err() != nil:
			r.log.Debug("job-take timed out, retrying")
			return nil, 0
		}
		r.log.Error("Failed to get job. | " + err.Error())
		return nil, transportErrPause
	}
	switch {
	case status == http.StatusNoContent:
		r.log.Debug("No content, no job to process.")
		return nil, 0
	case status == http.StatusBadRequest:
		r.log.Debug("Received 400 status, expected when FlashBoot is enabled.")
		return nil, 0
	case status == http.StatusTooManyRequests:
		r.log.Warn("job-take: too many requests (429)")
		return nil, r.tooMany
	case status >= 400:
		r.log.Error(fmt.Sprintf("Failed to get job, status code: %d", status))
		return nil, 0
	}
	if !isJSONType(ctype) || len(body) == 0 {
		return nil, 0
	}
	jobs, err := parseJobs(body)
	if err != nil {
		r.log.Error("Failed to get job. | " + err.Error())
	}
	return jobs, 0
}

func isJSONType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// parseJobs decodes a job-take reply: an object is one job (must have non-null
// id and input), an array is a batch (each element must be an object with an
// id). Invalid JSON or other JSON values give no job and no error.
func parseJobs(body []byte) ([]*Job, error) {
	body = bytes.TrimSpace(body)
	if !json.Valid(body) {
		return nil, nil
	}
	switch body[0] {
	case '{':
		j, err := decodeJob(body)
		if err != nil {
			return nil, err
		}
		var missing []string
		if j.ID == "" {
			missing = append(missing, "id")
		}
		if j.Input == nil {
			missing = append(missing, "input")
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("job has missing field(s): %s", strings.Join(missing, ", "))
		}
		return []*Job{j}, nil
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil {
			return nil, nil
		}
		var jobs []*Job
		var errs []error
		for _, e := range elems {
			j, err := decodeJob(e)
			if err == nil && j.ID == "" {
				err = errors.New("batch job has no id")
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			jobs = append(jobs, j)
		}
		return jobs, errors.Join(errs...)
	}
	return nil, nil
}

func isNull(b json.RawMessage) bool {
	return len(b) == 0 || string(bytes.TrimSpace(b)) == "null"
}

func decodeJob(raw json.RawMessage) (*Job, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errors.New("job is not a JSON object")
	}
	j := &Job{Raw: m}
	if v, ok := m["id"]; ok && !isNull(v) {
		var s string
		if json.Unmarshal(v, &s) == nil {
			j.ID = s
		} else {
			j.ID = string(bytes.TrimSpace(v)) // a non-string id, used as text
		}
	}
	if v, ok := m["input"]; ok && !isNull(v) {
		j.Input = v
	}
	if v, ok := m["webhook"]; ok {
		var s string
		if json.Unmarshal(v, &s) == nil {
			j.Webhook = &s
		}
	}
	if v, ok := m["s3Config"]; ok && !isNull(v) {
		j.S3Config = v
	}
	if v, ok := m["policy"]; ok && !isNull(v) {
		j.Policy = v
	}
	return j, nil
}

// ---- running jobs ----

func (r *runner) launch(base context.Context, job *Job) {
	jctx, cancel := context.WithCancel(base)
	st := &jobState{job: job, cancel: cancel}
	r.mu.Lock()
	if _, dup := r.inflight[job.ID]; dup {
		r.mu.Unlock()
		cancel()
		r.log.Warn("job already in progress; duplicate dropped", JobIDKey, job.ID)
		return
	}
	r.inflight[job.ID] = st
	r.order = append(r.order, job.ID)
	r.mu.Unlock()
	job.r = r
	r.jobsWG.Add(1)
	go r.runJob(jctx, st)
}

func (r *runner) finishJob(st *jobState) {
	st.cancel()
	r.mu.Lock()
	delete(r.inflight, st.job.ID)
	for i, id := range r.order {
		if id == st.job.ID {
			r.order = append(r.order[:i:i], r.order[i+1:]...)
			break
		}
	}
	stop := r.stopFetch
	r.mu.Unlock()
	if r.cfg.RefreshWorker && stop != nil {
		stop()
	}
	select {
	case r.slotFree <- struct{}{}:
	default:
	}
	r.jobsWG.Done()
}

type panicError struct {
	val   any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.val) }

func catch(err *error) {
	if p := recover(); p != nil {
		*err = &panicError{val: p, stack: stackTrace()}
	}
}

func stackTrace() []byte {
	buf := make([]byte, 64<<10)
	return buf[:runtime.Stack(buf, false)]
}

func (r *runner) runJob(ctx context.Context, st *jobState) {
	defer r.finishJob(st)
	job := st.job
	r.log.Info("Started", JobIDKey, job.ID)

	var (
		body     []byte
		isStream bool
		send     = true
	)
	if r.cfg.StreamHandler != nil {
		isStream = true
		body, send = r.runStream(ctx, st, func(yield func(any) error) error {
			return r.cfg.StreamHandler(ctx, job, yield)
		})
	} else {
		var out any
		err := func() (err error) {
			defer catch(&err)
			out, err = r.cfg.Handler(ctx, job)
			return err
		}()
		stream, isStreamResult := asStream(out)
		switch {
		case err == nil && isStreamResult:
			isStream = true
			body, send = r.runStream(ctx, st, stream)
		case st.stopped.Load() && errors.Is(err, context.Canceled):
			send = false
		default:
			body, err = r.buildResult(out, err)
			if err != nil {
				// json.dumps failing in the SDK: logged, result lost.
				r.log.Error("Error while returning job result: "+err.Error(), JobIDKey, job.ID)
				send = false
			}
		}
	}
	if !send {
		if st.stopped.Load() {
			r.log.Info("Job stopped by the platform; no result sent", JobIDKey, job.ID)
		}
		return
	}
	r.setLastRequestID(job.ID)
	if err := r.postResult(context.WithoutCancel(ctx), r.jobURL(r.doneURL, job.ID, isStream), body, job.ID); err != nil {
		r.log.Error("Failed to return job results. | "+err.Error(), JobIDKey, job.ID)
	} else {
		r.log.Debug("Results sent.", JobIDKey, job.ID)
	}
	r.log.Info("Finished", JobIDKey, job.ID)
}

func asStream(v any) (Stream, bool) {
	switch s := v.(type) {
	case Stream:
		return s, s != nil
	case func(func(any) error) error:
		return s, s != nil
	}
	return nil, false
}

// buildResult turns a handler outcome into the job-done body, like the SDK's
// run_job.
func (r *runner) buildResult(out any, herr error) ([]byte, error) {
	var pairs []kv
	if herr != nil {
		info, err := r.errorInfo(herr)
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, kv{"error", info})
	} else if m, ok := asDict(out); ok {
		errv := m["error"]
		refresh := m["refresh_worker"]
		delete(m, "error")
		delete(m, "refresh_worker")
		if len(m) > 0 {
			pairs = append(pairs, kv{"output", m})
		}
		if truthy(errv) {
			pairs = append(pairs, kv{"error", errv})
		}
		if truthy(refresh) {
			pairs = append(pairs, kv{"stopPod", true})
		}
	} else {
		pairs = append(pairs, kv{"output", out})
	}
	return pyObject(false, r.withStopPod(pairs)...)
}

func (r *runner) withStopPod(pairs []kv) []kv {
	if !r.cfg.RefreshWorker {
		return pairs
	}
	for _, p := range pairs {
		if p.k == "stopPod" {
			return pairs
		}
	}
	return append(pairs, kv{"stopPod", true})
}

// errorInfo is the JSON string the SDK sends for a handler exception.
func (r *runner) errorInfo(err error) (string, error) {
	typ := "<class 'GoError'>"
	msg := err.Error()
	tb := fmt.Sprintf("%T: %s\n", err, msg)
	var p *panicError
	if errors.As(err, &p) {
		typ = "<class 'GoPanic'>"
		msg = fmt.Sprint(p.val)
		tb = string(p.stack)
	}
	b, e := pyObject(true,
		kv{"error_type", typ},
		kv{"error_message", msg},
		kv{"error_traceback", tb},
		kv{"hostname", r.hostname},
		kv{"worker_id", envOr(r.env, "RUNPOD_POD_ID", "unknown")},
		kv{"runpod_version", Version},
	)
	return string(b), e
}

var errStreamStopped = errors.New("worker: stream stopped by a yielded error")

// runStream runs a streaming job like the SDK's generator path and returns
// the final job-done body.
func (r *runner) runStream(ctx context.Context, st *jobState, fn Stream) ([]byte, bool) {
	job := st.job
	var (
		mu       sync.Mutex
		agg      = []json.RawMessage{}
		yielded  any
		hasYErr  bool
		streamed = r.jobURL(r.streamURL, job.ID, false)
	)
	yield := func(chunk any) error {
		mu.Lock()
		defer mu.Unlock()
		if hasYErr {
			return errStreamStopped
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if m, ok := asDict(chunk); ok {
			if ev, has := m["error"]; has {
				yielded, hasYErr = ev, true
				return errStreamStopped
			}
		}
		raw, err := compactJSON(chunk)
		if err != nil {
			r.log.Error("Error while returning job result: "+err.Error(), JobIDKey, job.ID)
			return err
		}
		if r.cfg.ReturnAggregateStream {
			agg = append(agg, raw)
		}
		body, _ := pyObject(false, kv{"output", json.RawMessage(raw)})
		r.setLastRequestID(job.ID)
		if err := r.post(ctx, streamed, body, job.ID); err != nil {
			r.log.Error("Failed to return job results. | "+err.Error(), JobIDKey, job.ID)
		} else {
			r.log.Debug("Intermediate results sent.", JobIDKey, job.ID)
		}
		return nil
	}
	err := func() (err error) {
		defer catch(&err)
		return fn(yield)
	}()
	r.log.Info("Finished running generator.", JobIDKey, job.ID)

	mu.Lock()
	defer mu.Unlock()
	gotYErr := hasYErr
	hasYErr = true // any late yield is refused
	var pairs []kv
	switch {
	case gotYErr:
		pairs = []kv{{"error", pyStr(yielded)}}
	case err != nil && st.stopped.Load() && errors.Is(err, context.Canceled):
		return nil, false
	case err != nil:
		pairs = []kv{{"error", "handler: " + err.Error() + " \ntraceback: "}}
	default:
		pairs = []kv{{"output", agg}}
	}
	body, e := pyObject(false, r.withStopPod(pairs)...)
	if e != nil {
		r.log.Error("Error while returning job result: "+e.Error(), JobIDKey, job.ID)
		return nil, false
	}
	return body, true
}

// ---- job-stop ----

func (r *runner) stopLoop(ctx context.Context) {
	for ctx.Err() == nil {
		ids, pause := r.pollStop(ctx)
		if len(ids) > 0 {
			r.stopJobs(ids)
		}
		if pause > 0 {
			sleepCtx(ctx, pause)
		}
	}
}

func (r *runner) pollStop(ctx context.Context) ([]string, time.Duration) {
	rctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	status, ctype, body, err := r.get(rctx, r.stopURL)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0
		}
		if rctx.Err() == nil {
			r.log.Error("Failed to get stop signals. | " + err.Error())
		}
		return nil, r.stopDelay
	}
	switch {
	case status == http.StatusTooManyRequests:
		return nil, r.tooMany
	case status >= 400:
		r.log.Error(fmt.Sprintf("Failed to get stop signals, status code: %d", status))
		return nil, r.stopDelay
	case status != http.StatusOK || !isJSONType(ctype):
		return nil, r.stopDelay
	}
	var reply struct {
		JobsToStop []any `json:"jobsToStop"`
	}
	if json.Unmarshal(body, &reply) != nil {
		return nil, r.stopDelay
	}
	var ids []string
	for _, v := range reply.JobsToStop {
		if s, ok := v.(string); ok {
			ids = append(ids, s)
		}
	}
	if len(ids) == 0 {
		return nil, r.stopDelay
	}
	return ids, 0
}

func (r *runner) stopJobs(ids []string) {
	r.mu.Lock()
	var hit []*jobState
	for _, id := range ids {
		if st, ok := r.inflight[id]; ok {
			hit = append(hit, st)
		}
	}
	r.mu.Unlock()
	for _, st := range hit {
		r.log.Info("Stopping job at the platform's request", JobIDKey, st.job.ID)
		st.stopped.Store(true)
		st.cancel()
	}
}

// ---- heartbeat ----

func (r *runner) pingInterval() time.Duration {
	ms, err := strconv.Atoi(strings.TrimSpace(r.env("RUNPOD_PING_INTERVAL")))
	if err != nil {
		ms = 10000
	}
	d := time.Duration(ms/1000) * time.Second
	if d <= 0 {
		d = minPingInterval
	}
	return d
}

func (r *runner) heartbeat(ctx context.Context) {
	interval := r.pingInterval()
	for {
		r.ping(ctx, interval)
		if !sleepCtx(ctx, interval) {
			return
		}
	}
}

func (r *runner) pingQuery() string {
	r.mu.Lock()
	ids := strings.Join(r.order, ",")
	r.mu.Unlock()
	q := ""
	if ids != "" {
		q = "job_id=" + queryEscape(ids) + "&"
	}
	return q + "runpod_version=" + queryEscape(Version)
}

// appendQuery adds q to u the way requests adds params: after "?" when u has
// no query (or ends with "?"), after "&" otherwise.
func appendQuery(u, q string) string {
	switch i := strings.IndexByte(u, '?'); {
	case i < 0:
		return u + "?" + q
	case i == len(u)-1:
		return u + q
	}
	return u + "&" + q
}

func (r *runner) ping(ctx context.Context, interval time.Duration) {
	url := appendQuery(r.pingURL, r.pingQuery())
	timeout := max(2*interval, time.Second)
	// urllib3 Retry(total=3, backoff_factor=1): retries after 0, 2, 4 units.
	for attempt := 0; attempt <= 3; attempt++ {
		if attempt > 1 && !sleepCtx(ctx, r.retryBase*time.Duration(1<<(attempt-1))) {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		if err != nil {
			cancel()
			r.log.Error("heartbeat: " + err.Error())
			return
		}
		req.Header.Set("Authorization", r.apiKey)
		req.Header.Set("User-Agent", "python-requests/"+Version)
		resp, err := r.client.Do(req)
		retry := err != nil
		if err == nil {
			drain(resp)
			retry = resp.StatusCode == 429 || resp.StatusCode == 500 || resp.StatusCode == 502 ||
				resp.StatusCode == 503 || resp.StatusCode == 504
		}
		cancel()
		if !retry || ctx.Err() != nil {
			return
		}
	}
	r.log.Error("heartbeat: ping failed")
}
